"""Which figures of a plan come from outside the measured profiles.

A profile folder (or the original Sailor artifacts) holds measured entries for some
(GPU type, microbatch size, TP) only; the simulator fills the rest by interpolation between two
measured microbatch sizes, or beyond them by scaling the nearest measured entry with the
roofline ratio (``sailor_sim.profiles.store``: 'interpolated:roofline-scaled from mbs 8 ...'). The
planner flags a plan that rests on such an extrapolation (``RankedPlan.extrapolated``, the
table's ``profiles`` column) and, with ``SearchOptions.profiled_only``, refuses it.
"""

from __future__ import annotations

EXTRAPOLATED = "interpolated:roofline-scaled"
"""Source prefix of an entry scaled from a measured one beyond the measured range."""


def extrapolated(sources) -> tuple[str, ...]:
    """The sources of an estimate that are extrapolations beyond the measured profiles."""
    return tuple(s for s in sources if s.startswith(EXTRAPOLATED))


def beyond_profiles(sim, job, gpu_type: str, mbs: int, tp: int) -> bool:
    """Whether (GPU type, microbatch size, TP) of ``job`` is extrapolated beyond the measured
    profiles (an analytic-only catalog measures nothing, so nothing is beyond it)."""
    from sailor_sim import get_gpu

    entry = sim.profiles.entry(
        job.model, get_gpu(gpu_type), job.dtype, mbs, tp, job.sequence_length
    )
    return entry.source.startswith(EXTRAPOLATED)
