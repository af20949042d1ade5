"""Every Sailor CLI (``inputs.run_app``) takes SIGTERM as Ctrl-C: the command's ``finally``
blocks run (a command stops what it started) and the process exits 143, Ctrl-C 130; the
handler before the command is back after it. A real process gets the real signal."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from sailor_sim import inputs

COMMAND = textwrap.dedent(
    """
    import sys, time, typer
    from pathlib import Path
    from sailor_sim import inputs

    app = typer.Typer()

    @app.command()
    def wait(marker: Path) -> None:
        try:  # the marker inside: a signal while it is written still finds the cleanup
            Path(str(marker) + ".tmp").write_text("started")
            Path(str(marker) + ".tmp").replace(marker)
            time.sleep(60)
        finally:
            marker.write_text("cleaned up")

    inputs.run_app(app, "wait", [sys.argv[1]])
    """
)


@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["TERM", "INT"]
)
def test_a_signal_runs_the_commands_cleanup_and_exits_with_its_status(tmp_path, signum, status):
    marker = tmp_path / "marker"
    proc = subprocess.Popen(
        [sys.executable, "-c", COMMAND, str(marker)], stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():  # renamed into place whole: "started" once it exists
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == status, err
    assert marker.read_text() == "cleaned up"
    assert "Traceback" not in err, err


def test_the_previous_sigterm_handler_is_back_after_the_command():
    def mine(*_):
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        with pytest.raises(SystemExit) as exited:
            inputs.run_app(lambda **_: 0, "noop", [])
        assert exited.value.code == 0
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_command_run_off_the_main_thread_runs_without_a_handler():
    """Python installs signal handlers from the main thread only: ``run_app`` on another
    thread (an embedding program's worker) runs the command and leaves the handlers alone."""
    import threading

    codes = []

    def call():
        try:
            inputs.run_app(lambda **_: 0, "noop", [])
        except SystemExit as exc:
            codes.append(exc.code)

    before = signal.getsignal(signal.SIGTERM)
    worker = threading.Thread(target=call)
    worker.start()
    worker.join(30)
    assert codes == [0]
    assert signal.getsignal(signal.SIGTERM) is before
