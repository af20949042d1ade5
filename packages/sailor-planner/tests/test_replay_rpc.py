"""The Replay RPC on a real server (127.0.0.1:0): streamed steps and summaries equal the local
replay's, read raw and through ``PlannerClient.replay``; a bad trace is INVALID_ARGUMENT naming
the row and column, with nothing streamed; the request value crosses the wire whole."""

from dataclasses import fields, replace

import grpc
import pytest

from sailor_planner.errors import RequestError
from sailor_planner.proto import planner_pb2, planner_pb2_grpc
from sailor_planner.replay.reconfig import ReconfigModel
from sailor_planner.replay.request import ReplayRequest, trace_from_wire, trace_rows
from sailor_planner.replay.rpc import request_for
from sailor_planner.replay.run import EventResult, PolicySummary, replay
from sailor_planner.replay.trace import trace_from_rows
from sailor_planner.request import Constraints, SearchOptions
from sailor_planner.service.client import PlannerClient
from sailor_planner.service.server import create_server
from sailor_planner.sources import planner_for
from sailor_sim import Job

JOB = Job.create("OPT-350M", 256, 2048)
ROWS = [
    {"timestamp": t, "zone": "us-central1-a", "gpu_type": "A100-40", "available": n}
    for t, n in ((0, 16), (3600, 8), (7200, 16), (10800, 16))
] + [{"timestamp": 0, "zone": "us-central1-b", "gpu_type": "V100-16", "available": 8}]
ROWS.sort(key=lambda r: r["timestamp"])


@pytest.fixture(scope="module")
def port():
    server, port = create_server("127.0.0.1:0")
    yield port
    server.stop(grace=None)


@pytest.fixture(scope="module")
def stub(port):
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield planner_pb2_grpc.PlannerServiceStub(channel)


def test_replay_streams_steps_then_a_summary_per_policy(stub) -> None:
    request = request_for(JOB, ROWS, policies=["sailor", "static"])
    messages = list(stub.Replay(request, timeout=120))
    kinds = [(m.WhichOneof("kind"), getattr(m, m.WhichOneof("kind")).policy) for m in messages]
    assert kinds == [("step", "sailor")] * 3 + [("summary", "sailor")] + [
        ("step", "static")
    ] * 3 + [("summary", "static")]
    local = replay(
        planner_for(), ReplayRequest(JOB, trace_from_rows(ROWS), policies=("sailor", "static"))
    )
    steps = [m.step for m in messages if m.HasField("step")]
    for step, event in zip(steps, local.events, strict=True):
        assert (step.policy, step.index, step.plan, step.gpus_used) == (
            event.policy, event.index, event.plan, event.gpus_used,
        )  # fmt: skip
        assert step.samples_per_s == pytest.approx(event.samples_per_s)
        # The plan phase is the measured search time, so the two replays differ slightly there.
        assert step.usd == pytest.approx(event.usd, rel=1e-3)
    summaries = [m.summary for m in messages if m.HasField("summary")]
    for got, want in zip(summaries, local.summaries, strict=True):
        assert got.replans == want.replans and got.reconfigurations == want.reconfigurations
        assert got.usd == pytest.approx(want.usd, rel=1e-3)
        assert got.samples == pytest.approx(want.samples, rel=1e-3)


@pytest.mark.parametrize(
    ("rows", "fields", "expected"),
    [
        ([{**ROWS[0], "zone": "mars-1a"}, ROWS[-1]], {}, "trace row 1, column zone"),
        (ROWS[::-1], {}, "column timestamp"),
        (ROWS, {"policies": ["greedy"]}, "policies: unknown policy greedy"),
        (
            ROWS,
            {"reconfig": planner_pb2.ReconfigParams(checkpoint_interval_s=-5)},
            "reconfig.checkpoint_interval_s",
        ),
        # the CLI's least --checkpoint-interval holds on the wire too: 1e-300 replayed to
        # 6.7e299 $ per million tokens over gRPC where the CLI exits 2
        *(
            (
                ROWS,
                {"reconfig": planner_pb2.ReconfigParams(checkpoint_interval_s=tiny)},
                "reconfig.checkpoint_interval_s: must be at least 1 s",
            )
            for tiny in (1e-300, 0.5)
        ),
        ([ROWS[0]], {}, "has one timestamp"),
        (ROWS, {"objective": 9}, "objective: unknown objective 9; use OBJECTIVE_THROUGHPUT"),
    ],
)
def test_bad_replay_requests_are_invalid_argument(stub, rows, fields, expected) -> None:
    received = []
    with pytest.raises(grpc.RpcError) as err:
        for message in stub.Replay(request_for(JOB, rows, **fields), timeout=60):
            received.append(message)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert expected in err.value.details()
    assert received == []


def test_empty_model_is_named(stub) -> None:
    request = planner_pb2.ReplayRequest(trace=request_for(JOB, ROWS).trace)
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Replay(request, timeout=30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "job.model" in err.value.details()


SPOT_ROWS = [
    {"timestamp": 0, "zone": "us-central1-a", "gpu_type": "A100-40", "available": 16,
     "price": 1.5},
    {"timestamp": 0, "zone": "us-central1-b", "gpu_type": "V100-16", "available": 8},
    {"timestamp": 1800, "zone": "us-central1-a", "gpu_type": "A100-40", "available": 8,
     "price": 1.2, "preempted": 8},
    {"timestamp": 3600, "zone": "us-central1-b", "gpu_type": "V100-16", "available": 0},
    {"timestamp": 5400, "zone": "us-central1-b", "gpu_type": "V100-16", "available": 0},
]  # fmt: skip


def test_client_replay_streams_the_replays_own_values(port) -> None:
    """``PlannerClient.replay`` sends the request value (non-default reconfiguration model,
    ``started``, a constraint) and yields what the local replay computes from the same value."""
    request = ReplayRequest(
        JOB,
        trace_from_rows(SPOT_ROWS),
        SearchOptions("cost", Constraints(min_throughput=0.01)),
        ReconfigModel(restart_s=7.0, checkpoint_interval_s=600.0, plan_s=0.5, provision_s=30.0),
        policies=("every-change", "replan-on-loss"),
        started=True,
    )
    with PlannerClient(f"127.0.0.1:{port}", timeout_s=120) as client:
        got = list(client.replay(request))
    local = replay(planner_for(), request)
    want = []
    for summary in local.summaries:
        want += [e for e in local.events if e.policy == summary.policy] + [summary]
    assert [type(g) for g in got] == [type(w) for w in want]
    for g, w in zip(got, want, strict=True):
        if isinstance(w, EventResult):
            w = replace(w, segments=())
        assert g == w  # plan_s is fixed, so nothing measured differs
    summaries = [g for g in got if isinstance(g, PolicySummary)]
    assert [s.policy for s in summaries] == ["every-change", "replan-on-loss"]
    assert summaries[0].reconfigure_s > 0 and summaries[0].samples > 0


def test_client_replay_bad_request_is_invalid_argument_before_any_event(port) -> None:
    request = ReplayRequest(JOB, trace_from_rows(ROWS), policies=("sailor",))
    with PlannerClient(f"127.0.0.1:{port}", timeout_s=60) as client:
        events = client.replay(request, profile_dir="/nonexistent/profiles")
        with pytest.raises(grpc.RpcError) as err:
            next(events)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "profile" in err.value.details()
        with pytest.raises(RequestError, match="options: only the objective and constraints"):
            client.replay(replace(request, options=SearchOptions(top_k=3)))


def test_the_trace_and_the_reconfiguration_model_cross_the_wire_unchanged() -> None:
    trace = trace_from_rows(SPOT_ROWS)
    assert trace_from_wire(trace_rows(trace)).states == trace.states
    wire = {f.name for f in planner_pb2.ReconfigParams.DESCRIPTOR.fields}
    assert wire == {f.name for f in fields(ReconfigModel)}
    model = ReconfigModel(detect_s=2.0, save_bytes_per_s=5e8, plan_s=None, provision_s=3.0)
    msg = ReplayRequest(JOB, trace, reconfig=model, started=True).to_proto()
    back = ReplayRequest.from_proto(msg, lambda where, build: build())
    assert back.reconfig == model and back.started and back.trace.states == trace.states
