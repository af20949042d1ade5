"""A reader that goes away (``sailor-sim prices | head -1``) ends every Sailor CLI quietly with
status 141 (128 + SIGPIPE, what the shell reports for ``yes | head -1``): no traceback, no
'Exception ignored' and no error line on stderr. rich ended such a command with a bare 1, click
with 1 and the error line '[Errno 32] Broken pipe' or a shutdown 'Exception ignored' message.

The real console scripts write into a real pipe whose read end is closed before they start, so
their first write meets the closed pipe whatever the timing; one shell pipeline checks the
same through ``head -1``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
MIXTRAL = ROOT / "examples/configs/mixtral-8x7b/config.json"
PIPE_CLOSED = 141

COMMANDS = {
    # rich tables (rich's own handler exited 1)
    "sim simulate": ["sailor-sim", "simulate", "--model", str(MIXTRAL), "--gpu", "L4"]
    + ["--tp", "8", "--gbs", "8", "--seq", "4096", "--dtype", "fp8"],
    # typer.echo of one long JSON text (click's handler exited 1)
    "sim prices --json": ["sailor-sim", "prices", "--json"],
    "planner plan --json": ["sailor-planner", "plan", "--model", "OPT-350M", "--gbs", "64"]
    + ["--seq-len", "2048", "--gpus", "A100-40@us-central1-a=8", "--json"],
    "planner --help": ["sailor-planner", "--help"],
    "profiler --help": ["sailor-profiler", "--help"],
    "sailor --help": ["sailor", "--help"],
}


def run_into_closed_pipe(argv: list[str]) -> tuple[int, str]:
    """Exit status and stderr of ``argv`` writing its stdout into a pipe nobody reads."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [str(BIN / argv[0]), *argv[1:]],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=180,
            cwd=ROOT,
        )
    finally:
        os.close(write_end)
    return done.returncode, done.stderr


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_closed_pipe_ends_the_command_quietly_with_141(name):
    status, err = run_into_closed_pipe(COMMANDS[name])
    assert (status, err) == (PIPE_CLOSED, ""), err


def test_head_reading_one_line_of_a_long_output(tmp_path):
    """The user's pipeline: ``head -1`` takes the first line and goes; the CLI's status is the
    one the shell reports for a writer killed by SIGPIPE."""
    line = " ".join(COMMANDS["sim simulate"])
    script = f"{BIN}/{line} 2>err | head -1; echo ${{PIPESTATUS[0]}}"
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=180, cwd=tmp_path
    )
    first, status = done.stdout.splitlines()
    assert first.startswith("Job: "), done.stdout
    assert int(status) in (0, PIPE_CLOSED)  # 0 if everything fit the pipe before head left
    assert (tmp_path / "err").read_text() == ""


ANOTHER_PIPE = """
import os, sys, typer
from sailor_sim import inputs

app = typer.Typer()

@app.command()
def send() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    print("to stdout", flush=True)
    os.write(write_end, b"to a peer that left")

inputs.run_app(app, "send", [])
"""


def test_another_pipe_that_broke_is_still_an_error():
    """Only stdout's reader leaving is quiet: a peer gone (here a pipe of the command's own)
    is one error line and exit 2, as any OSError."""
    done = subprocess.run(
        [sys.executable, "-c", ANOTHER_PIPE], capture_output=True, text=True, timeout=60
    )
    assert done.stdout == "to stdout\n"
    assert (done.returncode, done.stderr) == (2, "error: [Errno 32] Broken pipe\n")
