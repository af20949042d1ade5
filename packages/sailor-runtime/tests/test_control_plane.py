"""Control-plane units on real gRPC servers (127.0.0.1, port 0): placement, registration and
assignment validation, tokens, hostile bytes, heartbeat expiry. No rank processes."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import grpc
import pytest

from sailor_runtime.agent.assignment import validate_assignment
from sailor_runtime.agent.gpus import NodeGpus
from sailor_runtime.agent.ranks import RankRunner
from sailor_runtime.agent.service import AgentServicer, create_agent_server
from sailor_runtime.controller.assignments import build_assignments
from sailor_runtime.controller.controller import Controller, ControllerConfig
from sailor_runtime.controller.membership import Worker
from sailor_runtime.controller.placement import place
from sailor_runtime.controller.service import create_controller_server
from sailor_runtime.errors import AssignmentError, PlacementError, SailorRuntimeError
from sailor_runtime.proto import agent_pb2, agent_pb2_grpc, controller_pb2, controller_pb2_grpc
from sailor_runtime.security import TOKEN_METADATA_KEY, check_bind
from sailor_runtime.topology import Topology
from sailor_sim import Job, Plan, Replica, Stage
from sailor_testing import free_port

JOB = Job.create("tiny-gpt", 8, 32)


def hetero_plan() -> Plan:
    """2 stages x 2 replicas; replica 1 of stage 0 has TP 2. GPU types only: a plan mixing CPU
    workers and GPUs is refused (engine.backend)."""
    cpu, t4 = Replica("V100-16", "local", 1, 1, 4), Replica("T4", "local", 1, 1, 4)
    cpu2 = Replica("V100-16", "local", 2, 1, 4)
    return Plan((Stage(0, 3, (cpu, cpu2)), Stage(4, 7, (t4, t4)))).check(JOB)


def worker(wid: str, gpu: str, count: int, joined: float) -> Worker:
    return Worker(wid, "127.0.0.1:1", NodeGpus(gpu, count, 0, "local"), "h", joined, joined)


def test_rank_layout_is_stage_major():
    layout = Topology(hetero_plan()).slots()
    assert [(s.stage, s.replica, s.tp_rank) for s in layout] == [
        (0, 0, 0), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 1, 0),
    ]  # fmt: skip


def test_placement_keeps_tp_groups_on_one_node_and_matches_types():
    workers = [worker("a", "V100-16", 1, 0), worker("b", "V100-16", 2, 1), worker("c", "T4", 2, 2)]
    placement = place(hetero_plan(), workers)
    assert sorted(r for r, _ in placement["b"]) == [1, 2]  # the TP-2 replica
    assert sorted(r for r, _ in placement["a"]) == [0]
    assert sorted(r for r, _ in placement["c"]) == [3, 4]
    assert sorted(d for _, d in placement["c"]) == [0, 1]


def test_placement_refuses_what_the_nodes_cannot_host():
    with pytest.raises(PlacementError, match="free V100-16@local GPUs"):
        place(hetero_plan(), [worker("a", "V100-16", 1, 0), worker("b", "V100-16", 1, 1),
                              worker("c", "T4", 2, 2)])  # fmt: skip


def _cfg(tmp_path: Path, **kw) -> ControllerConfig:
    base = dict(job=JOB, steps=4, checkpoint_every=2, run_dir=tmp_path,
                planner_address="127.0.0.1:9")  # fmt: skip
    return ControllerConfig.for_job(**{**base, **kw})


def _assignment(tmp_path: Path, **changes) -> agent_pb2.Assignment:
    plan = hetero_plan()
    msgs = build_assignments(_cfg(tmp_path), 3, plan, {"c": [(3, 0), (4, 1)]}, 1234)
    msg = msgs["c"]
    for key, value in changes.items():
        if key == "ranks":
            del msg.ranks[:]
            msg.ranks.extend(agent_pb2.RankSlot(rank=r, local_device=d) for r, d in value)
        else:  # "run.options.fp8": a field of a nested message
            *path, name = key.split(".")
            target = msg
            for part in path:
                target = getattr(target, part)
            setattr(target, name, value)
    return msg


def _validate(msg, current=0):
    return validate_assignment(
        msg, gpu_type="T4", zone="local", num_devices=2, current_generation=current
    )


def test_valid_assignment_passes(tmp_path):
    a = _validate(_assignment(tmp_path))
    assert a.ranks == ((3, 0), (4, 1)) and a.world_size == 5 and a.store_prefix == "gen-3"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"world_size": 4}, "assignment.world_size"),
        ({"ranks": [(9, 0)]}, "assignment.ranks[0]"),
        ({"ranks": [(3, 0), (3, 1)]}, "assignment.ranks[1]"),
        ({"ranks": [(3, 0), (4, 0)]}, "assignment.ranks[1].local_device"),
        ({"ranks": [(0, 0)]}, "assignment.ranks[0]"),  # rank 0 needs a CPU
        ({"ranks": []}, "assignment.ranks"),
        ({"master_port": 0}, "assignment.master_addr"),
        ({"store_prefix": "gen 3;rm"}, "assignment.store_prefix"),
        ({"store_key": ""}, "assignment.store_key"),
        ({"store_key": "A" * 64}, "assignment.store_key"),
        ({"backend": "mpi"}, "assignment.backend"),
        ({"run.steps": 0}, "assignment.run"),
        ({"run.checkpoint_every": 0}, "assignment.run.checkpoint_every"),
        ({"run.options.fp8": "delayed"}, "assignment.run.options"),
        ({"run.precision": "fp8"}, "assignment.run.precision"),
        ({"run.recipe.schedule": "step"}, "assignment.run"),
        ({"generation": 0}, "assignment.generation"),
    ],
)
def test_malformed_assignments_name_the_field(tmp_path, changes, field):
    with pytest.raises(AssignmentError) as info:
        _validate(_assignment(tmp_path, **changes))
    assert info.value.field == field


def test_assignment_with_a_broken_plan_is_refused(tmp_path):
    msg = _assignment(tmp_path)
    msg.plan.stages[1].last_layer = 5  # no longer covers the model
    with pytest.raises(AssignmentError, match="assignment.plan"):
        _validate(msg)
    with pytest.raises(SailorRuntimeError, match="older than"):
        _validate(_assignment(tmp_path), current=7)


def test_bind_beyond_loopback_needs_a_token():
    check_bind("127.0.0.1", None, "x")
    check_bind("0.0.0.0", "secret", "x")
    with pytest.raises(SailorRuntimeError, match="--token"):
        check_bind("0.0.0.0", None, "x")


@pytest.fixture
def controller(tmp_path):
    c = Controller(_cfg(tmp_path, heartbeat_timeout_s=1.0, min_workers=5, token="s3cret"))
    server, port = create_controller_server(c, "127.0.0.1:0", "s3cret")
    server.start()
    c.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield c, controller_pb2_grpc.ControllerServiceStub(channel), port
    channel.close()
    c.close()
    server.stop(0)


GOOD = ((TOKEN_METADATA_KEY, "s3cret"),)


def _register(stub, gpu="CPU", count=1, memory=0, zone="local", addr="127.0.0.1:5000",
              wid="w1", metadata=GOOD):  # fmt: skip
    gpus = agent_pb2.GpuInfo(gpu_type=gpu, count=count, memory_bytes=memory, zone=zone)
    req = controller_pb2.RegisterRequest(worker_id=wid, agent_address=addr, gpus=gpus)
    return stub.Register(req, timeout=5, metadata=metadata)


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"count": 0}, "gpus.count"),
        ({"count": 100000}, "gpus.count"),
        ({"gpu": "B9000"}, "unknown GPU"),
        ({"memory": 10**15}, "gpus.memory_bytes"),
        ({"zone": "mars-1a"}, "zone"),
        ({"addr": "nohost"}, "register.agent_address"),
        ({"wid": "../../etc"}, "register.worker_id"),
    ],
)
def test_impossible_registrations_are_refused_and_the_controller_keeps_serving(
    controller, kw, words
):
    c, stub, _ = controller
    with pytest.raises(grpc.RpcError) as info:
        _register(stub, **kw)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words.lower() in info.value.details().lower()
    assert stub.GetStatus(controller_pb2.StatusRequest(), metadata=GOOD, timeout=5).state == 1
    assert not c.membership.workers


def test_wrong_token_is_refused_and_logged(controller, caplog):
    c, stub, _ = controller
    with caplog.at_level(logging.WARNING, logger="sailor.security"):
        for metadata in ((), ((TOKEN_METADATA_KEY, "guess"),)):
            with pytest.raises(grpc.RpcError) as info:
                _register(stub, metadata=metadata)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert c.refused_calls == 2 and not c.membership.workers
    assert "refused /sailor.v1.ControllerService/Register" in caplog.text
    assert _register(stub).worker_id == "w1"


def test_garbage_bytes_on_the_port_do_not_stop_the_controller(controller):
    c, stub, port = controller
    for junk in (b"\x00" * 64, b"GET / HTTP/1.1\r\n\r\n", bytes(range(256)) * 8):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(junk)
            s.settimeout(2)
            try:
                s.recv(1024)
            except OSError:
                pass
    assert _register(stub).worker_id == "w1"
    assert stub.GetStatus(controller_pb2.StatusRequest(), metadata=GOOD, timeout=5).workers


def test_silent_worker_is_declared_failed_within_the_timeout(controller):
    c, stub, _ = controller
    session = _register(stub).session
    hb = controller_pb2.HeartbeatRequest(worker_id="w1", session=session)
    assert stub.Heartbeat(hb, metadata=GOOD, timeout=5).known
    t0 = time.monotonic()
    while c.membership.get("w1") is not None and time.monotonic() - t0 < 5:
        time.sleep(0.05)
    assert c.membership.get("w1") is None
    assert time.monotonic() - t0 < 1.0 + 0.5  # timeout + one control-loop period, with slack
    assert not stub.Heartbeat(hb, metadata=GOOD, timeout=5).known  # told to re-register
    assert any("missed heartbeats" in ch.reason for ch in c._pending)


def test_agent_refuses_malformed_assignments_over_grpc(tmp_path):
    runner = RankRunner(tmp_path / "agent")
    servicer = AgentServicer("c", NodeGpus("T4", 2, 0, "local"), runner)
    servicer.session = "sess"  # registered: it takes the orders that carry its session
    server, port = create_agent_server(servicer, "127.0.0.1:0", token="tok")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = agent_pb2_grpc.WorkerAgentServiceStub(ch)
            md = ((TOKEN_METADATA_KEY, "tok"),)
            with pytest.raises(grpc.RpcError) as info:
                msg = _assignment(tmp_path, world_size=2, session="sess")
                stub.Assign(msg, metadata=md, timeout=5)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "world_size" in info.value.details()
            with pytest.raises(grpc.RpcError) as info:
                msg = agent_pb2.Assignment(generation=1, session="sess")
                stub.Assign(msg, metadata=md, timeout=5)
            assert "assignment.job" in info.value.details()
            with pytest.raises(grpc.RpcError) as info:
                stub.Assign(_assignment(tmp_path), timeout=5)  # no token
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            status = stub.GetStatus(agent_pb2.AgentStatusRequest(), metadata=md, timeout=5)
            assert status.worker_id == "c" and not status.ranks
    finally:
        server.stop(0)
        runner.shutdown()


def test_a_tp_group_may_span_local_agents_of_one_machine():
    job = Job.create("tiny-gpt", 8, 32)
    plan = Plan((Stage(0, 7, (Replica("CPU", "local", 2, 1, 8),)),)).check(job)
    placement = place(plan, [worker("a", "CPU", 1, 0), worker("b", "CPU", 1, 1)])
    assert placement == {"a": [(0, 0)], "b": [(1, 0)]}


def test_an_agent_restarted_on_its_old_port_gets_a_fresh_channel(controller, tmp_path):
    """kill -9 of an assigned agent, then the same id and port again: the controller's channel
    to that address failed to reconnect (gRPC's back-off) and must not be reused, and the
    agent is a newcomer again (dialed before it is planned on; its failed assign is no
    training failure)."""
    c, stub, _ = controller
    port = free_port()
    address = f"127.0.0.1:{port}"
    _register(stub, addr=address)
    c.assigned_ever.add("w1")  # it trained, then died: its channel now fails to reconnect
    c.membership.mark_dead("w1")
    stale = c.agents.status_all([address])[address]
    assert isinstance(stale, grpc.RpcError) and stale.code() == grpc.StatusCode.UNAVAILABLE
    servicer = AgentServicer("w1", NodeGpus("CPU", 1, 0, "local"), RankRunner(tmp_path / "a"))
    server, _ = create_agent_server(servicer, address, token="s3cret")
    server.start()
    try:
        _register(stub, addr=address)
        reply = c.agents.status_all([address])[address]
    finally:
        server.stop(0)
    assert not isinstance(reply, grpc.RpcError), reply
    assert reply.worker_id == "w1" and "w1" not in c.assigned_ever
