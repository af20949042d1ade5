"""Token and TLS, one implementation for every Sailor service (issue 24, item 6): certificates
and keys checked at start with an error naming the file; PlannerClient and the controller's
planner link present a token and trust a CA. Real servers on 127.0.0.1:0, real certificates
made by openssl (skipped with the reason where it cannot make one)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from sailor_planner.errors import RequestError
from sailor_planner.service.access import Access, client_channel, server_credentials
from sailor_planner.service.client import PlannerClient
from sailor_planner.service.server import create_server
from sailor_sim import Inventory, Job

JOB = Job.create("OPT-350M", 256, 2048)
SMALL = Inventory.of({("A100-40", "us-central1-a"): 8})


def make_cert(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"]
        + ["-keyout", str(key), "-out", str(cert)],
        capture_output=True,
    )
    if made.returncode != 0:
        pytest.skip(f"openssl cannot make a test certificate here: {made.stderr[-200:]!r}")
    return cert, key


@pytest.fixture()
def pair(tmp_path):
    return make_cert(tmp_path, "a")


def test_garbage_and_mismatched_files_are_refused_naming_the_file(tmp_path, pair):
    cert, key = pair
    other_cert, other_key = make_cert(tmp_path, "b")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text(
        "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n"
    )
    plain = tmp_path / "plain.txt"
    plain.write_text("hello\n")
    cases = [
        (garbage, key, "garbage.pem"),
        (plain, key, "plain.txt"),
        (cert, plain, "plain.txt"),
        (cert, other_key, "does not match"),
        (other_cert, key, "does not match"),
    ]
    for c, k, needle in cases:
        with pytest.raises(RequestError, match=needle) as err:
            server_credentials(c, k)
        assert "bind" not in str(err.value)
        with pytest.raises(RequestError, match=needle):
            create_server("127.0.0.1:0", access=Access(tls_cert=c, tls_key=k))


def test_serve_with_a_mismatched_key_exits_2_at_once(tmp_path, pair):
    cert, _ = pair
    _, other_key = make_cert(tmp_path, "b")
    code = "from sailor_planner.cli import main; main()"
    start = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-c", code, "serve", "--tls-cert", str(cert), "--tls-key", str(other_key)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not match" in lines[0] and str(other_key) in lines[0]
    assert time.monotonic() - start < 30


def test_planner_client_presents_the_token_and_trusts_the_ca(pair):
    cert, key = pair
    server, port = create_server(
        "127.0.0.1:0", access=Access(token="s3cret", tls_cert=cert, tls_key=key)
    )
    address = f"127.0.0.1:{port}"
    try:
        with PlannerClient(address, timeout_s=60, token="s3cret", ca=cert) as client:
            assert client.plan(JOB, SMALL).plans
        with PlannerClient(address, timeout_s=10, token="wrong", ca=cert) as client:
            with pytest.raises(grpc.RpcError) as err:
                client.plan(JOB, SMALL)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with PlannerClient(address, timeout_s=3, token="s3cret") as client:  # no TLS: no talk
            with pytest.raises(grpc.RpcError) as err:
                client.plan(JOB, SMALL)
            assert err.value.code() in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED,
            )
    finally:
        server.stop(grace=None)


def test_a_bad_ca_file_is_refused_naming_it(tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("no pem here")
    with pytest.raises(RequestError, match="ca.pem"):
        client_channel("127.0.0.1:1", None, bad)


@pytest.mark.parametrize("token", ["s3crét", "line\n", "tab\there"])
def test_a_token_no_client_can_send_is_refused_at_start(token):
    """gRPC metadata values are printable ASCII: `serve --token s3crét` (or a token file's
    trailing newline in SAILOR_PLANNER_TOKEN) started a server whose every call failed INTERNAL
    'Invalid metadata' (with a C-core 'Illegal header value' log line) in PlannerClient."""
    code = "from sailor_planner.cli import main; main()"
    r = subprocess.run(
        [sys.executable, "-c", code, "serve", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "SAILOR_PLANNER_TOKEN": token},
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: --token: must be printable ASCII"), lines[0]
    assert token not in lines[0]  # a secret is not echoed
    with pytest.raises(RequestError, match="^token: must be printable ASCII"):
        PlannerClient("127.0.0.1:1", token=token)
