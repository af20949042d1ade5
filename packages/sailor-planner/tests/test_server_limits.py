"""The planner server under hostile and careless clients (issue 13, items 1, 2 and 9).

Real servers on 127.0.0.1:0 and real ``sailor-planner serve`` processes.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sailor_planner.proto import planner_pb2_grpc
from sailor_planner.service.access import TOKEN_METADATA_KEY, Access
from sailor_planner.service.client import PlannerClient
from sailor_planner.service.limits import ServerLimits
from sailor_planner.service.paths import DataRoots
from sailor_planner.service.server import create_server
from sailor_planner.sources import cached_planners
from sailor_sim import Inventory, Job, Plan, Replica, Stage
from sailor_sim.catalog.prices import zones_offering
from sailor_testing import wait_until

JOB = Job.create("OPT-350M", 1024, 2048)
SMALL = Inventory.parse(["A100-40@us-central1-a=8"])
TYPES = ("A100-40", "V100-16", "H100-80", "T4")


def wide_inventory(per_pool: int, zones: int = 40) -> Inventory:
    """Many pools: a search over it runs for minutes without a deadline."""
    names = zones_offering(TYPES)[:zones]
    return Inventory.of({(g, z): per_pool for g in TYPES for z in names})


def plan_request(inventory: Inventory, **kwargs):
    return PlannerClient.request(JOB, inventory, **kwargs)


@pytest.fixture()
def one_slot():
    """A server with one search slot and no queue: a search left running blocks everything."""
    server, port = create_server(
        "127.0.0.1:0", limits=ServerLimits(max_searches=1, max_queued=0, max_candidates=10**9)
    )
    service = server.planner_service  # read-only: its slots' load
    yield f"127.0.0.1:{port}", service
    server.stop(grace=None)


def test_a_cancelled_plan_stops_at_once_and_frees_its_slot(one_slot):
    address, service = one_slot
    with grpc.insecure_channel(address) as channel:
        stub = planner_pb2_grpc.PlannerServiceStub(channel)
        future = stub.Plan.future(plan_request(wide_inventory(250)))
        wait_until(lambda: service.slots.load()[0] == 1, 10)
        time.sleep(1.0)
        assert service.slots.load()[0] == 1, "the search should still be running"
        future.cancel()
        stopped = wait_until(lambda: service.slots.load()[0] == 0, 5)
        # 100 ms in the issue; slack for a loaded 2-core test machine.
        assert stopped < 0.5, f"search ran on {stopped:.3f} s after the cancel"
        # The slot is free again: a small request is served.
        reply = stub.Plan(plan_request(SMALL), timeout=60)
        assert reply.plans


def test_an_expired_deadline_stops_the_search(one_slot):
    address, service = one_slot
    with grpc.insecure_channel(address) as channel:
        stub = planner_pb2_grpc.PlannerServiceStub(channel)
        try:
            reply = stub.Plan(plan_request(wide_inventory(250)), timeout=1.5)
            assert reply.partial  # the search returned its best so far in time
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        wait_until(lambda: service.slots.load()[0] == 0, 1.0)


def test_a_full_queue_is_refused_and_health_stays_answered(one_slot):
    address, service = one_slot
    with grpc.insecure_channel(address) as channel:
        stub = planner_pb2_grpc.PlannerServiceStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        future = stub.Plan.future(plan_request(wide_inventory(250)))
        wait_until(lambda: service.slots.load()[0] == 1, 10)
        with pytest.raises(grpc.RpcError) as exc:
            stub.Plan(plan_request(SMALL), timeout=10)
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "retry later" in exc.value.details()
        start = time.monotonic()
        reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        assert time.monotonic() - start < 1.0
        future.cancel()


def test_an_oversized_inventory_is_resource_exhausted():
    server, port = create_server("127.0.0.1:0")
    try:
        with PlannerClient(f"127.0.0.1:{port}", timeout_s=30) as client:
            with pytest.raises(grpc.RpcError) as exc:
                client.plan(JOB, wide_inventory(1000))  # 160k GPUs
            assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "inventory" in exc.value.details()
    finally:
        server.stop(grace=None)


def test_an_oversized_plan_to_simulate_is_resource_exhausted():
    """Simulate takes plans within the inventory limit: an estimate lists every replica, and
    a 100k-GPU plan took ~2 s and answered 18 MB before."""
    from sailor_planner.proto import planner_pb2

    server, port = create_server("127.0.0.1:0", limits=ServerLimits(max_gpus=64))
    try:
        job = Job.create("OPT-350M", 1024, 2048)
        ok = Plan.uniform(job, "A100-40", "us-central1-a", pp=1, dp=8, tp=8)  # 64 GPUs
        big = Plan.uniform(job, "A100-40", "us-central1-a", pp=1, dp=16, tp=8)  # 128
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = planner_pb2_grpc.PlannerServiceStub(channel)
            ask = lambda p: planner_pb2.SimulateRequest(job=job.to_proto(), plan=p.to_proto())  # noqa: E731
            assert stub.Simulate(ask(ok), timeout=60).estimate.iteration_time_s > 0
            with pytest.raises(grpc.RpcError) as exc:
                stub.Simulate(ask(big), timeout=60)
            assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "plan: has 128 GPUs, more than the 64" in exc.value.details()
    finally:
        server.stop(grace=None)


def _simulate_request(replicas: int):
    from sailor_planner.proto import planner_pb2

    plan = Plan.uniform(JOB, "A100-40", "us-central1-a", pp=1, dp=replicas, tp=1)
    return planner_pb2.SimulateRequest(job=JOB.to_proto(), plan=plan.to_proto())


@contextlib.contextmanager
def _one_search_running(max_queued: int):
    """(stub, service, the running search's future) of a server with one search slot, taken
    by a long Plan, and Simulates beyond 8 replicas admitted like searches."""
    limits = ServerLimits(
        max_searches=1, max_queued=max_queued, max_candidates=10**9, free_simulate_replicas=8
    )
    server, port = create_server("127.0.0.1:0", limits=limits)
    service = server.planner_service
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = planner_pb2_grpc.PlannerServiceStub(channel)
            search = stub.Plan.future(plan_request(wide_inventory(250)))
            wait_until(lambda: service.slots.load()[0] == 1, 10)
            yield stub, service, search
    finally:
        server.stop(grace=None)


def test_a_large_simulate_is_admitted_like_a_search():
    """A Simulate's work grows with its plan's replicas (65,536: ~2 s of CPU, a 12 MB answer)
    and it took no search slot: 48 of them held every thread of the pool, slowed Health past
    1 s and ran on for a minute after their callers' 5 s deadlines had passed. A plan beyond
    ``free_simulate_replicas`` now takes a slot; a usual plan is answered at once."""
    with _one_search_running(max_queued=0) as (stub, service, search):
        assert stub.Simulate(_simulate_request(8), timeout=60).estimate.iteration_time_s > 0
        with pytest.raises(grpc.RpcError) as exc:
            stub.Simulate(_simulate_request(16), timeout=60)
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "retry later" in exc.value.details()
        search.cancel()
        wait_until(lambda: service.slots.load()[0] == 0, 5)
        assert stub.Simulate(_simulate_request(16), timeout=60).estimate.iteration_time_s > 0
        assert service.slots.load() == (0, 0)


def test_a_queued_simulate_leaves_the_queue_when_its_deadline_passes():
    with _one_search_running(max_queued=4) as (stub, service, search):
        with pytest.raises(grpc.RpcError) as exc:
            stub.Simulate(_simulate_request(16), timeout=1.0)
        assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        wait_until(lambda: service.slots.load() == (1, 0), 2)
        search.cancel()


def test_long_messages_are_shortened_to_the_limit():
    from sailor_planner.service.server import MAX_MESSAGE_CHARS, _short

    for n in (MAX_MESSAGE_CHARS - 1, MAX_MESSAGE_CHARS, MAX_MESSAGE_CHARS + 1, 10**5):
        got = _short("x" * n)
        assert len(got) == min(n, MAX_MESSAGE_CHARS)
        assert got.endswith("(shortened)") == (n > MAX_MESSAGE_CHARS)


def test_the_candidate_budget_ends_the_search_partial():
    server, port = create_server("127.0.0.1:0", limits=ServerLimits(max_candidates=20))
    try:
        with PlannerClient(f"127.0.0.1:{port}", timeout_s=60) as client:
            result = client.plan(JOB, wide_inventory(8, zones=4))
            assert result.partial and result.stats.candidates_evaluated <= 40
    finally:
        server.stop(grace=None)


def test_spellings_of_one_profile_folder_share_one_planner(tmp_path):
    (tmp_path / "adir").mkdir()
    spellings = ["adir"] + [f"adir{'/.' * k}" for k in range(1, 60)] + ["adir/../adir"]
    server, port = create_server("127.0.0.1:0", roots=DataRoots.of([tmp_path]))
    try:
        with PlannerClient(f"127.0.0.1:{port}", timeout_s=60) as client:
            before = None
            for name in spellings:
                client.plan(JOB, SMALL, profile_dir=str(tmp_path / name))
                before = before if before is not None else cached_planners()
            assert cached_planners() == before
    finally:
        server.stop(grace=None)


def test_a_token_guards_every_call_but_health():
    server, port = create_server("127.0.0.1:0", access=Access(token="s3cret"))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = planner_pb2_grpc.PlannerServiceStub(channel)
            with pytest.raises(grpc.RpcError) as exc:
                stub.Plan(plan_request(SMALL), timeout=30)
            assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
            reply = stub.Plan(
                plan_request(SMALL), timeout=60, metadata=((TOKEN_METADATA_KEY, "s3cret"),)
            )
            assert reply.plans
            health = health_pb2_grpc.HealthStub(channel)
            assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == 1
    finally:
        server.stop(grace=None)


def serve(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    code = "from sailor_planner.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, "serve", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--port", "70000"], "port"),
        (["--port", "-1"], "port"),
        (["--workers", "0"], "workers"),
        # 10**9 was accepted: a thread pool and a search slot per caller, without bound
        (["--workers", "1000000000"], "workers: 1000000000 searches at once: at most 64"),
        (["--host", "8.8.8.8"], "--token"),
        (["--host", "0.0.0.0"], "--token"),
        (["--tls-cert", "/etc/hostname"], "tls"),
        # '' was told to pass --token, as if it were a public address
        (["--host", ""], "host: '' is not a host name or IP address"),
        (["--host", "a b"], "host: 'a b' is not a host name or IP address"),
        # with --port 0 (the default) a host that is not this machine's printed gRPC's C-core
        # log line ('add_port.cc ... Failed to add port') and 'address: cannot bind', no reason
        (["--host", "192.0.2.1", "--token", "t"], "--host: cannot listen on 192.0.2.1 ("),
        (["--host", "no-such-host.invalid", "--token", "t"], "--host: cannot listen on no-such"),
    ],
)
def test_serve_refuses_bad_settings_in_one_line(args, needle):
    r = serve(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], r.stderr


def _ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_serve_listens_on_a_bare_ipv6_loopback():
    """`serve --host ::1` (loopback, so no token needed) printed gRPC's C-core line 'Failed to
    add port ... Error in bind for address [::0.1.0.0]:443' and 'cannot bind ::1:0': the
    address was written '::1:0', which gRPC reads as one IPv6 address on its default port."""
    import signal

    code = "from sailor_planner.cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--host", "::1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert " on [::1]:" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        address = line.split(" on ", 1)[1].split()[0]
        with grpc.insecure_channel(address) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check
            assert check(health_pb2.HealthCheckRequest(), timeout=30).status == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None and "add_port" not in proc.stderr.read()


def test_serve_speaks_tls_with_a_certificate(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
        capture_output=True,
    )
    if made.returncode != 0:
        pytest.skip("openssl cannot make a test certificate here")
    access = Access(token="t", tls_cert=cert, tls_key=key)
    server, port = create_server("127.0.0.1:0", access=access)
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        options = (("grpc.ssl_target_name_override", "localhost"),)
        with grpc.secure_channel(f"127.0.0.1:{port}", creds, options) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == 1
    finally:
        server.stop(grace=None)


def test_replan_refuses_an_invalid_previous_plan():
    """Item 10: the previous plan of a Replan is checked against the job like any plan."""
    tiny = Job.create("tiny-gpt", 8, 32)
    a100 = "A100-40", "us-central1-a"
    cases = [
        # Layers 0..7 of an 8-layer-id model, but the job's model has 26.
        (JOB, Plan((Stage(0, 7, (Replica(*a100, 1, 8, 128),)),)), "last_layer"),
        # Missing layers: the head (layer 7) is not covered.
        (tiny, Plan((Stage(0, 6, (Replica(*a100, 1, 1, 8),)),)), "last_layer"),
        # TP 8 on a model with 4 heads.
        (tiny, Plan((Stage(0, 7, (Replica(*a100, 8, 1, 8),)),)), "tp"),
    ]
    server, port = create_server("127.0.0.1:0")
    try:
        with PlannerClient(f"127.0.0.1:{port}", timeout_s=60) as client:
            for job, previous, field in cases:
                with pytest.raises(grpc.RpcError) as exc:
                    client.replan(job, Inventory.parse(["A100-40@us-central1-a=8"]), previous)
                assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert "previous_plan" in exc.value.details() and field in exc.value.details()
    finally:
        server.stop(grace=None)
