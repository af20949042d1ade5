"""Layer splits: contiguous, uneven stage ranges over layer ids, chosen per pipeline shape.

Input: a stage-cost matrix per pipeline position, ``cost[k][a, b]`` = per-microbatch time of a
stage holding layer ids a..b when k stages (itself included) follow from it on, ``inf`` when the
stage cannot fit in memory there. Output: the best splits into P stages by
(bottleneck, total) — the steady state of 1F1B runs at the bottleneck stage and fill / drain cost
the total (Narayanan et al. 2021, Sec. 2.2).

- When the number of splits C(n-1, P-1) is at most ``exact_limit`` every split is scored and the
  non-dominated (bottleneck, total) splits are returned: *exact*.
- Otherwise a dynamic program over layer suffixes (g[k][a] = best split of layer ids a..n-1
  into k stages) returns the split minimising the bottleneck, ties broken by the total: exact
  for the bottleneck up to ``TIE``, a *heuristic* for the total (a near-tie within ``TIE`` is
  broken by the total). It runs from the last stage back because a stage's cost matrix
  depends on the stages from it to the end (k), not on the depth, for every stage but the
  first (``templates.stage_tables``): one configuration's depths share the rows g[k]
  (``Suffixes``), and a depth-p split costs one step more than depth p - 1's, not p steps.
"""

from __future__ import annotations

import math
from functools import lru_cache
from itertools import combinations

import numpy as np

from sailor_sim import even_split

TIE = 1e-3
"""Relative weight of the total in the DP's key (bottleneck + TIE * total / n, n layer ids:
a weight that does not depend on the depth, so depths share their rows; total / n is at most
the bottleneck, so the key's bottleneck is within TIE of the least)."""
MAX_KEPT = 4
"""Most non-dominated splits kept from an exact enumeration."""

Bounds = tuple[tuple[int, int], ...]


def num_splits(n: int, p: int) -> int:
    return math.comb(n - 1, p - 1) if 1 <= p <= n else 0


def best_splits(costs: list[np.ndarray], p: int, exact_limit: int) -> list[Bounds]:
    """Best splits of ``n`` layer ids into ``p`` stages; ``costs[k]`` for k = 1..p (index k)."""
    return best_splits_many([costs], p, exact_limit)[0]


def best_splits_many(
    costs_list: list[list[np.ndarray]],
    p: int,
    exact_limit: int,
    suffixes: list[Suffixes | None] | None = None,
) -> list[list[Bounds]]:
    """``best_splits`` of several cost lists of one depth (the configurations of one GPU type
    at depth p): the DP runs on all of them at once, the same splits at a fraction of the
    numpy calls. ``suffixes``: per list, the DP rows kept from other depths of the same
    configuration (``Suffixes``; None: none kept)."""
    if not costs_list:
        return []
    n = costs_list[0][1].shape[0]
    if not 1 <= p <= n:
        return [[] for _ in costs_list]
    if num_splits(n, p) <= exact_limit:
        return _enumerate_many(costs_list, p, n)
    return [[dp] if dp else [] for dp in _dp_many(costs_list, p, n, suffixes)]


def _stage_bounds(cuts: tuple[int, ...], n: int) -> Bounds:
    starts = (0, *cuts)
    ends = (*[c - 1 for c in cuts], n - 1)
    return tuple(zip(starts, ends, strict=True))


@lru_cache(maxsize=256)
def _all_splits(n: int, p: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """(cut points, per stage the flat index ``start * n + end`` of its range) of every split
    of n layer ids into p stages."""
    cuts = np.array(list(combinations(range(1, n), p - 1)), dtype=np.int64)
    starts = np.concatenate([np.zeros((len(cuts), 1), dtype=np.int64), cuts], axis=1)
    ends = np.concatenate([cuts - 1, np.full((len(cuts), 1), n - 1, dtype=np.int64)], axis=1)
    return cuts, tuple(starts[:, s] * n + ends[:, s] for s in range(p))


def _enumerate(costs: list[np.ndarray], p: int, n: int) -> list[Bounds]:
    return _enumerate_many([costs], p, n)[0]


def _enumerate_many(costs_list: list[list[np.ndarray]], p: int, n: int) -> list[list[Bounds]]:
    """Every split of each cost list scored, its non-dominated (bottleneck, total) splits
    kept (at most ``MAX_KEPT``); the lists' stage times are gathered and reduced together."""
    if p == 1:
        return [[((0, n - 1),)] if math.isfinite(c[1][0, n - 1]) else [] for c in costs_list]
    cuts, ranges = _all_splits(n, p)
    # one array per stage, reduced stage by stage: the same sums in the same order as a sum
    # over each split's row, at a fraction of the cost of a reduction along short rows
    times = [_stacked([c[p - s].ravel() for c in costs_list])[:, ranges[s]] for s in range(p)]
    bottleneck, total = times[0], times[0]
    for t in times[1:]:
        bottleneck = np.maximum(bottleneck, t)
        total = total + t
    # The first split kept has the least bottleneck (the least total among those); every later
    # one a total below it: only those few are sorted.
    least = bottleneck.min(axis=1)
    first_total = np.where(bottleneck == least[:, None], total, math.inf).min(axis=1)
    below = total < (first_total - 1e-12)[:, None]
    out = []
    for j, neck in enumerate(least.tolist()):
        if not math.isfinite(neck):
            out.append([])
            continue
        first = np.flatnonzero((bottleneck[j] == neck) & (total[j] == first_total[j]))[:1]
        idx = np.sort(np.concatenate([first, np.flatnonzero(below[j])]))
        out.append(_frontier(cuts, bottleneck[j], total[j], idx, n))
    return out


def _frontier(cuts: np.ndarray, bottleneck, total, idx: np.ndarray, n: int) -> list[Bounds]:
    """The non-dominated splits of one cost list (at most ``MAX_KEPT``, evenly spaced) among
    the splits ``idx`` (ascending; every one the frontier can hold)."""
    order = idx[np.lexsort((total[idx], bottleneck[idx]))]
    kept, best_total = [], math.inf
    for i in _frontier_candidates(order, total).tolist():
        if total[i] < best_total - 1e-12:  # non-dominated in (bottleneck, total)
            kept.append(i)
            best_total = total[i]
    if len(kept) > MAX_KEPT:  # the extremes and evenly spaced points between them
        pick = np.linspace(0, len(kept) - 1, MAX_KEPT).round().astype(int)
        kept = [kept[j] for j in sorted(set(pick))]
    return [_stage_bounds(tuple(int(c) for c in cuts[i]), n) for i in kept]


def _frontier_candidates(order: np.ndarray, total: np.ndarray) -> np.ndarray:
    """The entries of ``order`` whose total is below every earlier one's (plus a margin wider
    than the frontier loop's 1e-12): the loop keeps no other, since every entry before a kept
    one has a total >= the last kept total - 1e-12."""
    totals = total[order]
    earlier = np.minimum.accumulate(np.concatenate(([math.inf], totals[:-1])))
    return order[totals < earlier + 1e-9]


class Suffixes:
    """The DP's rows of one configuration, kept across pipeline depths: for k = 1, 2, ...
    stages and every first layer id a, the best split of layer ids a..n-1 into k stages (its
    bottleneck, its total, where its first stage ends). Valid for cost lists whose ``costs[k]``
    for k below the depth are the same at every depth (``templates.stage_tables``)."""

    def __init__(self) -> None:
        self.max: list[np.ndarray] = []
        """[k - 1][a]: the bottleneck of the best split of a..n-1 into k stages (inf: none)."""
        self.sum: list[np.ndarray] = []
        """[k - 1][a]: its total."""
        self.end: list[np.ndarray] = []
        """[k - 1][a]: the last layer id of its first stage."""


def _dp_many(
    costs_list: list[list[np.ndarray]],
    p: int,
    n: int,
    suffixes: list[Suffixes | None] | None = None,
) -> list[Bounds | None]:
    """Vectorised DP over K cost lists at once, from the last stage back: key = bottleneck +
    TIE * total / n. Every list's arithmetic is elementwise what one list's alone would be
    (the same splits bit for bit). The cost matrices are inf where a > b (no such range), so
    no mask is needed. ``suffixes`` (per list, or None) holds rows other depths computed and
    keeps the ones computed here."""
    if p == 1:
        return [((0, n - 1),) if math.isfinite(c[1][0, n - 1]) else None for c in costs_list]
    rows = [r if r is not None else Suffixes() for r in (suffixes or [None] * len(costs_list))]
    for k in range(1, p):  # rows for k stages, where a list has none yet (together)
        todo = [j for j, r in enumerate(rows) if len(r.max) < k]
        if todo:
            _extend([rows[j] for j in todo], [costs_list[j][k] for j in todo], k, n)
    first = _stacked([c[p][0, :] for c in costs_list])  # stage 0 holds 0..b
    after_max = _stacked([_after(r.max[p - 2]) for r in rows])
    after_sum = _stacked([_after(r.sum[p - 2]) for r in rows])
    key = np.maximum(first, after_max) + (TIE / n) * (first + after_sum)
    ends = key.argmin(axis=1)
    return [
        _walk(rows[j], p, int(b), n) if math.isfinite(key[j, b]) else None
        for j, b in enumerate(ends.tolist())
    ]


def _extend(rows: list[Suffixes], mats: list[np.ndarray], k: int, n: int) -> None:
    """Append row k to each of ``rows`` from its row k - 1 and the cost matrix of a stage with
    k stages from it to the end (``mats``, one per row)."""
    if k == 1:  # the last stage holds a..n-1
        last = np.full(n, n - 1, dtype=np.int64)
        for r, m in zip(rows, mats, strict=True):
            held = m[:, n - 1].copy()
            r.max.append(held)
            r.sum.append(held)
            r.end.append(last)
        return
    c = _stacked(mats)  # c[j, a, b]: a stage holding a..b
    after_max = _stacked([_after(r.max[k - 2]) for r in rows])  # [j, b]: the rest after b
    after_sum = _stacked([_after(r.sum[k - 2]) for r in rows])
    key = np.maximum(c, after_max[:, None, :])
    key += (TIE / n) * (c + after_sum[:, None, :])
    ends = key.argmin(axis=2)  # [j, a]
    picked = np.take_along_axis(c, ends[:, :, None], axis=2)[:, :, 0]
    best_max = np.maximum(picked, np.take_along_axis(after_max, ends, axis=1))
    best_sum = picked + np.take_along_axis(after_sum, ends, axis=1)
    for j, r in enumerate(rows):
        r.max.append(best_max[j])
        r.sum.append(best_sum[j])
        r.end.append(ends[j])


def _after(row: np.ndarray) -> np.ndarray:
    """[b] = ``row[b + 1]``: the rest of the layers after a stage ending at b (inf at the end)."""
    out = np.empty_like(row)
    out[:-1] = row[1:]
    out[-1] = math.inf
    return out


def _stacked(arrays: list[np.ndarray]) -> np.ndarray:
    """``np.stack``, without a copy for one array."""
    return arrays[0][None] if len(arrays) == 1 else np.stack(arrays)


def _walk(rows: Suffixes, p: int, first_end: int, n: int) -> Bounds:
    """The DP's split: the first stage ends at ``first_end``, each later one where its row
    says."""
    bounds, a = [(0, first_end)], first_end + 1
    for k in range(p - 1, 0, -1):
        b = int(rows.end[k - 1][a])
        bounds.append((a, b))
        a = b + 1
    return tuple(bounds)


def even_bounds(n: int, p: int) -> Bounds:
    """The even split (larger stages first, sailor-sim's ``even_split``), as a homogeneous
    planner would use."""
    out, first = [], 0
    for size in even_split(n, p):
        out.append((first, first + size - 1))
        first += size
    return tuple(out)
