"""Layer splits and microbatch balancing against brute force."""

import itertools
import math

import numpy as np
import pytest

from sailor_planner.search.balance import balance
from sailor_planner.search.partition import (
    Suffixes,
    _dp_many,
    _enumerate,
    best_splits,
    best_splits_many,
    even_bounds,
    num_splits,
)


def _matrices(rng, n: int, p: int) -> list:
    layer = rng.uniform(0.5, 2.0, size=n)
    pre = np.concatenate([[0.0], np.cumsum(layer)])
    out = [None]
    for k in range(1, p + 1):
        mat = pre[None, 1:] - pre[:-1, None] + 0.1 * k
        mat[np.tril_indices(n, -1)] = math.inf
        out.append(mat)
    return out


def _brute_bottleneck(costs, n: int, p: int) -> float:
    best = math.inf
    for cuts in itertools.combinations(range(1, n), p - 1):
        starts, ends = (0, *cuts), (*[c - 1 for c in cuts], n - 1)
        best = min(
            best,
            max(costs[p - s][a, b] for s, (a, b) in enumerate(zip(starts, ends, strict=False))),
        )
    return best


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("p", [1, 2, 3, 5])
def test_dp_and_enumeration_reach_the_optimal_bottleneck(seed: int, p: int) -> None:
    rng = np.random.default_rng(seed)
    n = 9
    costs = _matrices(rng, n, p)
    best = _brute_bottleneck(costs, n, p)
    exact = _enumerate(costs, p, n)
    got = min(max(costs[p - s][a, b] for s, (a, b) in enumerate(bounds)) for bounds in exact)
    assert got == pytest.approx(best)
    dp = _dp_many([costs], p, n)[0]
    assert max(costs[p - s][a, b] for s, (a, b) in enumerate(dp)) == pytest.approx(best, rel=2e-3)
    for bounds in exact + [dp]:  # contiguous cover of every layer id
        assert bounds[0][0] == 0 and bounds[-1][1] == n - 1
        assert all(b[1] + 1 == c[0] for b, c in zip(bounds, bounds[1:], strict=False))


def test_infeasible_positions_give_no_split() -> None:
    costs = _matrices(np.random.default_rng(0), 6, 2)
    costs[1][:, :] = math.inf  # the last stage fits nowhere
    assert best_splits(costs, 2, exact_limit=100) == []
    assert best_splits(costs, 2, exact_limit=0) == []


def test_even_bounds_and_counts() -> None:
    assert even_bounds(26, 4) == ((0, 6), (7, 13), (14, 19), (20, 25))
    assert num_splits(26, 3) == 300


def _brute_balance(gbs, pipes, mbs, neck, fill):
    best = math.inf
    flat = [
        (c, m, b, f)
        for c, (d, m, b, f) in enumerate(zip(pipes, mbs, neck, fill, strict=False))
        for _ in range(d)
    ]
    ranges = [range(1, gbs // m + 1) for _, m, _, _ in flat]
    for counts in itertools.product(*ranges):
        if sum(k * m for k, (_, m, _, _) in zip(counts, flat, strict=False)) == gbs:
            best = min(best, max(f + k * b for k, (_, _, b, f) in zip(counts, flat, strict=False)))
    return best


@pytest.mark.parametrize(
    "gbs,pipes,mbs,neck,fill",
    [
        (16, [2, 1], [2, 1], [1.0, 0.7], [0.5, 0.1]),
        (12, [1, 2], [1, 2], [0.3, 1.1], [0.0, 0.4]),
        (10, [3], [1], [1.0], [0.2]),
        (24, [1, 1, 1], [4, 2, 1], [2.0, 1.0, 0.3], [1.0, 0.5, 0.1]),
    ],
)
def test_balance_hits_the_batch_and_the_best_makespan(gbs, pipes, mbs, neck, fill) -> None:
    loads = balance(gbs, pipes, mbs, neck, fill)
    assert loads is not None
    assert (
        sum(ld.base * d * m + ld.extra * m for ld, d, m in zip(loads, pipes, mbs, strict=False))
        == gbs
    )
    makespan = max(f + ld.top * b for ld, b, f in zip(loads, neck, fill, strict=False))
    assert makespan == pytest.approx(_brute_balance(gbs, pipes, mbs, neck, fill))


def test_balance_rejects_more_pipelines_than_samples() -> None:
    assert balance(4, [5], [1], [1.0], [0.0]) is None
    assert balance(6, [1], [4], [1.0], [0.0]) is None  # 6 samples are not whole microbatches of 4


def _reference_enumerate(costs, p: int, n: int) -> list:
    """The enumeration as first written: every split's row reduced on its own, and the
    (bottleneck, total) frontier walked over every split (``_enumerate`` must match it)."""
    from sailor_planner.search.partition import MAX_KEPT, _stage_bounds

    cuts = np.array(list(itertools.combinations(range(1, n), p - 1)), dtype=np.int64)
    starts = np.concatenate([np.zeros((len(cuts), 1), dtype=np.int64), cuts], axis=1)
    ends = np.concatenate([cuts - 1, np.full((len(cuts), 1), n - 1, dtype=np.int64)], axis=1)
    times = np.stack([costs[p - s][starts[:, s], ends[:, s]] for s in range(p)], axis=1)
    bottleneck, total = times.max(axis=1), times.sum(axis=1)
    idx = np.nonzero(np.isfinite(bottleneck))[0]
    kept, best_total = [], math.inf
    for i in idx[np.lexsort((total[idx], bottleneck[idx]))]:
        if total[i] < best_total - 1e-12:
            kept.append(i)
            best_total = total[i]
    if len(kept) > MAX_KEPT:
        pick = np.linspace(0, len(kept) - 1, MAX_KEPT).round().astype(int)
        kept = [kept[j] for j in sorted(set(pick))]
    return [_stage_bounds(tuple(int(c) for c in cuts[i]), n) for i in kept]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("p", [2, 3, 4])
def test_enumeration_matches_the_plain_frontier(seed: int, p: int) -> None:
    """The vectorised frontier (stage-by-stage reduction, ``_frontier_candidates``) returns
    exactly the splits of the plain one, with ties, near-ties and unfit ranges."""
    rng = np.random.default_rng(seed)
    n = 12
    costs = _matrices(rng, n, p)
    if seed % 2:  # equal layers: many splits share a bottleneck and a total
        costs = _matrices(np.random.default_rng(0), n, p)
        for k in range(1, p + 1):
            costs[k] = np.round(costs[k], 1)
    if seed % 3 == 0:
        costs[p][0, : n // 3] = math.inf  # a first stage too short to fit
    assert _enumerate(costs, p, n) == _reference_enumerate(costs, p, n)


@pytest.mark.parametrize("exact_limit", [0, 10**6])  # the DP; every split enumerated
@pytest.mark.parametrize("p", [1, 3, 5, 8, 12])
def test_several_cost_lists_give_each_ones_own_splits(p: int, exact_limit: int) -> None:
    """``best_splits_many`` (the configurations of one GPU type at one depth, or the mixed
    families of one depth, reduced together) returns for every cost list what it returns for
    that list alone, unfit ranges included."""
    n = 14
    lists = [_matrices(np.random.default_rng(seed), n, p) for seed in range(7)]
    lists[2][p][0, :2] = math.inf  # a first stage that cannot end before layer id 2
    lists[4][1][:, :] = math.inf  # no last stage fits: no split
    alone = [best_splits(costs, p, exact_limit=exact_limit) for costs in lists]
    assert best_splits_many(lists, p, exact_limit=exact_limit) == alone
    assert alone[4] == [] and all(alone[i] for i in (0, 1, 2, 3, 5, 6))


@pytest.mark.parametrize("seed", range(4))
def test_depths_sharing_their_dp_rows_get_the_splits_of_a_dp_of_their_own(seed: int) -> None:
    """One configuration's depths share the DP's rows (``Suffixes``: every stage but the first
    has a cost matrix that depends only on the stages after it): asked in any order, each
    depth gets the split a DP of its own finds, within TIE of the least bottleneck."""
    n = 10
    rng = np.random.default_rng(seed)
    depths = list(rng.permutation(np.arange(2, n + 1)))
    shared = [Suffixes(), Suffixes()]
    for p in depths:
        p = int(p)
        lists = [_matrices(np.random.default_rng(seed), n, p)]
        lists.append(_matrices(np.random.default_rng(seed + 10), n, p))
        lists[1][1][n - 3 :, :] = math.inf  # the last stage must start before layer id n - 3
        own = _dp_many(lists, p, n)
        assert _dp_many(lists, p, n, shared) == own
        assert all(len(r.max) >= p - 1 for r in shared)  # rows kept for deeper depths
        for costs, split in zip(lists, own, strict=True):
            least = _brute_bottleneck(costs, n, p)
            if split is None:  # no split fits (the second list's deepest depths)
                assert least == math.inf
                continue
            neck = max(costs[p - s][a, b] for s, (a, b) in enumerate(split))
            assert neck == pytest.approx(least, rel=2e-3)
        assert own[0] is not None
