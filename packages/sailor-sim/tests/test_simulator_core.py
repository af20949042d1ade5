"""One simulator: named terms that add up, one cache that follows every input, no cycles."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from sailor_sim import Job, Plan, Replica, Simulator, Stage, StageSlice
from sailor_sim.catalog import prices
from sailor_sim.catalog.gpus import GPU_CATALOG, register_gpu
from sailor_sim.simulate import timing
from sailor_sim.simulate.network import Endpoint, LinkCurve

A, B = "us-central1-a", "us-central1-b"
TERMS = {
    "compute",
    "recompute",
    "framework",
    "tp_comm",
    "zero_comm",
    "expert_comm",
    "context_comm",
    "pipeline_bubble",
    "p2p",
    "dp_sync",
    "optimizer",
    "step_sync",
}


@pytest.fixture()
def job() -> Job:
    return Job.create("OPT-350M", global_batch_size=64, sequence_length=2048)


def plans(job: Job) -> list[Plan]:
    mixed = (Replica("A100-40", A, 2, 2, 16), Replica("V100-16", B, 1, 2, 16))
    return [
        Plan.uniform(job, "A100-40", A, pp=1, dp=4, tp=2),
        Plan.uniform(job, "V100-16", A, pp=3, dp=2),
        Plan((Stage(0, 9, mixed), Stage(10, 25, mixed[::-1]))).check(job),
    ]


def test_iteration_is_the_sum_of_named_terms(job):
    sim = Simulator()
    for plan in plans(job):
        e = sim.estimate(job, plan)
        assert set(e.time_breakdown_s) == TERMS
        assert all(v >= 0 for v in e.time_breakdown_s.values())
        assert e.iteration_time_s == sum(e.time_breakdown_s.values())  # exactly, not approx


def test_terms_are_the_public_functions_on_the_critical_pipeline(job):
    """The estimate is timing.iteration_terms(timing.pipeline_time(...), ...) of its components:
    rebuilt here from the public component methods, term by term."""
    sim = Simulator()
    plan = Plan.uniform(job, "A100-40", A, pp=2, dp=1, tp=2, microbatch_size=2)
    s0, s1 = plan.stages
    r0, r1 = s0.replicas[0], s1.replicas[0]
    times = [
        sim.stage_time(job, StageSlice(s.first_layer, s.last_layer, "A100-40", 2, 2))
        for s in (s0, s1)
    ]
    p2p = [sim.p2p_time(job, s0.last_layer, r0, r1)]
    pipe = timing.pipeline_time(times, p2p, r0.num_microbatches)
    drain = [times[0].backward_s + p2p[0]]
    opts = [t.optimizer_s for t in times]
    expected = timing.iteration_terms(pipe, [0.0, 0.0], opts, drain, sim.plan_step_sync_time(plan))
    assert sim.estimate(job, plan).time_breakdown_s == pytest.approx(expected, rel=1e-12)


def test_a_live_simulator_follows_set_price(job, prices_restored):
    """A price cached by a live simulator must not survive set_price (it used to: $80.53/h
    before and after, while a fresh simulator said $851.14/h)."""
    sim = Simulator()
    plan = plans(job)[0]
    before = sim.estimate(job, plan).cost_per_hour_usd
    with prices_restored():
        prices.set_price("A100-40", 10 * prices.price_per_gpu_hour("A100-40", A))
        live = sim.estimate(job, plan).cost_per_hour_usd
        fresh = Simulator().estimate(job, plan).cost_per_hour_usd
        assert live == pytest.approx(fresh, rel=1e-12)
        assert live == pytest.approx(10 * before, rel=1e-9)
    assert sim.estimate(job, plan).cost_per_hour_usd == pytest.approx(before, rel=1e-12)


def test_a_live_simulator_follows_gpu_and_network_changes(job):
    sim = Simulator()
    plan = Plan.uniform(job, "A100-40", A, pp=1, dp=1, tp=2)
    gpu = GPU_CATALOG["A100-40"]
    before = sim.estimate(job, plan).time_breakdown_s["tp_comm"]
    try:  # a slower NVLink: the TP all-reduces slow down in the live simulator too
        register_gpu(
            type(gpu)(**{**vars(gpu), "intra_node_bandwidth": gpu.intra_node_bandwidth / 8})
        )
        slower = sim.estimate(job, plan).time_breakdown_s["tp_comm"]
        assert slower > 4 * before
        assert slower == Simulator().estimate(job, plan).time_breakdown_s["tp_comm"]
    finally:
        register_gpu(gpu)
    assert sim.estimate(job, plan).time_breakdown_s["tp_comm"] == before

    two = plans(job)[1]
    slow_link = LinkCurve(1e8, 1e-3, "test: 100 MB/s")
    t0 = sim.estimate(job, two).time_breakdown_s["p2p"]
    sim.network.add_link(Endpoint(A, "V100-16", 1), Endpoint(A, "V100-16", 1), slow_link)
    assert sim.estimate(job, two).time_breakdown_s["p2p"] > 5 * t0


def test_one_cache_object_dropped_whole(job, prices_restored):
    sim = Simulator()
    sim.estimate(job, plans(job)[2])
    assert sum(sim.cache.sizes().values()) > 0
    clears = sim.cache.clears
    with prices_restored():
        prices.set_price("A100-40", prices.price_per_gpu_hour("A100-40", A))  # a bump
        sim.refresh()
    assert sim.cache.clears == clears + 1
    assert sum(sim.cache.sizes().values()) == 0


def test_equal_jobs_share_cached_numbers_and_different_models_do_not(job):
    twin = Job.create("OPT-350M", global_batch_size=128, sequence_length=2048)
    assert twin.cache_id == job.cache_id  # the global batch is no cached component's input
    other = Job.create("OPT-350M", global_batch_size=64, sequence_length=1024)
    assert other.cache_id != job.cache_id


def _imports(path: Path) -> set[str]:
    """sailor_sim modules a file imports (relative imports, also under TYPE_CHECKING)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
    return out


def test_no_import_cycle_in_the_simulator_core():
    src = Path(__import__("sailor_sim").__file__).parent
    graph = {p.stem: _imports(p) for p in src.glob("*.py")}
    core = {"simulator", "compose", "timing", "memory", "estimate", "network", "job", "plan"}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    cyclic = sorted(m for m in core | {"cache"} if reaches(m, m, {m}))
    assert cyclic == [], f"import cycles through {cyclic}"


def test_removed_dead_code_stays_removed():
    assert not hasattr(timing, "ring_allreduce_time")
    assert not hasattr(Simulator, "p2p_egress")
    assert not hasattr(Simulator, "egress_per_iteration")
    assert math.isfinite(timing.pipeline_total([1.0, 2.0], [0.5], 4))


@pytest.mark.parametrize("zero", ["none", "zero1", "zero3"])
def test_cached_numbers_never_leak_between_plans(zero):
    """Whatever a simulator estimated before, an estimate equals a fresh simulator's: here a
    stage whose replicas span two regions, then one whose two replicas share a zone (same
    layers, same replica count, one replica identical): under ZeRO the shard traffic of that
    replica depends on the whole ring, which the cache key must see."""
    job = Job.create("OPT-350M", 64, 2048, "bf16", options={"zero": zero})
    n = job.model.num_layer_ids - 1
    a = Replica("A100-40", "us-central1-a", 1, 4, 8)
    b = Replica("A100-40", "europe-west4-a", 1, 4, 8)  # another region: a slow ring
    same_zone = Plan((Stage(0, n, (a, a)),))
    two_zones = Plan((Stage(0, n, (a, b)),))
    live = Simulator()
    live.estimate(job, two_zones)
    assert live.estimate(job, same_zone).to_dict() == Simulator().estimate(job, same_zone).to_dict()


def test_zero_stages_share_stage_times_by_execution_style():
    """``Job.timing_id``: ZeRO enters a slice's time only through its execution style (the
    framework share of analytic profiles), so ZeRO-1 shares the times of no ZeRO and ZeRO-2
    those of ZeRO-3, and the cache keyed by it returns what a fresh simulator computes."""
    base = Job.create("LLaMA-3-8B", 64, 4096, "bf16")
    jobs = {z: Job.create("LLaMA-3-8B", 64, 4096, "bf16", options={"zero": z}) for z in (
        "none", "zero1", "zero2", "zero3")}  # fmt: skip
    assert jobs["zero1"].timing_id == base.timing_id == jobs["none"].timing_id
    assert jobs["zero2"].timing_id == jobs["zero3"].timing_id != base.timing_id
    s = StageSlice(0, 8, "H100-80", 2, 1)
    shared = Simulator()
    for zero, job in jobs.items():  # each against a simulator that never saw another job
        assert shared.stage_time(job, s) == Simulator().stage_time(job, s), zero
    # analytic H100 profiles: the FSDP style's fitted efficiency is not Megatron's
    assert shared.stage_time(jobs["zero3"], s) != shared.stage_time(base, s)


class _CountingSimulator(Simulator):
    """Counts the per-replica memory computations an estimate's memory list asks for."""

    calls = 0

    def replica_memory(self, *args, **kwargs):
        type(self).calls += 1
        return super().replica_memory(*args, **kwargs)


def test_equal_replicas_compute_their_memory_once():
    """A 1M-GPU plan computed the same memory terms for each of its 1M equal replicas (107 s
    for `sailor-sim simulate --dp 1048576`); a stage's equal replicas now share one
    computation, and each still gets its own entry with its own dict."""
    job = Job.create("LLaMA-3.1-8B", 4096, 2048, "bf16", options={"zero": "zero1"})
    plan = Plan.uniform(job, "H100-80", "us-central1-a", pp=2, dp=2048, tp=2)
    one = Plan.uniform(job, "H100-80", "us-central1-a", pp=2, dp=1, tp=2, microbatch_size=1)
    sim = _CountingSimulator()
    memory = sim.estimate(job, plan).memory
    assert _CountingSimulator.calls == 2 and len(memory) == 2 * 2048  # one per stage
    assert memory[0] == sim.estimate(job, plan).memory[0]
    assert memory[0].breakdown_bytes is not memory[1].breakdown_bytes
    assert [m.replica for m in memory[:3]] == [0, 1, 2] and memory[-1].stage == 1
    assert memory[0].breakdown_bytes["optimizer_states"] < one_optimizer(sim, job, one)


def one_optimizer(sim, job, plan) -> int:
    return sim.estimate(job, plan).memory[0].breakdown_bytes["optimizer_states"]
