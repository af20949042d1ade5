"""A stage slice travels as one value: what a replica of a stage computes (layers first..last
on a TP group of one GPU type at one microbatch size) is a ``StageSlice``, the key of the
simulator's stage-time and range-memory caches, not five loose parameters repeated in every
signature on the way (issue 23: ``(job, first, last, gpu_type, tp, mbs)`` was in 12)."""

from __future__ import annotations

import ast
from pathlib import Path

import sailor_planner
import sailor_sim
from sailor_sim import Job, Plan, Simulator, StageSlice
from sailor_sim.spec.examples import example_job, example_plan

SLICE_FIELDS = {"first", "last", "tp", "mbs"}
GPU_NAMES = {"gpu_type", "g", "gpu"}


def _functions(package) -> list[tuple[str, ast.FunctionDef]]:
    root = Path(package.__file__).parent
    out = []
    for path in sorted(root.rglob("*.py")):
        if "_pb2" in path.name:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out.append((f"{path.relative_to(root)}:{node.name}", node))
    return out


def test_no_signature_spells_a_stage_slice_out():
    loose = []
    for package in (sailor_sim, sailor_planner):
        for name, node in _functions(package):
            a = node.args
            params = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
            if SLICE_FIELDS <= params and params & GPU_NAMES:
                loose.append(name)
    assert not loose, f"take a StageSlice instead of first/last/gpu/tp/mbs: {loose}"


def test_the_caches_are_keyed_by_the_slice_and_equal_slices_share_one_entry():
    sim, job = Simulator(), Job.create("OPT-350M", 8, 2048, "bf16")
    a = sim.stage_time(job, StageSlice(0, 12, "A100-40", 2, 2))
    b = sim.stage_time(job, StageSlice(0, 12, "A100-40", 2, 2))
    assert a is b
    keys = [k for k in sim.cache.stage_time if k[0] == job.cache_id]
    assert keys == [(job.cache_id, StageSlice(0, 12, "A100-40", 2, 2))]
    sim.replica_peak(job, StageSlice(0, 12, "A100-40", 2, 2), 0, 2, 4)
    assert (job.cache_id, StageSlice(0, 12, "A100-40", 2, 2)) in sim.cache.range_memory
    other = sim.stage_time(job, StageSlice(0, 12, "A100-40", 2, 4))
    assert other.forward_s > a.forward_s  # mbs is part of the key: twice the samples


def test_slice_of_a_stage_replica_is_what_estimate_computes():
    job, plan = example_job(), example_plan()
    assert isinstance(plan, Plan)
    sim = Simulator()
    est = sim.estimate(job, plan)
    stage = plan.stages[0]
    replica = stage.replicas[0]
    s = StageSlice.of(stage, replica)
    assert s == (stage.first_layer, stage.last_layer, replica.gpu_type, replica.tp,
                 replica.microbatch_size)  # fmt: skip
    terms = sim.replica_memory(job, s, 0, plan.num_stages, replica.num_microbatches,
                               len(stage.replicas))  # fmt: skip
    assert sum(terms.values()) == est.memory[0].peak_bytes


# ---- the caches' ids live in the cache, not in the plan's value types -----------------------
def _rebuilt(plan: Plan) -> Plan:
    """An equal plan of new objects (as a request, a file or the planner builds one)."""
    return Plan.from_dict(plan.to_dict())


def test_value_types_carry_no_cache_ids_and_plan_holds_no_intern_table():
    import sailor_sim.spec.plan as plan_module

    plan = example_plan()
    stage, replica = plan.stages[0], plan.stages[0].replicas[0]
    for value in (plan, stage, replica):
        ids = [k for k in vars(value) if k.endswith(("_id", "_sig", "_full"))]
        assert not ids, f"{type(value).__name__} carries cache ids {ids}: they belong in the cache"
    tables = [k for k, v in vars(plan_module).items() if k.isupper() and isinstance(v, dict)]
    assert not tables, f"process-wide intern tables in spec/plan.py: {tables}"


def test_equal_plans_of_new_objects_share_the_cache_entries():
    job, plan = example_job(), example_plan()
    sim = Simulator()
    first = sim.estimate(job, plan)
    sizes = sim.cache.sizes()
    again = sim.estimate(job, _rebuilt(plan))
    assert again == first
    assert sim.cache.sizes() == sizes  # same ids, same summaries, nothing computed twice
    stage = plan.stages[0]
    copy = _rebuilt(plan).stages[0]
    assert copy is not stage and sim.cache.stage_id(copy) == sim.cache.stage_id(stage)
    r = stage.replicas[0]
    assert sim.cache.replica_id(copy.replicas[0]) == sim.cache.replica_id(r)


def test_ids_are_dropped_with_the_tables_that_use_them():
    job, plan = example_job(), example_plan()
    sim = Simulator()
    sim.estimate(job, plan)
    assert sim.cache.replica_ids and sim.cache.stage_ids
    sim.cache.clear()
    assert not sim.cache.replica_ids and not sim.cache.stage_ids and not sim.cache.stage_summary
    assert sim.estimate(job, plan) == Simulator().estimate(job, plan)


def test_replicas_that_differ_only_by_zone_share_their_compute_id():
    from sailor_sim import Replica

    sim = Simulator()
    a = Replica("A100-40", "us-central1-a", 2, 2, 4)
    b = Replica("A100-40", "us-central1-b", 2, 2, 4)
    c = Replica("A100-40", "us-central1-a", 2, 4, 4)
    assert sim.cache.replica_id(a) != sim.cache.replica_id(b)
    assert sim.cache.compute_id(a) == sim.cache.compute_id(b) != sim.cache.compute_id(c)
