"""Property-based fuzzing (hypothesis) of every gRPC request type of the planner, the
controller and the worker agent, on real servers at 127.0.0.1:0 (issue 13).

Each request is either random field by field (drawn from the message's descriptor: extreme
integers, NaN and infinite doubles, junk strings, unknown enum values, nested and repeated
messages) or a valid request with some fields replaced that way. The answer must be OK or a
status that names the problem (INVALID_ARGUMENT, FAILED_PRECONDITION, RESOURCE_EXHAUSTED, ...)
within the deadline: never INTERNAL/UNKNOWN, never a hang, and the server keeps serving.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sailor_planner.proto import planner_pb2, planner_pb2_grpc
from sailor_planner.service.client import PlannerClient
from sailor_planner.service.limits import ServerLimits
from sailor_planner.service.server import create_server
from sailor_runtime.agent.assignment import validate_assignment
from sailor_runtime.agent.gpus import NodeGpus
from sailor_runtime.agent.ranks import RankRunner
from sailor_runtime.agent.service import AgentServicer, create_agent_server
from sailor_runtime.controller.assignments import build_assignments
from sailor_runtime.controller.controller import Controller, ControllerConfig
from sailor_runtime.controller.service import create_controller_server
from sailor_runtime.errors import SailorRuntimeError
from sailor_runtime.proto import agent_pb2, agent_pb2_grpc, controller_pb2, controller_pb2_grpc
from sailor_sim import Inventory, Job, Plan, Replica, SailorSimError, Stage

EXAMPLES = int(os.environ.get("SAILOR_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
CLEAR = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.OUT_OF_RANGE,
}
CALL_TIMEOUT_S = 30.0

_INT_RANGES = {
    F.TYPE_INT32: (-(2**31), 2**31 - 1),
    F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    F.TYPE_UINT32: (0, 2**32 - 1),
    F.TYPE_FIXED32: (0, 2**32 - 1),
    F.TYPE_INT64: (-(2**63), 2**63 - 1),
    F.TYPE_SINT64: (-(2**63), 2**63 - 1),
    F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    F.TYPE_UINT64: (0, 2**64 - 1),
    F.TYPE_FIXED64: (0, 2**64 - 1),
}
WORDS = ["", "A100-40", "CPU", "T4", "us-central1-a", "local", "tiny-gpt", "OPT-350M", "fp32",
         "bf16", "adam", "127.0.0.1:1", "/", "..", "\x00", "gen-1"]  # fmt: skip


def _scalar(field) -> st.SearchStrategy:
    if field.type in _INT_RANGES:
        lo, hi = _INT_RANGES[field.type]
        edges = st.sampled_from([lo, hi, 0, 1, 2, 3, 8, 64, 65535, 65536])
        return edges | st.integers(lo, hi) | st.integers(max(lo, -4), min(hi, 300))
    if field.type in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        edges = st.sampled_from([0.0, -1.0, 1e-9, 1e308, math.inf, -math.inf, math.nan])
        return edges | st.floats(width=32 if field.type == F.TYPE_FLOAT else 64)
    if field.type == F.TYPE_BOOL:
        return st.booleans()
    if field.type == F.TYPE_STRING:
        return st.sampled_from(WORDS) | st.text(max_size=40)
    if field.type == F.TYPE_BYTES:
        return st.binary(max_size=40)
    if field.type == F.TYPE_ENUM:
        return st.integers(-3, 8)  # proto3 enums are open: unknown values reach the server
    raise AssertionError(field.type)


def _is_map(field) -> bool:
    return field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


def _fill_map(draw, container) -> None:
    """A map<string, string> (RunSpec.extensions): names and JSON-ish or hostile values."""
    values = st.sampled_from(["0.5", "true", '"x"', "[1]", "{", "null", ""]) | st.text(max_size=20)
    for key, value in draw(st.dictionaries(st.text(max_size=12), values, max_size=3)).items():
        container[key] = value


@st.composite
def message(draw, cls, depth: int = 0):
    """A message of ``cls`` with every field drawn at random (a few levels deep)."""
    msg = cls()
    for field in cls.DESCRIPTOR.fields:
        if not draw(st.booleans()):
            continue
        if _is_map(field):
            _fill_map(draw, getattr(msg, field.name))
        elif field.type == F.TYPE_MESSAGE:
            if depth >= 3:
                continue
            sub = message(field.message_type._concrete_class, depth + 1)
            if field.is_repeated:
                getattr(msg, field.name).extend(draw(st.lists(sub, max_size=3)))
            else:
                getattr(msg, field.name).CopyFrom(draw(sub))
        elif field.is_repeated:
            getattr(msg, field.name).extend(draw(st.lists(_scalar(field), max_size=3)))
        else:
            setattr(msg, field.name, draw(_scalar(field)))
    return msg


@st.composite
def mutated(draw, valid, max_changes: int = 3):
    """``valid`` with up to ``max_changes`` fields (at any depth) redrawn at random."""
    msg = type(valid)()
    msg.CopyFrom(valid)
    for _ in range(draw(st.integers(0, max_changes))):
        target = msg
        while True:
            fields = list(target.DESCRIPTOR.fields)
            field = draw(st.sampled_from(fields))
            nested = field.type == F.TYPE_MESSAGE and not field.is_repeated
            if nested and target.HasField(field.name) and draw(st.booleans()):
                target = getattr(target, field.name)
                continue
            break
        if _is_map(field):
            target.ClearField(field.name)
            _fill_map(draw, getattr(target, field.name))
        elif field.is_repeated:
            target.ClearField(field.name)
            if field.type == F.TYPE_MESSAGE:
                sub = message(field.message_type._concrete_class, 1)
                getattr(target, field.name).extend(draw(st.lists(sub, max_size=3)))
            else:
                getattr(target, field.name).extend(draw(st.lists(_scalar(field), max_size=3)))
        elif field.type == F.TYPE_MESSAGE:
            getattr(target, field.name).CopyFrom(
                draw(message(field.message_type._concrete_class, 1))
            )
        else:
            setattr(target, field.name, draw(_scalar(field)))
    return msg


def requests(valid):
    return mutated(valid) | message(type(valid))


def check_status(call) -> grpc.StatusCode:
    """Make the call; its status must be OK or one that names the problem."""
    try:
        call()
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        code = exc.code()
        assert code in CLEAR, f"{code.name}: {exc.details()}"
        if code != grpc.StatusCode.OK:
            assert exc.details(), f"{code.name} without a message"
        return code


# ---- the planner ----------------------------------------------------------------------------
JOB = Job.create("tiny-gpt", 8, 32)
INVENTORY = Inventory.parse(["A100-40@us-central1-a=4", "T4@us-central1-a=2"])
PLAN = Plan((Stage(0, 7, (Replica("A100-40", "us-central1-a", 1, 1, 8),)),)).check(JOB)
PLAN_REQUEST = PlannerClient.request(JOB, INVENTORY)


@pytest.fixture(scope="module")
def planner():
    limits = ServerLimits(max_candidates=2000, max_gpus=4096)
    server, port = create_server("127.0.0.1:0", limits=limits)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield planner_pb2_grpc.PlannerServiceStub(channel)
    channel.close()
    server.stop(grace=None)


@FUZZ
@given(request=requests(PLAN_REQUEST))
def test_planner_plan(planner, request):
    check_status(lambda: planner.Plan(request, timeout=CALL_TIMEOUT_S))


@FUZZ
@given(
    request=requests(planner_pb2.ReplanRequest(request=PLAN_REQUEST, previous_plan=PLAN.to_proto()))
)
def test_planner_replan(planner, request):
    check_status(lambda: planner.Replan(request, timeout=CALL_TIMEOUT_S))


@FUZZ
@given(request=requests(planner_pb2.SimulateRequest(job=JOB.to_proto(), plan=PLAN.to_proto())))
def test_planner_simulate(planner, request):
    check_status(lambda: planner.Simulate(request, timeout=CALL_TIMEOUT_S))


REPLAY = planner_pb2.ReplayRequest(
    job=JOB.to_proto(),
    trace=[
        planner_pb2.TraceRow(
            timestamp_s=0, zone="us-central1-a", gpu_type="A100-40", available=4, price=1.0
        )
    ],  # fmt: skip
)


@FUZZ
@given(request=requests(REPLAY))
def test_planner_replay(planner, request):
    check_status(lambda: list(planner.Replay(request, timeout=CALL_TIMEOUT_S)))


# ---- the controller -------------------------------------------------------------------------
REGISTER = controller_pb2.RegisterRequest(
    worker_id="w1",
    agent_address="127.0.0.1:5000",
    gpus=agent_pb2.GpuInfo(gpu_type="CPU", count=1, zone="local"),
)


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    run = tmp_path_factory.mktemp("fuzz-run")
    cfg = ControllerConfig.for_job(job=JOB, steps=4, checkpoint_every=2, run_dir=run,
                           planner_address="127.0.0.1:9", min_workers=10**6)  # fmt: skip
    c = Controller(cfg)
    server, port = create_controller_server(c, "127.0.0.1:0")
    server.start()
    c.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = controller_pb2_grpc.ControllerServiceStub(channel)
    session = stub.Register(REGISTER, timeout=10).session
    yield stub, session
    channel.close()
    c.close()
    server.stop(0)


@FUZZ
@given(request=requests(REGISTER))
def test_controller_register(controller, request):
    stub, _ = controller
    check_status(lambda: stub.Register(request, timeout=CALL_TIMEOUT_S))


HEARTBEAT = controller_pb2.HeartbeatRequest(
    worker_id="w1",
    ranks=[agent_pb2.RankStatus(generation=1, rank=0, state=1)],
    metrics=[controller_pb2.StepMetrics(generation=1, step=1, loss=1.0)],
)


@FUZZ
@given(request=requests(HEARTBEAT), leave=requests(controller_pb2.LeaveRequest(worker_id="w9")))
def test_controller_heartbeat_leave_status(controller, request, leave):
    stub, session = controller
    if request.worker_id == "w1" and not request.session:
        request.session = session  # the live worker's own heartbeat, with fuzzed contents
    check_status(lambda: stub.Heartbeat(request, timeout=CALL_TIMEOUT_S))
    if leave.worker_id != "w1":  # keep the registered worker for the other examples
        check_status(lambda: stub.Leave(leave, timeout=CALL_TIMEOUT_S))
    stub.GetStatus(controller_pb2.StatusRequest(), timeout=CALL_TIMEOUT_S)  # still serving


# ---- the worker agent -----------------------------------------------------------------------
NODE = NodeGpus("CPU", 2, 0, "local")


def _valid_assignment(tmp: Path) -> agent_pb2.Assignment:
    cfg = ControllerConfig.for_job(job=JOB, steps=4, checkpoint_every=2, run_dir=tmp,
                           planner_address="127.0.0.1:9")  # fmt: skip
    plan = Plan((Stage(0, 7, (Replica("CPU", "local", 1, 1, 8),)),)).check(JOB)
    return build_assignments(cfg, 3, plan, {"w": [(0, 0)]}, 1234, "secret", {"w": "s"})["w"]


ASSIGNMENT = _valid_assignment(Path("/tmp/sailor-fuzz-run"))


@FUZZ
@given(requests(ASSIGNMENT))
def test_assignment_validation(msg):
    try:
        validate_assignment(msg, gpu_type="CPU", zone="local", num_devices=2, current_generation=1)
    except (SailorRuntimeError, SailorSimError) as exc:
        assert str(exc).strip()


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    runner = RankRunner(tmp_path_factory.mktemp("fuzz-agent"), warm=False)
    servicer = AgentServicer("w", NODE, runner)
    servicer.session = "the controller's session"  # a fuzzed Assign can never start ranks
    server, port = create_agent_server(servicer, "127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield agent_pb2_grpc.WorkerAgentServiceStub(channel), runner
    channel.close()
    server.stop(0)
    runner.shutdown()


@FUZZ
@given(assign=requests(ASSIGNMENT), stop=requests(agent_pb2.StopRequest(generation=1)))
def test_agent_assign_stop_status(agent, assign, stop):
    stub, runner = agent
    check_status(lambda: stub.Assign(assign, timeout=CALL_TIMEOUT_S))
    check_status(lambda: stub.Stop(stop, timeout=CALL_TIMEOUT_S))
    stub.GetStatus(agent_pb2.AgentStatusRequest(), timeout=CALL_TIMEOUT_S)
    assert runner.current_generation() == 0  # nothing started without the session
