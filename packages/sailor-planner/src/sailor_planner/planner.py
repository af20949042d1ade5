"""The Planner: search, then re-score with ``Simulator.estimate`` and rank.

A ``Planner`` holds one simulator and, per job, the tabulated simulator components and memo
tables of the search. None of them depends on availability, so ``plan(..., previous=...)`` after
GPUs joined or left reuses all of them (and seeds the ranking with the previous plan when it
still fits the new inventory).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable

from sailor_sim import (
    ExecutionOptions,
    Inventory,
    Job,
    Plan,
    SailorSimError,
    check_options_on,
    get_gpu,
)

from .errors import NoFeasiblePlanError, RequestCancelledError
from .request import SearchOptions
from .result import PlanResult, RankedPlan
from .search.allocate import Scorer, build_plan
from .search.branch_bound import KEEP_MARGIN, Memo, Search, reads_only_the_best
from .search.costs import CostView
from .search.execution import best_options, fitted_expert_parallel, lean
from .search.templates import fits_every_allocation, surely_fits

LEAN_SLOWDOWN = 0.95
"""A lower bound of (a lean plan's time under its best variant) / (its time as the lean search
scores it): that search times plans without recomputation (the fastest any variant runs) and
with the lean options' sharding, which moves the all-reduce's ring volume (ZeRO-1, ZeRO Sec. 7)
or more (ZeRO-3); 0.95 leaves room for sequence parallelism's shorter norms and for ZeRO-2
where the lean plan has ZeRO-3."""
RELAXED_VISITS = 10
"""Most lean candidates put through the option search per plan kept (``_rank_relaxed``): a
bound on its work where the optimistic scores stay ahead of what the variants reach. The lean
search keeps that many of its best exact (``Search(keep=...)``), so the candidates read are
its true best by the relaxed score, not those its bounds happened to leave unpruned: with
the job's own prices as cost bounds (tighter than the catalog's cheapest region) it pruned
LLaMA-3-8B's best ZeRO-1 plan on 16 H100 + 16 A100 (0.578 $/it), its three best relaxed
scores needing recomputation and none of them winning."""
OPTION_BREADTH = 3
"""Plans ranked for the option search, whatever top_k below it: plan #2 under its best options
can beat plan #1 under its own (LLaMA-3-8B fp32, 16 H100, gbs 512: 57.6 s/iter against 59.6),
so --top 1 must not shrink what the option search sees; 3 is what the branch and bound keeps
exact for top_k 1 (``KEEP_MARGIN``), so its pruning is unchanged. --top 1 to 3 agree on their
first plan; a larger --top puts more plans through the option search, which can only find a
better first plan."""
CONTEXT_PARALLEL_HINT = 8192
"""Sequence length from which a plan that fits nowhere is also told about context parallelism
(one sample's activations grow with it; at 8192 a LLaMA-70B block's input is 128 MB per sample)."""
MAX_JOBS = 16
"""Jobs whose tables a Planner keeps (least recently used dropped first)."""


def _no_plan_fix(job: Job, options: SearchOptions, constrained: bool) -> str:
    """What to change when no plan is found. Memory is set by the microbatch, not the global
    batch: a smaller batch helps only where it leaves fewer microbatches than stages in
    flight, so the fixes named are the ones that shrink a GPU's share."""
    if constrained:
        return "relax the constraints or add GPUs"
    fixes = ["add GPUs or GPUs with more memory"]
    if not options.search_execution_options:
        fixes.append("let the planner try ZeRO and recomputation (drop --fixed-options)")
    if job.options.context_parallel == 1 and job.sequence_length >= CONTEXT_PARALLEL_HINT:
        fixes.append(
            f"split each {job.sequence_length}-token sequence over GPUs (--cp N, context "
            "parallelism) or train on shorter sequences"
        )
    return "; ".join(fixes)


def _refusals(reasons, shown: int = 3) -> str:
    """The first ``shown`` of the search's distinct option refusals, and how many more."""
    reasons = list(reasons)
    more = f"; and {len(reasons) - shown} more" if len(reasons) > shown else ""
    return "; ".join(reasons[:shown]) + more


def _distinct_plans(found, ordered=None):
    """(position in the search's order, plan, its JSON) of each distinct plan among the
    admitted candidates of ``found``, best first (``ordered``: them, already sorted)."""
    seen: set[str] = set()
    for n, s in enumerate(ordered or sorted(found.admitted, key=found.key)):
        plan = build_plan(s)
        text = plan.to_json(indent=None)
        if text not in seen:
            seen.add(text)
            yield n, plan, text


class _Clock:
    """The request's deadline and caller, asked between the re-scorings that follow the
    search: each ranked plan's option search is tens of ms of simulator calls, so top_k 100
    on thousands of GPUs is seconds of work, which ran past a client's deadline (gRPC
    DEADLINE_EXCEEDED instead of the partial answer) and on after the caller had gone. Past
    the deadline the ranking keeps what it has (``cut``: the result is partial); a caller that
    went away (``should_stop``) ends the call with RequestCancelledError."""

    def __init__(self, options: SearchOptions, start: float, should_stop) -> None:
        self.end = math.inf if options.deadline_s is None else start + options.deadline_s
        self.should_stop = should_stop
        self.cut = False

    def late(self) -> bool:
        if self.should_stop is not None and self.should_stop():
            raise RequestCancelledError(
                "the caller cancelled the request or its deadline passed; planning stopped",
                field="request",
            )
        self.cut = self.cut or time.perf_counter() > self.end
        return self.cut


class Planner:
    def __init__(self, simulator) -> None:
        self.sim = simulator
        self._lock = threading.Lock()
        self._per_job: dict[tuple, tuple[CostView, Scorer, Memo]] = {}

    def _state(self, job: Job, memory_job: Job | None = None) -> tuple[CostView, Scorer, Memo]:
        """Tables, scorer and memo of ``job`` (times) under ``memory_job``'s memory (default
        the same job), kept across requests."""
        memory_job = memory_job or job
        # model, seq, dtype, optimizer, options of both
        key = (job.cache_id, memory_job.cache_id, job.global_batch_size)
        with self._lock:
            state = self._per_job.pop(key, None)
            if state is None:
                cv = CostView(self.sim, job, memory_job, self._times_of(job))
                state = (cv, Scorer(cv), Memo())
            self._per_job[key] = state  # most recently used last
            while len(self._per_job) > MAX_JOBS:  # a long-running server stays bounded
                self._per_job.pop(next(iter(self._per_job)))
        return state

    def _times_of(self, job: Job) -> CostView | None:
        """A kept view whose stage times are ``job``'s (``Job.timing_id``), to share its time
        tables; called under the lock."""
        for cv, _scorer, _memo in self._per_job.values():
            if cv.job.timing_id == job.timing_id:
                return cv
        return None

    def plan(
        self,
        job: Job,
        inventory: Inventory,
        options: SearchOptions | None = None,
        previous: Plan | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> PlanResult:
        """Ranked plans for ``job`` on ``inventory``; raises NoFeasiblePlanError if none fits.
        ``should_stop`` (polled inside the search) ends it with RequestCancelledError."""
        options = options or SearchOptions()
        start = time.perf_counter()
        if not any(get_gpu(g).supports(job.dtype) for g in inventory.gpu_types):
            raise NoFeasiblePlanError(
                f"no GPU type of the inventory ({', '.join(inventory.gpu_types)}) can train in "
                f"{job.dtype}; add GPUs that support it or train in another dtype",
                field="inventory",
            )
        check_options_on(job.options, job.dtype, [get_gpu(g) for g in inventory.gpu_types])
        cv, scorer, memo = self._state(job)
        seed = self._seed(job, inventory, options, previous)
        incumbent = None
        if seed is not None:
            e = seed.estimate
            incumbent = (e.throughput_iters_per_s, e.cost_per_iteration_usd)
        search = Search(cv, scorer, memo, inventory, options, incumbent, should_stop)
        found = search.run()
        stats = search.stats
        clock = _Clock(options, start, should_stop)
        breadth = max(options.top_k, OPTION_BREADTH) if options.search_execution_options else 0
        ranked = self._rank(job, found, options, stats, seed, clock, breadth)
        partial = search.partial
        searched = [(job, found)]  # (job under some options, its candidates) for the frontier
        if options.search_execution_options:
            best = ranked[0].estimate if ranked else None
            lean, lean_partial = [], _remaining(options, start, stats) is None
            if not lean_partial:
                lean, lean_partial, more = self._lean_search(
                    job, inventory, options, start, stats, clock, best
                )
                searched += more
            ranked = self._choose_options(job, ranked + lean, options, clock)
            partial = partial or lean_partial
        else:  # every ranked plan says which options its estimate assumes
            ranked = [RankedPlan(r.plan, r.estimate, r.options or job.options) for r in ranked]
        pareto = self._pareto(job, searched, options, stats, ranked, clock)
        partial = partial or clock.cut
        stats.elapsed_s = time.perf_counter() - start
        if not ranked:
            c = options.constraints
            constrained = any(
                v is not None
                for v in (c.max_cost_per_iteration, c.max_cost_per_hour, c.min_throughput)
            )
            why = "no plan meets the constraints" if constrained else "no plan fits in memory"
            if search.refused:  # the options ruled shapes out before memory was asked
                why += f" among the shapes the job's options run ({_refusals(search.refused)})"
            v = job.options.virtual_stages
            if v > 1:  # the search keeps only plans interleaving runs on (spec.interleave)
                why += (
                    f" and runs interleaved 1F1B with virtual_stages={v} (>= 2 stages, "
                    "microbatch counts multiples of the stage count, a layer in every chunk; "
                    "fewer virtual stages may find one)"
                )
            raise NoFeasiblePlanError(
                f"{why} on {inventory.total_gpus} GPUs "
                f"({', '.join(f'{p.count}x {p.gpu_type}@{p.zone}' for p in inventory.pools)}); "
                + _no_plan_fix(job, options, constrained),
                field="constraints" if constrained else "inventory",
            )
        return PlanResult(tuple(ranked), tuple(pareto), stats.elapsed_s, partial, stats)

    # ---- re-scoring ------------------------------------------------------------------------
    def _estimate(self, job: Job, plan: Plan, stats) -> RankedPlan | None:
        stats.rescored += 1
        fitted = fitted_expert_parallel(job, plan)
        try:
            est = self.sim.estimate(fitted, plan)
        except SailorSimError:
            return None
        return RankedPlan(plan, est, None if fitted is job else fitted.options)

    def _admits(self, options: SearchOptions, r: RankedPlan) -> bool:
        e = r.estimate
        return e.fits and options.constraints.admits(
            e.throughput_iters_per_s, e.cost_per_iteration_usd, e.cost_per_hour_usd
        )

    def _key(self, options: SearchOptions, r: RankedPlan) -> tuple:
        e = r.estimate
        if options.objective == "cost":
            return (e.cost_per_iteration_usd, -e.throughput_iters_per_s)
        return (-e.throughput_iters_per_s, e.cost_per_iteration_usd)

    def _seed(self, job, inventory, options, previous) -> RankedPlan | None:
        """The previous plan with its estimate, if it still fits the inventory and the
        constraints: a warm start for the branch and bound, and a candidate of the ranking."""
        if previous is None or not _fits_inventory(previous, inventory):
            return None
        try:
            est = self.sim.estimate(job, previous)
        except SailorSimError:
            return None
        r = RankedPlan(previous, est)
        return r if self._admits(options, r) else None

    def _rank(self, job, found, options, stats, seed, clock, breadth=0) -> list[RankedPlan]:
        """Re-score the best candidates with the simulator; keep the max(top_k, breadth) that
        fit and respect the constraints by the simulator's own figures (past the deadline,
        those re-scored so far, once one is kept)."""
        keep = max(options.top_k, breadth)
        want = keep + options.rescore
        out: list[RankedPlan] = []
        seen: set[str] = set()
        batch = 0
        for n, plan, text in _distinct_plans(found):
            if n // want > batch:  # in batches of `want`: stop after one with enough, or 21
                batch = n // want
                if len(out) >= want or batch > 20:
                    break
            if out and clock.late():
                break
            seen.add(text)
            r = self._estimate(job, plan, stats)
            if r is not None and self._admits(options, r):
                out.append(r)
        if seed is not None and seed.plan.to_json(indent=None) not in seen:
            stats.rescored += 1
            out.append(seed)
        out.sort(key=lambda r: self._key(options, r))
        return out[:keep]

    def _rank_relaxed(self, job, lean_job, found, options, stats, clock) -> list[RankedPlan]:
        """The lean search's candidates under their best options, best first: its scores are
        optimistic (no recomputation: ``_lean_search``), so candidates are taken in their
        order, each put through the option search, until the next one's score cannot beat
        the max(top_k, OPTION_BREADTH)-th best found (a plan that fits only with ZeRO-1 and
        no recomputation is then not hidden behind plans that fit only with recomputation:
        LLaMA-3-8B bf16 on 16 H100, min cost, PP1 DP5 ZeRO-1 at $0.0356 per iteration, the
        4th in that order, where the first three cost >= $0.0368 under their best options)."""
        keep = max(options.top_k, OPTION_BREADTH)
        admits = lambda r: self._admits(options, r)  # noqa: E731
        key = lambda r: self._key(options, r)  # noqa: E731
        out: list[RankedPlan] = []
        ordered = sorted(found.admitted, key=found.key)
        for n, plan, _text in _distinct_plans(found, ordered):
            if len(out) >= keep and found.key(ordered[n])[0] >= key(out[keep - 1])[0]:
                break  # its best variant is no better than its optimistic score
            if n >= RELAXED_VISITS * keep or (out and clock.late()):
                break
            r = self._estimate(lean_job, plan, stats)
            if r is None or not r.estimate.fits:
                continue
            chosen = best_options(self.sim, job, r, admits, key)
            if admits(chosen):
                out.append(chosen)
                out.sort(key=key)
        return out[:keep]

    def _lean_search(self, job, inventory, options, start, stats, clock, best):
        """The search again under the job's leanest options (``execution.lean``: ZeRO-1 for
        any plan, ZeRO-3 for one-stage plans, both with full recomputation): plans that fit
        in memory only with recomputation or sharding (LLaMA-8B in bf16 on 8 GPUs without
        ZeRO) are invisible to a search with the job's own options. Its incumbent is the
        first search's best relaxed by ``LEAN_SLOWDOWN``: a lean plan that cannot reach it
        cannot win under any variant either, so such branches are pruned. Each search skips
        the shapes an earlier one covers (every plan fits under its options: the job's own,
        then ZeRO-1's for the ZeRO-3 search, ``templates.fits_every_allocation``); where a
        covered plan runs faster under a later set's options (ZeRO-3 hiding its traffic),
        ``best_options`` finds that variant for the plans ranked. Returns the ranked
        plans (their estimates under the lean options), whether a search was partial, and
        (lean job, its candidates) per search for the frontier."""
        out, partial, searched = [], False, []
        base_cv = self._state(job)[0]
        earlier: list[tuple[ExecutionOptions, Scorer]] = []  # lean sets searched, in order
        for lean_options in lean(job.options, job.model.moe, job.sequence_length):
            lean_job = dataclasses.replace(job, options=lean_options)
            if lean_job == job:
                continue
            budget = _remaining(options, start, stats)
            if budget is None:
                partial = True
                break
            incumbent = None
            if best is not None:  # what a lean plan must reach to possibly win (see lean)
                incumbent = (
                    best.throughput_iters_per_s * LEAN_SLOWDOWN,
                    best.cost_per_iteration_usd / LEAN_SLOWDOWN,
                )
            # Relaxed: the lean options' memory, the job's own recomputation's times (the
            # fastest any variant can be), so plans are ranked as their best variant may run.
            timed = dataclasses.replace(lean_options, recompute="none")
            timed_job = dataclasses.replace(job, options=timed)
            cv, scorer, memo = self._state(timed_job, lean_job)
            # Shapes whose every plan fits under the job's own options were searched by the
            # first search, and those whose every plan fits under an earlier lean set by
            # that search: this one is for the plans that fit only with its options.
            wider = [sc for o, sc in earlier if _same_replicas(o, lean_options)]
            if not reads_only_the_best(options):  # a frontier reads every candidate scored
                wider = []
            search = Search(
                cv,
                scorer,
                memo,
                inventory,
                budget,
                incumbent,
                clock.should_stop,
                covered=_covered_by(base_cv, wider, scorer),
                keep=RELAXED_VISITS * max(options.top_k, OPTION_BREADTH) + KEEP_MARGIN,
            )
            earlier.append((lean_options, scorer))
            found = search.run()
            stats.absorb(search.stats)
            ranked = self._rank_relaxed(job, lean_job, found, options, stats, clock)
            out += [RankedPlan(r.plan, r.estimate, r.options or lean_options) for r in ranked]
            searched.append((lean_job, found))
            partial = partial or search.partial
        return out, partial, searched

    def _choose_options(self, job, ranked, options, clock) -> list[RankedPlan]:
        """Each ranked plan under its best recomputation / sharding / SP, re-ranked (one entry
        per plan), the top_k kept; past the deadline the rest keep the options they were
        scored with."""
        out: dict[str, RankedPlan] = {}
        for r in ranked:
            best = r
            if not clock.late():
                best = best_options(
                    self.sim,
                    job,
                    r,
                    lambda c: self._admits(options, c),
                    lambda c: self._key(options, c),
                )
            if best.options is None:
                best = RankedPlan(best.plan, best.estimate, job.options)
            text = best.plan.to_json(indent=None)
            if text not in out or self._key(options, best) < self._key(options, out[text]):
                out[text] = best
        chosen = [r for r in out.values() if self._admits(options, r)]
        chosen.sort(key=lambda r: self._key(options, r))
        return chosen[: options.top_k]

    def _pareto(self, job, searched, options, stats, ranked, clock) -> list[RankedPlan]:
        """Throughput-vs-$/iteration frontier of the feasible candidates (they fit and meet
        the request's constraints, by the simulator's figures) and the ranked plans (under
        their chosen options), at most ``pareto_points`` of it spread evenly, cheapest first:
        no point is dominated by another or by a ranked plan. Past the deadline, the points
        re-scored so far (and the ranked plans)."""
        if options.pareto_points <= 0:
            return []
        k = options.pareto_points
        admits = lambda r: self._admits(options, r)  # noqa: E731 (fits and meets constraints)
        points = []
        for searched_job, found in searched:
            # the search's admitted candidates meet the constraints by its own figures; the
            # re-scored points are checked again below
            frontier = _non_dominated(
                found.admitted, lambda s: (s.cost_per_iteration, s.throughput)
            )
            for s in _spread(frontier, k):
                if clock.late():
                    break
                r = self._estimate(searched_job, build_plan(s), stats)
                if r is not None:
                    points.append(RankedPlan(r.plan, r.estimate, searched_job.options))
        if options.search_execution_options:  # each point at its fastest options, as ranked

            def fastest(c: RankedPlan) -> tuple:
                return (-c.estimate.throughput_iters_per_s, c.estimate.cost_per_iteration_usd)

            points = [
                r if clock.late() else best_options(self.sim, job, r, admits, fastest)
                for r in points
            ]
        points = [r for r in points if admits(r)] + list(ranked)
        points = _non_dominated(
            points, lambda r: (r.estimate.cost_per_iteration_usd, r.estimate.throughput_iters_per_s)
        )
        return _spread(points, k)


def _spread(points: list, k: int) -> list:
    """At most ``k`` of ``points`` spread evenly, both ends kept (one: the last, fastest)."""
    if len(points) <= k:
        return points
    if k == 1:
        return [points[-1]]
    step = (len(points) - 1) / (k - 1)
    return [points[i] for i in sorted({round(i * step) for i in range(k)})]


def _non_dominated(items, figures) -> list:
    """Items no other beats on both ($/iteration, iterations/s) = ``figures(item)``, cheapest
    first (ties: the faster one only)."""
    out, best_thr = [], -1.0
    for item in sorted(items, key=lambda x: (figures(x)[0], -figures(x)[1])):
        if figures(item)[1] > best_thr * (1 + 1e-9):
            out.append(item)
            best_thr = figures(item)[1]
    return out


def _remaining(options: SearchOptions, start: float, stats) -> SearchOptions | None:
    """``options`` with what is left of its deadline (since ``start``) and of its candidate
    budget (``stats`` so far): one plan() call keeps them across its searches. None when
    either is spent."""
    left, budget = options.deadline_s, options.max_candidates
    if left is not None:
        left -= time.perf_counter() - start
        if left <= 0:
            return None
    if budget is not None:
        budget -= stats.candidates_evaluated
        if budget <= 0:
            return None
    return dataclasses.replace(options, deadline_s=left, max_candidates=budget)


def _covered_by(base: CostView, wider: list[Scorer], own: Scorer) -> Callable:
    """The shapes a lean search (``own``) skips: every plan fits under the job's own options
    (``base``, searched first) or under an earlier lean set's (``wider``)."""

    def covered(shape) -> bool:
        return surely_fits(base, shape) or any(
            fits_every_allocation(sc, shape, own) for sc in wider
        )

    return covered


def _same_replicas(a: ExecutionOptions, b: ExecutionOptions) -> bool:
    """Whether a shape means the same replicas under both option sets (context and expert
    parallel degrees lay replicas out: a shape of one is another plan under the other)."""
    return (a.context_parallel, a.expert_parallel) == (b.context_parallel, b.expert_parallel)


def _fits_inventory(plan: Plan, inventory: Inventory) -> bool:
    return all(inventory.count(g, z) >= n for (g, z), n in plan.gpu_counts().items())
