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

Interleaved 1F1B needs every pipeline's microbatch count to be a multiple of its stage count p
(``sailor_sim.spec.interleave``): ``step`` = p balances in units of p microbatches (a group's
pipelines then differ by at most p), the same problem with p x the microbatch size and the
bottleneck.

ZeRO-2/3 and hybrid sharding run collectives every microbatch, so every pipeline needs the
same count (``sailor_sim``'s ``features.sharding``): ``uniform`` gives each the one count that
carries the batch, or None when the pipelines' samples per microbatch do not divide it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClassLoad:
    """Microbatches of the pipelines of one group: ``extra`` of them run ``base + step``."""

    base: int
    extra: int
    step: int = 1

    def counts(self, num_pipelines: int) -> list[int]:
        return [self.base + self.step] * self.extra + [self.base] * (num_pipelines - self.extra)

    def total(self, num_pipelines: int) -> int:
        """Microbatches of all ``num_pipelines`` pipelines of the group."""
        return self.base * num_pipelines + self.extra * self.step

    @property
    def top(self) -> int:
        return self.base + self.step if self.extra else self.base


def balance(
    gbs: int,
    pipelines: list[int],
    mbs: list[int],
    bottleneck: list[float],
    fill: list[float],
    step: int = 1,
) -> list[ClassLoad] | None:
    """Loads per group, or None when no split with >= 1 microbatch per pipeline hits ``gbs``;
    with ``step`` > 1 every count is a multiple of ``step`` (>= ``step``)."""
    if step > 1:
        loads = balance(
            gbs, pipelines, [m * step for m in mbs], [b * step for b in bottleneck], fill
        )
        if loads is None:
            return None
        return [ClassLoad(load.base * step, load.extra, step) for load in loads]
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


def uniform(
    gbs: int, pipelines: list[int], mbs: list[int], step: int = 1
) -> list[ClassLoad] | None:
    """One microbatch count M for every pipeline (a multiple of ``step``), sum d_j mbs_j M =
    ``gbs``; None where none exists."""
    per_level = sum(d * m for d, m in zip(pipelines, mbs, strict=True))
    if gbs % per_level or (gbs // per_level) % step:
        return None
    return [ClassLoad(gbs // per_level, 0)] * len(pipelines)


def _single(gbs: int, d: int, m: int) -> list[ClassLoad] | None:
    if gbs % m:
        return None
    micro = gbs // m
    return [ClassLoad(micro // d, micro % d)]
