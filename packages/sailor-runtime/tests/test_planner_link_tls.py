"""The controller presents its token to a planner server that requires it, over TLS trusting
the planner's CA (issue 24, item 6): a real planner server on 127.0.0.1:0 with a real openssl
certificate (skipped with the reason where openssl cannot make one)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sailor_planner.service.access import Access
from sailor_planner.service.server import create_server
from sailor_runtime.controller.controller import Controller, ControllerConfig
from sailor_runtime.errors import PlannerUnavailableError
from sailor_sim import Inventory, Job

JOB = Job.create("OPT-350M", 256, 2048)
SMALL = Inventory.of({("A100-40", "us-central1-a"): 8})


def make_cert(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "cert.key"
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"]
        + ["-keyout", str(key), "-out", str(cert)],
        capture_output=True,
    )
    if made.returncode != 0:
        pytest.skip(f"openssl cannot make a test certificate here: {made.stderr[-200:]!r}")
    return cert, key


def _controller(run_dir: Path, port: int, **kw) -> Controller:
    cfg = ControllerConfig.for_job(
        job=JOB, steps=4, checkpoint_every=2, run_dir=run_dir,
        planner_address=f"127.0.0.1:{port}", planner_wait_s=10, **kw,
    )  # fmt: skip
    return Controller(cfg)


def test_the_controller_plans_against_a_planner_that_requires_its_token(tmp_path):
    cert, key = make_cert(tmp_path)
    access = Access(token="shared", tls_cert=cert, tls_key=key)
    server, port = create_server("127.0.0.1:0", access=access)
    good = _controller(tmp_path / "a", port, token="shared", planner_ca=cert)
    other = _controller(tmp_path / "b", port, token="other", planner_ca=cert)
    try:
        assert good.planner.plan(JOB, SMALL).plan.num_gpus >= 1
        with pytest.raises(PlannerUnavailableError, match="refused"):
            other.planner.plan(JOB, SMALL)
    finally:
        good.close()
        other.close()
        server.stop(grace=None)
