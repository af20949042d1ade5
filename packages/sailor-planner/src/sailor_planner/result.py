"""What the planner returns: ranked plans with their simulator estimates, and search statistics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sailor_sim import Plan


@dataclass(frozen=True)
class RankedPlan:
    """A plan and the simulator's estimate of it (exactly ``Simulator.estimate(job, plan)``)."""

    plan: Plan
    estimate: Any
    """A ``sailor_sim.simulate.simulator.Estimate``."""
    options: Any = None
    """The ``sailor_sim.ExecutionOptions`` the estimate assumes: the job's own, or those the
    planner chose (``SearchOptions.search_execution_options``); None only when built by hand."""

    @property
    def extrapolated(self) -> tuple[str, ...]:
        """Profile sources of the estimate scaled beyond the measured range (e.g. microbatch
        16 where the profiles stop at 8); empty when every figure rests on measured data."""
        from .provenance import extrapolated

        return extrapolated(self.estimate.sources)

    def to_dict(self, job=None) -> dict[str, Any]:
        """With ``job``, the estimate also carries ``throughput`` (tokens/s, MFU),
        ``provenance`` and ``cost_by_provider`` as ``sailor-sim simulate --json`` does."""
        out = {"plan": self.plan.to_dict(), "estimate": self.estimate_dict(job)}
        if self.options is not None:
            out["options"] = self.options.to_dict()
        out["extrapolated"] = list(self.extrapolated)
        return out

    def estimate_dict(self, job=None) -> dict[str, Any]:
        """The estimate's JSON object; with ``job`` the figures ``plan_metrics`` puts on the
        wire too, under the same names as ``sailor-sim simulate --json``."""
        out = self.estimate.to_dict()
        if job is not None:
            rate, trust, costs = self.metrics(job)
            out["throughput"] = rate.to_dict()
            out["provenance"] = trust
            out["cost_by_provider"] = costs
        return out

    def metrics(self, job):
        """(throughput, provenance, cost per provider) of this plan for ``job`` under the
        options its estimate assumes: ``sailor_sim.simulate.metrics``, as ``sailor-sim
        simulate`` prints them (the CLI's JSON and the wire's PlanMetrics)."""
        import dataclasses

        from sailor_sim import cost_by_provider, provenance, throughput

        if self.options is not None:
            job = dataclasses.replace(job, options=self.options)
        rate = throughput(job, self.plan, self.estimate)
        return rate, provenance(self.estimate.sources, job, self.plan), cost_by_provider(self.plan)

    def to_proto(self, job=None):
        """The wire RankedPlan; with ``job`` also its metrics (tokens/s, MFU, provenance,
        cost per provider), as ``sailor-sim simulate`` prints them."""
        from sailor_sim.proto import job_pb2

        from .proto import planner_pb2

        msg = planner_pb2.RankedPlan(plan=self.plan.to_proto(), estimate=self.estimate.to_proto())
        if job is not None:
            msg.metrics.CopyFrom(plan_metrics(job, self))
        if self.options is not None:
            fields = self.options.to_dict()
            if fields["flash_attention"] is None:
                del fields["flash_attention"]
            msg.options.CopyFrom(job_pb2.ExecutionOptions(**fields))
        return msg


@dataclass
class SearchStats:
    """Counters of one search (mutable while the search runs, then frozen into the result)."""

    candidates_evaluated: int = 0
    """Complete candidate plans scored (by the composed cost model)."""
    pruned: int = 0
    """Branches cut by a bound (memory, useful data parallelism, budget) before scoring."""
    infeasible: int = 0
    """Candidates scored and rejected: out of memory or violating a constraint."""
    rescored: int = 0
    """Candidates re-scored with the full ``Simulator.estimate``."""
    memo_hits: int = 0
    """Sub-results (layer splits, stage tables) reused from the memo."""
    elapsed_s: float = 0.0
    scoring_s: float = 0.0
    """Time spent placing, balancing and scoring candidates (the rest builds tables)."""

    def absorb(self, other: SearchStats) -> None:
        """Add another search's counters (the planner's second, lean-options search)."""
        for name in ("candidates_evaluated", "pruned", "infeasible", "rescored", "memo_hits"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.scoring_s += other.scoring_s

    @property
    def evaluations_per_s(self) -> float:
        """Candidates scored per second of scoring."""
        return self.candidates_evaluated / self.scoring_s if self.scoring_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidates_evaluated": self.candidates_evaluated,
            "pruned": self.pruned,
            "infeasible": self.infeasible,
            "rescored": self.rescored,
            "memo_hits": self.memo_hits,
            "evaluations_per_s": round(self.evaluations_per_s, 1),
            "scoring_s": round(self.scoring_s, 4),
            "elapsed_s": round(self.elapsed_s, 4),
        }

    def to_proto(self):
        from .proto import planner_pb2

        return planner_pb2.SearchStats(
            candidates_evaluated=self.candidates_evaluated,
            pruned=self.pruned,
            infeasible=self.infeasible,
            evaluations_per_s=self.evaluations_per_s,
            rescored=self.rescored,
            memo_hits=self.memo_hits,
        )


@dataclass(frozen=True)
class PlanResult:
    plans: tuple[RankedPlan, ...]
    """Best first under the request's objective; every one respects the constraints."""
    pareto: tuple[RankedPlan, ...]
    """Throughput-vs-$/iteration frontier of the feasible candidates, cheapest first."""
    search_time_s: float
    partial: bool
    """True when the deadline stopped the search; the plans are the best found so far."""
    stats: SearchStats = field(default_factory=SearchStats)

    @property
    def best(self) -> RankedPlan:
        return self.plans[0]

    def to_dict(self, job=None) -> dict[str, Any]:
        """The CLI's ``--json`` object: the best plan and its estimate at the top level (with
        ``job``, each estimate with its throughput, provenance and cost per provider)."""
        best = self.plans[0]
        return {
            "plan": best.plan.to_dict(),
            "estimate": best.estimate_dict(job),
            **({"options": best.options.to_dict()} if best.options is not None else {}),
            "search_time_s": self.search_time_s,
            "partial": self.partial,
            "stats": self.stats.to_dict(),
            "plans": [p.to_dict(job) for p in self.plans],
            "pareto": [p.to_dict(job) for p in self.pareto],
        }

    def to_proto(self, job=None):
        from .proto import planner_pb2

        return planner_pb2.PlanResponse(
            plans=[p.to_proto(job) for p in self.plans],
            search_time_s=self.search_time_s,
            partial=self.partial,
            stats=self.stats.to_proto(),
            pareto=[p.to_proto(job) for p in self.pareto],
        )


def plan_metrics(job, ranked: RankedPlan):
    """``sailor.v1.PlanMetrics`` of a ranked plan: ``sailor_sim.simulate.metrics``' throughput,
    provenance and cost per provider, under the options its estimate assumes."""
    from .proto import planner_pb2

    rate, trust, costs = ranked.metrics(job)
    return planner_pb2.PlanMetrics(
        tokens_per_s=rate.tokens_per_s,
        tokens_per_s_per_gpu=rate.tokens_per_s_per_gpu,
        mfu=rate.mfu,
        provenance=[planner_pb2.SourceTrust(source=p["source"], trust=p["trust"]) for p in trust],
        cost_by_provider=[
            planner_pb2.ProviderCost(
                provider=c["provider"],
                region=c["region"],
                usd_per_hour=c["usd_per_hour"] or 0.0,
                spot_usd_per_hour=c["spot_usd_per_hour"] or 0.0,
                missing=c.get("missing", ""),
            )
            for c in costs
        ],
    )
