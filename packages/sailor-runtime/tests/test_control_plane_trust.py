"""Who may touch a run (issue 13, items 3, 4 and 5): the rendezvous store, worker identity,
generations, the run folder. Real gRPC servers on 127.0.0.1:0, real controller processes."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from sailor_runtime.agent.gpus import NodeGpus
from sailor_runtime.agent.ranks import RankRunner
from sailor_runtime.agent.service import AgentServicer, create_agent_server
from sailor_runtime.controller import rundir
from sailor_runtime.controller.assignments import build_assignments
from sailor_runtime.controller.controller import Controller, ControllerConfig
from sailor_runtime.controller.service import create_controller_server
from sailor_runtime.controller.state import Reconfiguration
from sailor_runtime.engine.checkpoints import fence
from sailor_runtime.proto import agent_pb2, agent_pb2_grpc, controller_pb2, controller_pb2_grpc
from sailor_sim import Job, Plan, Replica, Stage

JOB = Job.create("tiny-gpt", 8, 32)


def config(run_dir: Path, **kw) -> ControllerConfig:
    base = dict(job=JOB, steps=4, checkpoint_every=2, run_dir=run_dir,
                planner_address="127.0.0.1:9", min_workers=5)  # fmt: skip
    return ControllerConfig.for_job(**{**base, **kw})


@pytest.fixture
def controller(tmp_path):
    c = Controller(config(tmp_path / "run"))
    server, port = create_controller_server(c, "127.0.0.1:0")
    server.start()
    c.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield c, controller_pb2_grpc.ControllerServiceStub(channel)
    channel.close()
    c.close()
    server.stop(0)


def register(stub, wid="w1", addr="127.0.0.1:5000", session=""):
    gpus = agent_pb2.GpuInfo(gpu_type="CPU", count=1, zone="local")
    req = controller_pb2.RegisterRequest(
        worker_id=wid, agent_address=addr, gpus=gpus, session=session
    )
    return stub.Register(req, timeout=5)


def non_loopback_address() -> str | None:
    """An address of this machine other than loopback (the route to a documentation net)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


# ---- item 3: the rendezvous store --------------------------------------------------------------
def test_the_store_listens_on_the_controllers_host_only(controller):
    c, _ = controller
    port = c.store.port
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # reachable where the controller said
    other = non_loopback_address()
    if other is None:
        pytest.skip("this machine has no non-loopback IPv4 address to try")
    with pytest.raises(OSError):
        socket.create_connection((other, port), timeout=5).close()


def test_rendezvous_keys_need_a_key_derived_from_the_run_secret(controller):
    """The generation's namespace and its key travel; the run secret itself never does
    (test_rendezvous_store.py: what the store does with a key)."""
    c, _ = controller
    plan = Plan((Stage(0, 7, (Replica("CPU", "local", 1, 1, 8),)),)).check(JOB)
    msgs = build_assignments(c.cfg, 1, plan, {"w": [(0, 0)]}, c.store.port, c.run_secret)
    assert msgs["w"].store_prefix == "gen-1" and len(msgs["w"].store_key) == 64
    assert c.run_secret not in str(msgs["w"]) and len(c.run_secret) >= 32


# ---- item 4: worker identity and generations ------------------------------------------------
def test_a_live_workers_id_cannot_be_taken_over(controller):
    c, stub = controller
    first = register(stub)
    for _ in range(7):
        with pytest.raises(grpc.RpcError) as info:
            register(stub, addr="127.0.0.1:6666")
        assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
    w = c.membership.get("w1")
    assert w is not None and w.agent_address == "127.0.0.1:5000"
    # An imposter's heartbeat is not the worker's, and its Leave removes nobody.
    imposter = controller_pb2.HeartbeatRequest(worker_id="w1", session="guess")
    assert not stub.Heartbeat(imposter, timeout=5).known
    stub.Leave(controller_pb2.LeaveRequest(worker_id="w1", session="guess"), timeout=5)
    assert c.membership.get("w1") is not None
    # The worker itself renews with its session.
    again = register(stub, addr="127.0.0.1:5001", session=first.session)
    assert again.worker_id == "w1" and again.session and again.session != first.session


def test_an_agent_refuses_assignments_not_from_its_controller(tmp_path):
    runner = RankRunner(tmp_path / "agent")
    servicer = AgentServicer("w", NodeGpus("CPU", 1, 0, "local"), runner)
    servicer.session = "s" * 32
    server, port = create_agent_server(servicer, "127.0.0.1:0")
    server.start()
    plan = Plan((Stage(0, 7, (Replica("CPU", "local", 1, 1, 8),)),)).check(JOB)
    cfg = config(tmp_path / "run")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = agent_pb2_grpc.WorkerAgentServiceStub(ch)
            for generation, session, code in (
                (2**63, "s" * 32, grpc.StatusCode.INVALID_ARGUMENT),
                (2**64 - 1, "s" * 32, grpc.StatusCode.INVALID_ARGUMENT),
                (5, "", grpc.StatusCode.PERMISSION_DENIED),
                (5, "t" * 32, grpc.StatusCode.PERMISSION_DENIED),
            ):
                msg = build_assignments(cfg, 1, plan, {"w": [(0, 0)]}, 1234, "x", {"w": session})[
                    "w"
                ]
                msg.generation = generation
                with pytest.raises(grpc.RpcError) as info:
                    stub.Assign(msg, timeout=5)
                assert info.value.code() == code, info.value.details()
            assert runner.current_generation() == 0  # nothing started, nothing poisoned
    finally:
        server.stop(0)
        runner.shutdown()


def test_generations_keep_growing_across_controller_restarts(tmp_path):
    run = tmp_path / "run"
    c = Controller(config(run))
    try:
        c.register(
            "w1", "127.0.0.1:9", agent_pb2.GpuInfo(gpu_type="CPU", count=1, zone="local"), "h"
        )
        plan = Plan((Stage(0, 7, (Replica("CPU", "local", 1, 1, 8),)),)).check(JOB)
        workers = c.membership.alive()
        for _ in range(3):  # the agent is unreachable: each assignment fails, numbers advance
            c._assign(Reconfiguration(c.generation + 1, "test", False), plan,
                      {"w1": [(0, 0)]}, workers)  # fmt: skip
        assert c.generation == 3
        # each assignment fenced the checkpoint folder first: generation 2's ranks may not save
        assert fence.current(c.cfg.checkpoint_dir) == 3
        with pytest.raises(fence.SupersededError):
            fence.check(c.cfg.checkpoint_dir, 2)
    finally:
        c.close()
    again = Controller(config(run))
    try:
        assert again.generation == 3  # the next one is 4, never 1 again
    finally:
        again.close()
    with pytest.raises(rundir.RunDirError):
        rundir.save_generation(run, 2**63)


# ---- item 5: the run folder ------------------------------------------------------------------
def controller_process(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    code = "from sailor_runtime.cli import app; app()"
    args = ["controller", "--planner", "127.0.0.1:9", "--run-dir", str(run_dir), "--quiet"]
    return subprocess.run(
        [sys.executable, "-c", code, *args, *extra], capture_output=True, text=True, timeout=120
    )


def one_line_error(r: subprocess.CompletedProcess, needle: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [x for x in r.stderr.strip().splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_a_run_folder_belongs_to_one_run(tmp_path):
    run = tmp_path / "run"
    first = Controller(config(run))
    try:
        # A second controller at the same time refuses (a real process).
        one_line_error(controller_process(run), "in use by run")
    finally:
        first.close()
    # Another job (batch size and seed) refuses to resume the first one's checkpoints.
    other = controller_process(run, "--global-batch-size", "16", "--seed", "7")
    one_line_error(other, "another job")
    # The same job resumes in its folder.
    again = Controller(config(run))
    try:
        assert again.run_lock.resumed and again.run_lock.run_id == first.run_lock.run_id
    finally:
        again.close()


def test_a_run_folder_that_is_a_file_is_one_line(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    one_line_error(controller_process(path), "is a file")
