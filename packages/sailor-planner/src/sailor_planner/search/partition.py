"""Layer splits: contiguous, uneven stage ranges over layer ids, chosen per pipeline shape.

Input: a stage-cost matrix per pipeline position, ``cost[k][a, b]`` = per-microbatch time of a
stage holding layer ids a..b when k stages (itself included) follow from it on, ``inf`` when the
stage cannot fit in memory there. Output: the best splits into P stages by
(bottleneck, total) — the steady state of 1F1B runs at the bottleneck stage and fill / drain cost
the total (Narayanan et al. 2021, Sec. 2.2).

- When the number of splits C(n-1, P-1) is at most ``exact_limit`` every split is scored and the
  non-dominated (bottleneck, total) splits are returned: *exact*.
- Otherwise a dynamic program over layer prefixes (f[s][b] = best split of layer ids 0..b into
  s+1 stages) returns the split minimising the bottleneck, ties broken by the total: exact for
  the bottleneck, a *heuristic* for the total (a near-tie within ``TIE`` is broken by the total).
"""

from __future__ import annotations

import math
from functools import lru_cache
from itertools import combinations

import numpy as np

from sailor_sim import even_split

TIE = 1e-3
"""Relative weight of the total in the DP's key (bottleneck + TIE * total / P)."""
MAX_KEPT = 4
"""Most non-dominated splits kept from an exact enumeration."""

Bounds = tuple[tuple[int, int], ...]


def num_splits(n: int, p: int) -> int:
    return math.comb(n - 1, p - 1) if 1 <= p <= n else 0


def best_splits(costs: list[np.ndarray], p: int, exact_limit: int) -> list[Bounds]:
    """Best splits of ``n`` layer ids into ``p`` stages; ``costs[k]`` for k = 1..p (index k)."""
    return best_splits_many([costs], p, exact_limit)[0]


def best_splits_many(
    costs_list: list[list[np.ndarray]], p: int, exact_limit: int
) -> list[list[Bounds]]:
    """``best_splits`` of several cost lists of one depth (the configurations of one GPU type
    at depth p): the DP runs on all of them at once, the same splits at a fraction of the
    numpy calls."""
    if not costs_list:
        return []
    n = costs_list[0][1].shape[0]
    if not 1 <= p <= n:
        return [[] for _ in costs_list]
    if num_splits(n, p) <= exact_limit:
        return _enumerate_many(costs_list, p, n)
    return [[dp] if dp else [] for dp in _dp_many(costs_list, p, n)]


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
    return [_frontier(cuts, bottleneck[j], total[j], n) for j in range(len(costs_list))]


def _frontier(cuts: np.ndarray, bottleneck: np.ndarray, total: np.ndarray, n: int) -> list[Bounds]:
    """The non-dominated splits of one cost list (at most ``MAX_KEPT``, evenly spaced)."""
    ok = np.isfinite(bottleneck)
    if not ok.any():
        return []
    idx = np.nonzero(ok)[0]
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


def _dp_many(costs_list: list[list[np.ndarray]], p: int, n: int) -> list[Bounds | None]:
    """Vectorised DP over K cost lists at once: key = bottleneck + TIE * total / p, exact on
    the bottleneck. Every list's arithmetic is elementwise what one list's alone would be
    (the same splits bit for bit). The cost matrices are inf where a > b (no such range), so
    no mask is needed."""
    k = len(costs_list)
    first = _stacked([costs[p][0, :] for costs in costs_list])  # stage 0 holds 0..b
    f_max, f_sum = first, first
    choice = np.zeros((p, k, n), dtype=np.int64)
    rows, cols = np.arange(k)[:, None], np.arange(n)[None, :]
    prev_max = np.empty((k, n))
    prev_sum = np.empty((k, n))
    prev_max[:, 0] = prev_sum[:, 0] = math.inf
    key = np.empty((k, n, n))
    tie = np.empty((k, n, n))
    for s in range(1, p):
        c = _stacked([costs[p - s] for costs in costs_list])  # c[j, a, b]
        # stage s starts at a: the prefix 0..a-1 (none for a = 0)
        prev_max[:, 1:] = f_max[:, :-1]
        prev_sum[:, 1:] = f_sum[:, :-1]
        np.add(prev_sum[:, :, None], c, out=tie)
        np.multiply(TIE, tie, out=tie)
        np.divide(tie, p, out=tie)
        np.maximum(prev_max[:, :, None], c, out=key)
        np.add(key, tie, out=key)
        best_a = key.argmin(axis=1)
        picked = c[rows, best_a, cols]
        f_max = np.maximum(prev_max[rows, best_a], picked)
        f_sum = prev_sum[rows, best_a] + picked
        choice[s] = best_a
    return [
        _walk_back(choice[:, j], p, n) if math.isfinite(f_max[j, n - 1]) else None for j in range(k)
    ]


def _stacked(arrays: list[np.ndarray]) -> np.ndarray:
    """``np.stack``, without a copy for one array."""
    return arrays[0][None] if len(arrays) == 1 else np.stack(arrays)


def _walk_back(choice: np.ndarray, p: int, n: int) -> Bounds:
    """The DP's split: from the last stage back, each stage's chosen start."""
    bounds, b = [], n - 1
    for s in range(p - 1, 0, -1):
        a = int(choice[s][b])
        bounds.append((a, b))
        b = a - 1
    bounds.append((0, b))
    return tuple(reversed(bounds))


def even_bounds(n: int, p: int) -> Bounds:
    """The even split (larger stages first, sailor-sim's ``even_split``), as a homogeneous
    planner would use."""
    out, first = [], 0
    for size in even_split(n, p):
        out.append((first, first + size - 1))
        first += size
    return tuple(out)
