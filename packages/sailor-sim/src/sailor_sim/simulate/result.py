"""Estimate: what the simulator returns for a (Job, Plan), with its breakdowns.

``to_dict`` is exactly what ``sailor-sim simulate --json`` prints; ``to_proto`` / ``from_proto``
use ``sailor.v1.Estimate``. The time breakdown's terms add up to ``iteration_time_s``, the cost
breakdown's to ``cost_per_iteration_usd``, and each replica's memory breakdown to its peak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

USD_DIGITS = 10
"""Significant digits of the dollar figures ``to_dict`` (and so ``--json``) gives: sums of
prices carry binary noise (3 x 12.24 = 36.720000000000006); ten digits drop it and keep a
fraction of a cent on a million-dollar run. The Python fields keep every digit."""


def usd(value: float | None) -> float | None:
    """A dollar figure for printing as JSON: ``USD_DIGITS`` significant digits."""
    return None if value is None else float(f"{value:.{USD_DIGITS}g}")


@dataclass(frozen=True)
class ReplicaMemory:
    """Peak memory of one GPU of one replica of one stage."""

    stage: int
    replica: int
    gpu_type: str
    zone: str
    peak_bytes: int
    capacity_bytes: int
    fits: bool
    breakdown_bytes: dict[str, int] = field(default_factory=dict)

    @classmethod
    def fast(cls, *values: Any) -> ReplicaMemory:
        """Build from every field in order without the frozen dataclass's per-field
        ``object.__setattr__`` (a million-replica plan builds a million of these)."""
        self = object.__new__(cls)
        object.__setattr__(self, "__dict__", dict(zip(_REPLICA_FIELDS, values, strict=True)))
        return self

    @property
    def headroom_bytes(self) -> int:
        """Capacity minus peak: negative when it does not fit."""
        return self.capacity_bytes - self.peak_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "replica": self.replica,
            "gpu_type": self.gpu_type,
            "zone": self.zone,
            "peak_bytes": self.peak_bytes,
            "capacity_bytes": self.capacity_bytes,
            "fits": self.fits,
            "breakdown_bytes": dict(self.breakdown_bytes),
        }


_REPLICA_FIELDS = tuple(f.name for f in fields(ReplicaMemory))


@dataclass(frozen=True)
class Estimate:
    iteration_time_s: float
    throughput_iters_per_s: float
    samples_per_s: float
    peak_memory_bytes: int
    fits: bool
    cost_per_iteration_usd: float | None
    """None (with ``cost_per_hour_usd``) only in an estimate without cost: a GPU of the plan has
    no price in its zone (``capacity.estimate_maybe_unpriced``; ``Simulator.estimate`` raises
    ``PriceUnavailableError`` instead)."""
    cost_per_hour_usd: float | None
    time_breakdown_s: dict[str, float]
    cost_breakdown_usd: dict[str, float]
    memory: tuple[ReplicaMemory, ...] = ()
    """Peak memory of every replica of every stage (per GPU), stage by stage. The simulator may
    pass a function instead, called on first access (the planner reads only
    ``peak_memory_bytes`` and ``fits``; 32 objects per plan would dominate its inner loop)."""
    sources: tuple[str, ...] = ()
    """Where the per-layer numbers came from (profile sources, e.g. 'imported:sailor'); like
    ``memory``, may be given as a function called on first read."""
    run_iterations: float | None = None
    """Whole-run figures, when the caller gave a number of iterations or tokens."""

    @classmethod
    def fast(cls, fields: dict[str, Any]) -> Estimate:
        """Build from a dict of every field without the frozen dataclass's per-field
        ``object.__setattr__`` (a few us per estimate in the planner's loop)."""
        self = object.__new__(cls)
        object.__setattr__(self, "__dict__", fields)
        return self

    @property
    def run_hours(self) -> float | None:
        if self.run_iterations is None:
            return None
        return self.run_iterations * self.iteration_time_s / 3600.0

    @property
    def run_cost_usd(self) -> float | None:
        if self.run_iterations is None or self.cost_per_iteration_usd is None:
            return None
        return self.run_iterations * self.cost_per_iteration_usd

    def to_dict(self, memory: bool = True) -> dict[str, Any]:
        """The estimate as plain data; ``memory=False`` leaves the per-replica list empty (a
        million-GPU plan has a million entries, all integers: no check needs them)."""
        out: dict[str, Any] = {
            "iteration_time_s": self.iteration_time_s,
            "throughput_iters_per_s": self.throughput_iters_per_s,
            "samples_per_s": self.samples_per_s,
            "peak_memory_bytes": self.peak_memory_bytes,
            "fits": self.fits,
            "cost_per_iteration_usd": usd(self.cost_per_iteration_usd),
            "cost_per_hour_usd": usd(self.cost_per_hour_usd),
            "breakdown": dict(self.time_breakdown_s),
            "cost_breakdown_usd": {k: usd(v) for k, v in self.cost_breakdown_usd.items()},
            "memory": [m.to_dict() for m in self.memory] if memory else [],
            "sources": list(self.sources),
        }
        if self.run_iterations is not None:
            out["run"] = {
                "iterations": self.run_iterations,
                "hours": self.run_hours,
                "cost_usd": usd(self.run_cost_usd),
            }
        return out

    def to_proto(self):
        from ..proto import estimate_pb2

        return estimate_pb2.Estimate(
            iteration_time_s=self.iteration_time_s,
            throughput_iters_per_s=self.throughput_iters_per_s,
            samples_per_s=self.samples_per_s,
            peak_memory_bytes=self.peak_memory_bytes,
            fits=self.fits,
            cost_per_iteration_usd=self.cost_per_iteration_usd,
            cost_per_hour_usd=self.cost_per_hour_usd,
            time_breakdown_s=self.time_breakdown_s,
            cost_breakdown_usd=self.cost_breakdown_usd,
            memory=[
                estimate_pb2.ReplicaMemory(
                    stage=m.stage,
                    replica=m.replica,
                    gpu_type=m.gpu_type,
                    zone=m.zone,
                    peak_bytes=m.peak_bytes,
                    capacity_bytes=m.capacity_bytes,
                    fits=m.fits,
                    breakdown_bytes=m.breakdown_bytes,
                )
                for m in self.memory
            ],
        )

    @classmethod
    def from_proto(cls, msg) -> Estimate:
        return cls(
            msg.iteration_time_s,
            msg.throughput_iters_per_s,
            msg.samples_per_s,
            msg.peak_memory_bytes,
            msg.fits,
            msg.cost_per_iteration_usd,
            msg.cost_per_hour_usd,
            dict(msg.time_breakdown_s),
            dict(msg.cost_breakdown_usd),
            memory=tuple(
                ReplicaMemory(
                    m.stage,
                    m.replica,
                    m.gpu_type,
                    m.zone,
                    m.peak_bytes,
                    m.capacity_bytes,
                    m.fits,
                    dict(m.breakdown_bytes),
                )
                for m in msg.memory
            ),
        )

    def check_sums(self, rel: float = 1e-9) -> None:
        """Raise AssertionError-free ValueError unless the breakdowns add up (used by tests)."""
        total = sum(self.time_breakdown_s.values())
        if not math.isclose(total, self.iteration_time_s, rel_tol=rel, abs_tol=1e-12):
            raise ValueError(f"time terms sum to {total}, not {self.iteration_time_s}")


class _LazyField:
    """Data descriptor for ``Estimate.memory``: stores what ``__init__`` gives and, when that is
    a function, calls it once on first read. Assignment after construction still raises
    ``FrozenInstanceError`` (the frozen dataclass's ``__setattr__`` runs first)."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return ()  # the dataclass default
        value = obj.__dict__.get(self.name, ())
        if callable(value):
            value = tuple(value())
            obj.__dict__[self.name] = value
        return value

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.name] = value


for _name in ("memory", "sources"):
    _lazy = _LazyField()
    _lazy.__set_name__(Estimate, _name)
    setattr(Estimate, _name, _lazy)
