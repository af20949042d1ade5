"""Shared helpers for the runtime's end-to-end tests (real processes on 127.0.0.1)."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config):
    # Rank processes run one thread each: several share this machine's few cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def make_certificate():
    """``make(folder, *ips)``: see ``_make_certificate``."""
    return _make_certificate


def _make_certificate(folder, *ips: str):
    """A self-signed CA-capable certificate for ``ips`` (and localhost) with its key, made
    by the openssl command; None when openssl is absent. Returns (cert, key) paths."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        return None
    cert, key = folder / "cert.pem", folder / "key.pem"
    names = ",".join(["DNS:localhost", *(f"IP:{ip}" for ip in ips)])
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=sailor-test", "-keyout", str(key), "-out", str(cert),
         "-addext", f"subjectAltName={names}",
         "-addext", "basicConstraints=critical,CA:TRUE"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key
