"""The Replay RPC on a real server (127.0.0.1:0): streamed steps and summaries equal the local
replay's; a bad trace is INVALID_ARGUMENT naming the row and column, with nothing streamed."""

import grpc
import pytest

from sailor_planner.proto import planner_pb2, planner_pb2_grpc
from sailor_planner.replay import replay
from sailor_planner.replayrpc import request_for
from sailor_planner.request import SearchOptions
from sailor_planner.server import create_server
from sailor_planner.sources import planner_for
from sailor_planner.trace import trace_from_rows
from sailor_sim import Job

JOB = Job.create("OPT-350M", 256, 2048)
ROWS = [
    {"timestamp": t, "zone": "us-central1-a", "gpu_type": "A100-40", "available": n}
    for t, n in ((0, 16), (3600, 8), (7200, 16), (10800, 16))
] + [{"timestamp": 0, "zone": "us-central1-b", "gpu_type": "V100-16", "available": 8}]
ROWS.sort(key=lambda r: r["timestamp"])


@pytest.fixture(scope="module")
def stub():
    server, port = create_server("127.0.0.1:0")
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield planner_pb2_grpc.PlannerServiceStub(channel)
    server.stop(grace=None)


def test_replay_streams_steps_then_a_summary_per_policy(stub) -> None:
    request = request_for(JOB, ROWS, policies=["sailor", "static"])
    messages = list(stub.Replay(request, timeout=120))
    kinds = [(m.WhichOneof("kind"), getattr(m, m.WhichOneof("kind")).policy) for m in messages]
    assert kinds == [("step", "sailor")] * 3 + [("summary", "sailor")] + [
        ("step", "static")
    ] * 3 + [("summary", "static")]
    local = replay(
        planner_for(), JOB, trace_from_rows(ROWS), SearchOptions(), policies=("sailor", "static")
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
        (ROWS, {"policies": ["greedy"]}, "policies: unknown greedy"),
        (ROWS, {"checkpoint_interval_s": -5}, "reconfig.checkpoint_interval_s"),
        ([ROWS[0]], {}, "has one timestamp"),
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
