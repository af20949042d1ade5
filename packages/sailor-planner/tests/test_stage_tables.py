"""One-stage stage tables (``templates._one_stage_tables``): only the whole-model entry is
computed, and it must be what the per-position matrices (``templates._position``) give, the
TP raised where memory needs it, none where no degree fits; a search whose options share no
deeper table (the ZeRO-3 lean search) then tabulates no per-layer times."""

import dataclasses
import math

from sailor_planner.search.costs import CostView
from sailor_planner.search.templates import _p2p_same_zone, _position, stage_tables
from sailor_sim import ExecutionOptions, Job, Simulator

ZONE = "us-central1-a"


def _jobs():
    yield Job.create("OPT-350M", 1024, 2048, "fp32")
    yield Job.create("LLaMA-2-7B", 512, 4096, "bf16")
    llama = Job.create("LLaMA-3-8B", 512, 8192, "bf16")
    yield llama
    for zero in ("zero1", "zero3"):
        options = dataclasses.replace(llama.options, zero=zero, recompute="full")
        yield dataclasses.replace(llama, options=options)


def test_one_stage_tables_match_the_position_matrices():
    sim = Simulator()
    raised = missing = checked = fallback = 0
    for job in _jobs():
        cv = CostView(sim, job)
        last = cv.n - 1
        for g in ("A100-40", "H100-80", "V100-16"):
            if not cv.supports(g):
                continue
            degrees_all = cv.tp_of(g)
            for m in (1, 4):
                for t in degrees_all:
                    degrees = tuple(
                        d for d in degrees_all if d >= t and not cv.profiled_oom(g, m, d)
                    )
                    tab = stage_tables(cv, g, 1, m, t, ZONE)
                    p2p = _p2p_same_zone(cv, g, m, sorted(degrees), ZONE)
                    best, choice, _diag = _position(
                        cv, g, m, degrees, 1, 0, cv.capacity(g), p2p, (0, 1, 1)
                    )
                    checked += 1
                    if not math.isfinite(best[0, last]):
                        assert tab is None, (job.model.name, g, m, t)
                        missing += 1
                        continue
                    assert tab is not None, (job.model.name, g, m, t)
                    assert tab.cost[0][0, last] == best[0, last]
                    assert tab.tp[0][0, last] == choice[0, last]
                    raised += int(choice[0, last]) > t
                    d = int(choice[0, last])  # chosen by "may fit" where none surely fits
                    fallback += not cv.fit_matrix(g, m, d, 1, 0, cv.capacity(g), True)[0, last]
    # the cases cover a raised TP, the may-fit fallback and a configuration no degree fits
    assert checked >= 40 and raised and fallback and missing, (checked, raised, fallback, missing)


def test_one_stage_tables_tabulate_no_per_layer_times():
    job = Job.create("LLaMA-3-8B", 512, 8192, "bf16")
    options = dataclasses.replace(job.options, zero="zero3", recompute="full")
    cv = CostView(Simulator(), dataclasses.replace(job, options=options))
    assert stage_tables(cv, "H100-80", 1, 1, 1, ZONE) is not None
    assert not cv._time and not cv._tmat  # no time prefix, no range matrix


def test_deeper_tables_keep_the_whole_model_time_of_one_stage():
    """Where a deeper table built the prefix first, the one-stage entry reads it: the same
    seconds as a fresh view's single stage_time call."""
    job = Job.create("OPT-350M", 1024, 2048, "fp32", options=ExecutionOptions())
    sim = Simulator()
    warm, cold = CostView(sim, job), CostView(sim, job)
    assert stage_tables(warm, "A100-40", 2, 4, 1, ZONE) is not None
    assert warm._time
    got = stage_tables(warm, "A100-40", 1, 4, 1, ZONE)
    want = stage_tables(cold, "A100-40", 1, 4, 1, ZONE)
    last = warm.n - 1
    assert got.cost[0][0, last] == want.cost[0][0, last]
