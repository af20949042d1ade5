"""Requests a user got wrong, refused the same way everywhere: one line naming the field and
the fix, exit status 2 from the real CLI, INVALID_ARGUMENT from a real server (127.0.0.1:0)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from sailor_planner.proto import planner_pb2
from sailor_sim import Inventory, Job

SCRIPT = str(Path(sys.executable).parent / "sailor-planner")
JOB = Job.create("OPT-350M", 64, 2048)
SMALL = Inventory.parse(["A100-40@us-central1-a=8"])
PLAN_FLAGS = ("--model", "OPT-350M", "--gbs", "64", "--seq-len", "2048")


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=timeout)


def refused(call, request) -> grpc.RpcError:
    """The RpcError ``call(request)`` raises (INVALID_ARGUMENT expected by the callers)."""
    with pytest.raises(grpc.RpcError) as err:
        result = call(request, timeout=30)
        if not isinstance(result, planner_pb2.PlanResponse):
            list(result)  # a stream: its first message raises
    return err.value


def plan_request(**fields) -> planner_pb2.PlanRequest:
    return planner_pb2.PlanRequest(job=JOB.to_proto(), inventory=SMALL.to_proto(), **fields)


# ---- 1. virtual stages beyond what the model's layers can cut --------------------------------
def test_huge_virtual_stages_is_invalid_argument_at_once(stub) -> None:
    request = plan_request()
    request.job.options.virtual_stages = 4_000_000_000
    start = time.perf_counter()
    err = refused(stub.Plan, request)
    assert time.perf_counter() - start < 10
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "job.options.virtual_stages" in err.details()
    assert "virtual_stages <= 12" in err.details()


def test_cli_refuses_huge_virtual_stages_with_exit_2() -> None:
    out = cli(
        "plan", *PLAN_FLAGS, "--gpus", "A100-40@us-central1-a=8",
        "--virtual-stages", "4000000000", "--deadline", "2", timeout=30,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "options.virtual_stages" in out.stderr
    assert "virtual_stages <= 12" in out.stderr


# ---- 7. a pool listed twice ------------------------------------------------------------------
def test_duplicate_pool_is_refused_over_grpc(stub) -> None:
    request = plan_request()
    request.inventory.pools.add(gpu_type="A100-40", zone="us-central1-a", count=8)
    err = refused(stub.Plan, request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "inventory.pools: A100-40@us-central1-a is listed twice" in err.details()


@pytest.mark.parametrize(
    ("pool", "field"),
    [
        ({"gpu_type": "A100-99", "zone": "us-central1-a", "count": 8}, "gpu_type"),
        ({"gpu_type": "V100-16", "zone": "us-moon-1", "count": 8}, "zone"),
    ],
)
def test_a_bad_pool_is_named_by_its_index_over_grpc(stub, pool, field) -> None:
    """A request of many pools named a bad one only 'inventory.gpu_type'."""
    request = plan_request()
    request.inventory.pools.add(**pool)
    err = refused(stub.Plan, request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    index = len(request.inventory.pools) - 1
    assert err.details().startswith(f"inventory.pools[{index}].{field}: unknown"), err.details()


def test_duplicate_pool_is_refused_by_the_cli_and_the_client_types() -> None:
    gpus = ("--gpus", "A100-40@us-central1-a=8", "--gpus", "A100-40@us-central1-a=4")
    out = cli("plan", *PLAN_FLAGS, *gpus)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "A100-40@us-central1-a is listed twice" in out.stderr
    with pytest.raises(ValueError, match="listed twice"):  # what PlannerClient.plan is given
        Inventory.from_dict({"pools": [{"gpu_type": "A100-40", "zone": "us-central1-a",
                                        "count": 8}] * 2})  # fmt: skip


def test_a_pool_larger_than_an_inventory_may_hold_is_refused_everywhere(tmp_path) -> None:
    # --gpus and a trace took 10**20 GPUs (the plan used 2,048 of them); an inventory file did not.
    huge = "99999999999999999999"
    out = cli("plan", *PLAN_FLAGS, "--gpus", f"A100-40@us-central1-a={huge}")
    assert out.returncode == 2, out.stdout
    assert out.stderr.count("\n") == 1 and "count: must be <= 4611686018427387904" in out.stderr
    trace = tmp_path / "trace.csv"
    trace.write_text(f"timestamp,zone,gpu_type,available\n0,us-central1-a,A100-40,{huge}\n"
                     "3600,us-central1-a,A100-40,8\n")  # fmt: skip
    out = cli("replay", "--trace", str(trace), *PLAN_FLAGS)
    assert out.returncode == 2, out.stdout
    assert out.stderr.startswith("error: trace.csv row 1, column available: must be <=")


# ---- 7. one limit for top_k and pareto_points, on every front end ----------------------------
@pytest.mark.parametrize("field", ["top_k", "pareto_points"])
def test_grpc_refuses_more_than_the_limit(stub, field: str) -> None:
    from sailor_planner.request import MAX_PARETO_POINTS, MAX_TOP_K

    limit = {"top_k": MAX_TOP_K, "pareto_points": MAX_PARETO_POINTS}[field]
    err = refused(stub.Plan, plan_request(**{field: limit + 1}))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details().startswith(f"{field}: must be an integer from")
    assert f"to {limit}" in err.details()


@pytest.mark.parametrize(
    ("flag", "value", "field"),
    [("--top", "101", "top_k"), ("--top", "0", "top_k"), ("--pareto", "-1", "pareto_points"),
     ("--pareto", "101", "pareto_points")],
)  # fmt: skip
def test_cli_refuses_what_grpc_refuses(flag: str, value: str, field: str) -> None:
    out = cli("plan", *PLAN_FLAGS, "--gpus", "A100-40@us-central1-a=8", flag, value)
    assert out.returncode == 2, out.stdout
    assert out.stderr.count("\n") == 1
    assert f"{field}: must be an integer from" in out.stderr and flag in out.stderr


# ---- 2, 7. Replay: a policy named twice, absurd timestamps -----------------------------------
ROWS = [
    {"timestamp": t, "zone": "us-central1-a", "gpu_type": "A100-40", "available": n}
    for t, n in ((0, 8), (3600, 4), (7200, 8))
]


def replay_request(rows=ROWS, **fields) -> planner_pb2.ReplayRequest:
    from sailor_planner.replay.rpc import request_for

    return request_for(JOB, rows, **fields)


def test_replay_refuses_a_policy_named_twice(stub) -> None:
    err = refused(stub.Replay, replay_request(policies=["sailor", "static", "sailor"]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details() == "policies: duplicate 'sailor'; name each policy once"


@pytest.mark.parametrize("seconds", [1e300, -1e300, 2e11])
def test_replay_refuses_absurd_timestamps(stub, seconds: float) -> None:
    rows = [*ROWS[:2], {**ROWS[2], "timestamp": seconds}]
    err = refused(stub.Replay, replay_request(sorted(rows, key=lambda r: r["timestamp"])))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "column timestamp: must be a finite number of seconds within +-1e+11" in err.details()


def test_replay_refuses_an_absurd_hold_last(stub) -> None:
    err = refused(stub.Replay, replay_request(hold_last_s=1e300))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details().startswith("hold_last_s: must be a positive number of seconds up to")


def test_replay_cli_refuses_a_policy_named_twice(tmp_path) -> None:
    trace = tmp_path / "trace.csv"
    lines = [f"{r['timestamp']},{r['zone']},{r['gpu_type']},{r['available']}" for r in ROWS]
    trace.write_text("timestamp,zone,gpu_type,available\n" + "\n".join(lines) + "\n")
    out = cli("replay", "--trace", str(trace), *PLAN_FLAGS, "--policies", "sailor,sailor")
    assert out.returncode == 2, out.stdout
    assert out.stderr == "error: policies: duplicate 'sailor'; name each policy once\n"


def test_replay_checks_its_plot_path_first_and_writes_the_file_named(tmp_path) -> None:
    # A folder or a missing folder once failed after the replay (an OSError naming no flag),
    # and a name without .png was written as NAME.png while the output said NAME.
    trace = tmp_path / "trace.csv"
    lines = [f"{r['timestamp']},{r['zone']},{r['gpu_type']},{r['available']}" for r in ROWS]
    trace.write_text("timestamp,zone,gpu_type,available\n" + "\n".join(lines) + "\n")
    args = ("replay", "--trace", str(trace), *PLAN_FLAGS, "--policies", "static", "--plan-s", "1")
    for plot, needle in ((tmp_path, "is a folder"), (tmp_path / "no" / "p.png", "does not exist")):
        out = cli(*args, "--plot", str(plot))
        assert out.returncode == 2, out.stdout
        assert out.stderr.startswith("error: --plot: ") and needle in out.stderr, out.stderr
    out = cli(*args, "--plot", str(tmp_path / "chart"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "chart").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "chart.png").exists()


# ---- 8. messages: full field paths, missing model fields, piped tables -----------------------
def _plan_with_tp(tp: int):
    from sailor_sim import Plan

    plan = Plan.uniform(JOB, "A100-40", "us-central1-a", pp=2, dp=2, microbatch_size=2)
    wire = plan.to_proto()
    wire.stages[1].replicas[1].tp = tp
    return wire


def test_simulate_names_the_replica_of_a_bad_tp(stub) -> None:
    request = planner_pb2.SimulateRequest(job=JOB.to_proto(), plan=_plan_with_tp(3))
    err = refused(stub.Simulate, request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details().startswith("plan.stages[1].replicas[1].tp: must be a power of two")


def test_replan_names_the_previous_plans_field_once(stub) -> None:
    request = planner_pb2.ReplanRequest(request=plan_request(), previous_plan=_plan_with_tp(3))
    err = refused(stub.Replan, request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details().startswith("previous_plan.stages[1].replicas[1].tp: must be a power")


def test_a_batch_mismatch_names_indexed_replicas(stub) -> None:
    from sailor_sim import Plan

    wrong = Job.create("OPT-350M", 48, 2048)  # the plan processes 64 samples
    plan = Plan.uniform(JOB, "A100-40", "us-central1-a", pp=2, dp=2, microbatch_size=2)
    request = planner_pb2.SimulateRequest(job=wrong.to_proto(), plan=plan.to_proto())
    err = refused(stub.Simulate, request)
    assert err.details().startswith("plan.stages[0].replicas[*].num_microbatches: replicas")


def test_a_model_missing_fields_is_named_field_by_field(stub) -> None:
    request = plan_request()
    request.job.model = '{"num_layers": -1}'
    err = refused(stub.Plan, request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = err.details()
    assert details.startswith("job.model: JSON content lacks the ModelSpec fields name, family,")
    assert "__init__" not in details and "positional" not in details


def test_piped_tables_keep_every_row_on_one_line() -> None:
    pools = ("--gpus", "A100-40@us-central1-a=128", "--gpus", "V100-16@us-central1-b=64")
    out = cli("plan", "--model", "OPT-350M", "--gbs", "1024", "--seq-len", "2048", *pools,
              "--top", "3", "--pareto", "3")  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.lstrip()[:1].isdigit()]
    assert len(rows) >= 4  # 3 ranked, >= 1 frontier point
    for row in rows:  # zones, plan and options whole on the row's own line
        assert "A100-40@us-central1-a=128" in row or "V100-16@us-central1-b=" in row, row
        assert row.count("[") == row.count("]") >= 1, row
