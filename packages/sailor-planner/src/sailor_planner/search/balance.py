"""Microbatch balancing across heterogeneous pipelines.

A group of identical pipelines (one class on one zone pattern) takes ``fill + M * bottleneck``
seconds for M microbatches: the simulator's 1F1B model
(``sailor_sim.simulate.timing.pipeline_time``) is
affine in M (Narayanan et al. 2021, Sec. 2.2). Given ``pipelines[c]`` pipelines of microbatch
size ``mbs[c]`` per group, choose microbatches per pipeline so that the samples add up to the
global batch exactly and the slowest pipeline finishes as early as possible.

Method: start from the continuous optimum (every pipeline finishing at the same time T), round
down, add whole levels (one more microbatch on every pipeline of the group that would finish
first) until the batch is covered, then give back the surplus from the groups that finish last,
one pipeline at a time. Within a group pipelines differ by at most one microbatch. Exact up to
the integrality of the last level.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClassLoad:
    """Microbatches of the pipelines of one group: ``extra`` of them run ``base + 1``."""

    base: int
    extra: int

    def counts(self, num_pipelines: int) -> list[int]:
        return [self.base + 1] * self.extra + [self.base] * (num_pipelines - self.extra)

    @property
    def top(self) -> int:
        return self.base + 1 if self.extra else self.base


def balance(
    gbs: int,
    pipelines: list[int],
    mbs: list[int],
    bottleneck: list[float],
    fill: list[float],
) -> list[ClassLoad] | None:
    """Loads per group, or None when no split with >= 1 microbatch per pipeline hits ``gbs``."""
    k = len(pipelines)
    if sum(d * m for d, m in zip(pipelines, mbs, strict=True)) > gbs:
        return None  # every pipeline needs at least one microbatch
    if k == 1:
        return _single(gbs, pipelines[0], mbs[0])
    rate = sum(d * m / b for d, m, b in zip(pipelines, mbs, bottleneck, strict=True))
    spread = sum(d * m * f / b for d, m, b, f in zip(pipelines, mbs, bottleneck, fill, strict=True))
    t = (gbs + spread) / rate
    level = [max(1, int((t - f) / b)) for b, f in zip(bottleneck, fill, strict=True)]
    samples = sum(d * m * lv for d, m, lv in zip(pipelines, mbs, level, strict=True))
    while samples < gbs:  # add a level to the group that would finish it first
        c = min(range(k), key=lambda c: fill[c] + (level[c] + 1) * bottleneck[c])
        level[c] += 1
        samples += pipelines[c] * mbs[c]
    base = level[:]
    top_count = pipelines[:]  # pipelines of group c at its top level base[c]
    surplus = samples - gbs
    while surplus > 0:
        best = None
        for c in range(k):
            if mbs[c] <= surplus and base[c] > 1 and top_count[c] > 0:
                finish = fill[c] + base[c] * bottleneck[c]
                if best is None or finish > best[0]:
                    best = (finish, c)
        if best is None:
            return None
        c = best[1]
        r = min(top_count[c], surplus // mbs[c])
        top_count[c] -= r
        surplus -= r * mbs[c]
        if top_count[c] == 0:  # the whole group dropped a level
            base[c] -= 1
            top_count[c] = pipelines[c]
    out = []
    for c in range(k):
        if top_count[c] == pipelines[c]:
            out.append(ClassLoad(base[c], 0))
        else:
            out.append(ClassLoad(base[c] - 1, top_count[c]))
    return out


def _single(gbs: int, d: int, m: int) -> list[ClassLoad] | None:
    if gbs % m:
        return None
    micro = gbs // m
    return [ClassLoad(micro // d, micro % d)]
