"""What a planning request asks for: objective, constraints and search options (values only)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .errors import RequestError

OBJECTIVES = ("throughput", "cost")
WIRE_OBJECTIVES = {0: "throughput", 1: "throughput", 2: "cost"}
"""``sailor.v1.Objective`` -> objective: UNSPECIFIED (0) is the default, throughput."""


def objective_from_wire(value: int) -> str:
    """The objective of a PlanRequest or ReplayRequest; a value this server does not know (a
    newer client's enum) names the values it takes."""
    if value not in WIRE_OBJECTIVES:
        raise RequestError(
            f"unknown objective {value}; use OBJECTIVE_THROUGHPUT (1) or OBJECTIVE_COST (2), "
            "or leave it unset (throughput)",
            field="objective",
        )
    return WIRE_OBJECTIVES[value]


MAX_TOP_K = 100
"""Most ranked plans one request returns (CLI --top, gRPC top_k): each is re-scored by the
simulator and sent whole."""
MAX_PARETO_POINTS = 100
"""Most frontier points one request returns (CLI --pareto, gRPC pareto_points), for the same
reason."""
DEFAULT_MAX_PIPELINE_DEPTH = 16
"""Deepest pipeline a search considers unless told (CLI --max-pipeline-depth, PlanRequest)."""
MAX_PIPELINE_DEPTH = 1024
"""Most a request may ask for (the model's layer ids bound a search anyway)."""


@dataclass(frozen=True)
class Constraints:
    """Optional limits a returned plan must respect; ``None`` = unset."""

    max_cost_per_iteration: float | None = None
    """Upper bound on $/iteration (compute + egress)."""
    max_cost_per_hour: float | None = None
    """Upper bound on $/hour of the GPUs (and egress) the plan uses."""
    min_throughput: float | None = None
    """Lower bound on iterations/s."""

    def __post_init__(self) -> None:
        for name in ("max_cost_per_iteration", "max_cost_per_hour", "min_throughput"):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                # The flag too, as --deadline, --top and --pareto: a CLI user typed no field.
                flag = "--" + name.replace("_", "-")
                raise RequestError(
                    f"must be a positive number (CLI {flag}), got {value!r}", field=name
                )

    def admits(self, throughput: float, cost_per_iteration: float, cost_per_hour: float) -> bool:
        """True when a plan with these figures respects every set limit."""
        # A relative tolerance of 1e-9 keeps a plan that sits exactly on a bound.
        tol = 1e-9
        if self.max_cost_per_iteration is not None and cost_per_iteration > (
            self.max_cost_per_iteration * (1 + tol)
        ):
            return False
        if self.max_cost_per_hour is not None and cost_per_hour > self.max_cost_per_hour * (
            1 + tol
        ):
            return False
        if self.min_throughput is not None and throughput < self.min_throughput * (1 - tol):
            return False
        return True

    @classmethod
    def from_optional(
        cls,
        max_cost_per_iteration: float | None = None,
        max_cost_per_hour: float | None = None,
        min_throughput: float | None = None,
    ) -> Constraints:
        """Build from wire values where 0 means unset."""

        def unset_zero(v: float | None) -> float | None:
            return None if v is None or v == 0 else v

        return cls(
            unset_zero(max_cost_per_iteration),
            unset_zero(max_cost_per_hour),
            unset_zero(min_throughput),
        )


@dataclass(frozen=True)
class SearchOptions:
    """Knobs of the search; the defaults are what the CLI and the server use."""

    objective: str = "throughput"
    constraints: Constraints = field(default_factory=Constraints)
    top_k: int = 1
    allow_cross_region_data_parallel: bool = False
    """Replicas of one stage may sit in different regions (slow all-reduce); off by default."""
    max_pipeline_depth: int = DEFAULT_MAX_PIPELINE_DEPTH
    """Deepest pipeline considered (also bounded by the model's layer ids and the inventory)."""
    microbatch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    exact_partition_limit: int = 3000
    """Enumerate every layer split of a pipeline shape exactly while there are at most this many;
    above, a dynamic program over layer prefixes picks the split (see README)."""
    rescore: int = 2
    """Candidates (beyond top_k) re-scored with the full simulator before ranking: the search
    scores with the simulator's own components, so only a memory verdict can differ."""
    pareto_points: int = 0
    """Most points of the throughput-vs-cost frontier returned (re-scored with the simulator;
    each fits and meets ``constraints``); 0 = none."""
    deadline_s: float | None = None
    """Wall-clock seconds after which the search stops and returns its best so far (partial)."""
    max_candidates: int | None = None
    """Most allocations scored; beyond, the search returns its best so far (partial), or
    WorkLimitError when it has none. None = no limit (the server always sets one)."""
    profiled_only: bool = False
    """Refuse (GPU type, microbatch size, TP) configurations the profiles do not cover, i.e.
    that the simulator extrapolates by roofline scaling (``provenance``); off: such plans are
    allowed and flagged (``RankedPlan.extrapolated``)."""
    search_execution_options: bool = True
    """Also choose recomputation, ZeRO sharding and sequence parallelism for the best plans
    (``execution.best_options``); each ``RankedPlan.options`` says which. On by default, the
    one default of the CLI (``--search-options``), the gRPC PlanRequest (unset = on) and
    ``PlannerClient``; False keeps the job's options (what a runtime that runs the job's own
    options must ask for)."""

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise RequestError(
                f"unknown objective {self.objective!r}; use one of {', '.join(OBJECTIVES)}",
                field="objective",
            )
        _in_range("top_k", self.top_k, 1, MAX_TOP_K, "--top")
        _in_range("pareto_points", self.pareto_points, 0, MAX_PARETO_POINTS, "--pareto")
        _in_range(
            "max_pipeline_depth", self.max_pipeline_depth, 1, MAX_PIPELINE_DEPTH,
            "--max-pipeline-depth",
        )  # fmt: skip
        if not self.microbatch_sizes or min(self.microbatch_sizes) < 1:
            raise RequestError("needs positive sizes", field="microbatch_sizes")
        if self.max_candidates is not None and self.max_candidates < 1:
            raise RequestError(f"must be >= 1, got {self.max_candidates}", field="max_candidates")
        if self.deadline_s is not None and not self.deadline_s > 0:
            raise RequestError(
                f"must be a positive number of seconds (CLI --deadline), got {self.deadline_s}",
                field="deadline_s",
            )


def _in_range(name: str, value: int, low: int, high: int, flag: str) -> None:
    """One limit for every front end: the CLI, gRPC and ``Planner`` callers all build
    ``SearchOptions``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(
            f"must be an integer from {low} to {high} (CLI {flag}), got {value!r}", field=name
        )
