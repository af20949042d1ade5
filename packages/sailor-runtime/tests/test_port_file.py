"""--port-file: `sailor controller` and `sailor worker` started with --port 0 (an ephemeral port)
write the port they bound, and a script waiting for the file reads that port and nothing else.

The controller's file was written in place after start, so a file left by an earlier run held
its old port until then (a script's `until [ -s port ]` read it at once), and `sailor worker`
had no --port-file at all: its ephemeral agent port could only be read from its log. Real
processes on 127.0.0.1."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "sailor_runtime.cli"]


def first_port_read(path: Path, process: subprocess.Popen, timeout_s: float = 120.0) -> str:
    """What a script polling ``path`` reads first, once it exists (renamed into place whole:
    never empty, never half a number)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return path.read_text()
        except FileNotFoundError:
            pass
        assert process.poll() is None, f"exited {process.returncode} before writing {path}"
        time.sleep(0.005)
    raise AssertionError(f"{path} was not written")


def serves(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.timeout(240)
def test_port_files_name_the_ephemeral_ports_bound(tmp_path):
    control_file, agent_file, log = tmp_path / "port", tmp_path / "agent.port", tmp_path / "log"
    with open(log, "w") as out:  # min-workers 5: it never plans, so no planner is needed
        controller = subprocess.Popen(
            [*CLI, "controller", "--planner", "127.0.0.1:9", "--run-dir", str(tmp_path / "run"),
             "--port", "0", "--port-file", str(control_file), "--min-workers", "5"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
    worker = None
    try:
        port = first_port_read(control_file, controller)
        assert re.fullmatch(r"\d+\n", port), repr(port)
        assert f"controller listening on 127.0.0.1:{port.strip()}" in log.read_text()
        worker = subprocess.Popen(
            [*CLI, "worker", "--controller", f"127.0.0.1:{port.strip()}", "--gpu-type", "CPU",
             "--worker-id", "w1", "--cold", "--workdir", str(tmp_path / "w"), "--port", "0",
             "--port-file", str(agent_file)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        agent_port = first_port_read(agent_file, worker)
        assert re.fullmatch(r"\d+\n", agent_port), repr(agent_port)
        assert serves(int(agent_port))
        assert f"127.0.0.1:{agent_port.strip()}" in log.read_text()  # the address registered
    finally:
        controller.send_signal(signal.SIGTERM)
        controller.wait(timeout=60)
        if worker is not None:
            worker.wait(timeout=60)
    assert not list(tmp_path.glob(".*.part")), "a temporary port file was left"


@pytest.mark.parametrize("command", ["controller", "worker"])
def test_a_port_file_left_by_an_earlier_run_is_removed_at_start(tmp_path, command):
    """A start that fails after the flags were read (here: a CA file that is not PEM) leaves
    no port: the earlier run's file named a port nothing serves now."""
    stale, bad_ca = tmp_path / "port", tmp_path / "ca.pem"
    stale.write_text("1\n")
    bad_ca.write_text("not a certificate")
    where = {"controller": ["--planner", "127.0.0.1:9", "--run-dir", str(tmp_path / "run")],
             "worker": ["--controller", "127.0.0.1:9", "--gpu-type", "CPU",
                        "--workdir", str(tmp_path / "w")]}  # fmt: skip
    done = subprocess.run(
        [*CLI, command, *where[command], "--port-file", str(stale), "--tls-ca", str(bad_ca)],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "--tls-ca" in done.stderr, done.stderr[-2000:]
    assert not stale.exists(), stale.read_text()
