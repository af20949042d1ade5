"""Spot preemptions: the expected cost of training with them, and the checkpoint interval that
minimises it.

A preemption of GPUs the plan uses stops the run: the work since the last checkpoint is lost and
the run pays a restart (``ReconfigModel.downtime_s`` with detection). With checkpoints every
``tau`` seconds of training, each stalling it for ``delta`` seconds, and preemptions arriving at
random with a mean ``M`` seconds between them, the share of wall time that trains nothing is, to
first order (J. W. Young, "A first order approximation to the optimum checkpoint interval",
Communications of the ACM 17(9), 1974):

    waste(tau) = delta / tau + (tau / 2 + R) / M

(each checkpoint costs delta; each preemption loses tau / 2 of work on average and R of
restart), minimised by Young's ``tau = sqrt(2 delta M)``. J. T. Daly ("A higher order estimate
of the optimum checkpoint interval for restart dumps", Future Generation Computer Systems 22(3),
2006, eq. 37) refines it to

    tau = sqrt(2 delta M) [1 + sqrt(delta / (2 M)) / 3 + delta / (18 M)] - delta   (delta < 2 M)

and ``tau = M`` otherwise. The expected $ per sample is then the plan's $/s divided by its
samples/s times (1 - waste). ``bench/replay_checkpoint.py`` checks both against the replay.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..errors import RequestError


def young_interval(save_s: float, mtbf_s: float) -> float:
    """Young (1974): the checkpoint interval minimising the first-order waste."""
    _check(save_s, mtbf_s)
    return math.sqrt(2 * save_s * mtbf_s)


def daly_interval(save_s: float, mtbf_s: float) -> float:
    """Daly (2006, eq. 37): the higher-order optimum interval."""
    _check(save_s, mtbf_s)
    if save_s >= 2 * mtbf_s:
        return mtbf_s
    x = save_s / (2 * mtbf_s)
    return math.sqrt(2 * save_s * mtbf_s) * (1 + math.sqrt(x) / 3 + x / 9) - save_s


def waste_fraction(interval_s: float, save_s: float, mtbf_s: float, restart_s: float) -> float:
    """Share of wall time that trains nothing (first order; capped at 1)."""
    _check(save_s, mtbf_s)
    if not interval_s > 0:
        raise RequestError(f"must be > 0, got {interval_s}", field="checkpoint_interval_s")
    return min(1.0, save_s / interval_s + (interval_s / 2 + restart_s) / mtbf_s)


def _check(save_s: float, mtbf_s: float) -> None:
    if not (math.isfinite(save_s) and save_s > 0):
        raise RequestError(f"must be > 0, got {save_s}", field="checkpoint save seconds")
    if not (math.isfinite(mtbf_s) and mtbf_s > 0):
        raise RequestError(f"must be > 0, got {mtbf_s}", field="mean time between preemptions")


@dataclass(frozen=True)
class SpotAdvice:
    """Expected cost of a plan under preemptions, at the chosen and at the optimum interval."""

    preemptions: int
    mtbf_s: float
    save_s: float
    restart_s: float
    interval_s: float
    young_interval_s: float
    daly_interval_s: float
    waste: float
    waste_at_daly: float
    usd_per_million_tokens: float
    usd_per_million_tokens_at_daly: float

    def to_dict(self) -> dict:
        return asdict(self)


def advise(
    *,
    preemptions: int,
    duration_s: float,
    save_s: float,
    restart_s: float,
    interval_s: float,
    samples_per_s: float,
    usd_per_hour: float,
    sequence_length: int,
) -> SpotAdvice | None:
    """Expected $/1M tokens with lost work, at ``interval_s`` and at Daly's interval
    (None when the trace has no preemption)."""
    if preemptions <= 0 or samples_per_s <= 0:
        return None
    mtbf = duration_s / preemptions
    daly = daly_interval(save_s, mtbf)

    def usd_per_m(waste: float) -> float:
        tokens_per_s = samples_per_s * (1 - waste) * sequence_length
        return math.inf if tokens_per_s <= 0 else usd_per_hour / 3600 / tokens_per_s * 1e6

    waste = waste_fraction(interval_s, save_s, mtbf, restart_s)
    waste_daly = waste_fraction(daly, save_s, mtbf, restart_s)
    return SpotAdvice(
        preemptions, mtbf, save_s, restart_s, interval_s, young_interval(save_s, mtbf), daly,
        waste, waste_daly, usd_per_m(waste), usd_per_m(waste_daly),
    )  # fmt: skip
