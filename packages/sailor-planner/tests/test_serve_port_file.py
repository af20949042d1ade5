"""`sailor-planner serve --port 0 --port-file PATH`: a scheduler learns the ephemeral port from
the file, as with `sailor controller` and `sailor worker`, instead of parsing stdout. A path
that cannot be written is one line and exit 2 before anything listens; a file left by an
earlier run is removed at start. Real server processes on 127.0.0.1, real gRPC calls."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sailor_planner.service.client import PlannerClient
from sailor_planner.service.server import SERVICE_NAME
from sailor_sim import Job, Plan
from sailor_sim.simulate.simulator import Simulator

SERVE = [sys.executable, "-c", "from sailor_planner.cli import main; main()", "serve"]


def _first_read(path: Path, proc: subprocess.Popen, timeout_s: float = 60.0) -> str:
    """What a script polling ``path`` reads first (renamed into place: never empty or half)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return path.read_text()
        except FileNotFoundError:
            assert proc.poll() is None, f"exited {proc.returncode} before writing {path}"
            time.sleep(0.005)
    raise AssertionError(f"{path} was not written")


def test_the_port_file_names_the_port_the_server_answers_on(tmp_path):
    port_file = tmp_path / "planner.port"
    cmd = [*SERVE, "--port", "0", "--port-file", str(port_file)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        text = _first_read(port_file, proc)
        assert re.fullmatch(r"\d+\n", text), repr(text)
        port = int(text)
        job = Job.create("OPT-350M", 64, 2048)
        plan = Plan.uniform(job, "A100-40", "us-central1-a", pp=1, dp=2, tp=1, microbatch_size=1)
        with PlannerClient(f"127.0.0.1:{port}", timeout_s=60) as client:
            assert client.simulate(job, plan) == Simulator().estimate(job, plan).to_proto()
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=10
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        proc.send_signal(signal.SIGTERM)
        said, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, said
    assert f"on 127.0.0.1:{port} " in said.splitlines()[0], said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["planner.port"]  # no temporary file


@pytest.mark.parametrize(
    "where, words",
    [
        ("missing/port", "does not exist; create it first"),
        (".", "is a folder; give a file name"),
    ],
)
def test_a_port_file_that_cannot_be_written_is_refused_before_serving(tmp_path, where, words):
    path = tmp_path / where
    done = subprocess.run([*SERVE, "--port", "0", "--port-file", str(path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "", done.stdout  # no "serving" line: nothing listened
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --port-file: "), lines
    assert words in lines[0], lines[0]


def test_a_stale_port_file_is_removed_when_the_start_fails(tmp_path):
    """A start refused after the flags were read (a TLS key without its certificate) leaves no
    port file: the earlier run's named a port nothing serves now."""
    stale, key = tmp_path / "port", tmp_path / "key.pem"
    stale.write_text("1\n")
    key.write_text("not a key")
    done = subprocess.run([*SERVE, "--port-file", str(stale), "--tls-key", str(key)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and done.stderr.startswith("error: "), done.stderr
    assert not stale.exists()
