"""Placement pairs pipeline k's zones across the blocks of a layout (``allocate._zip_runs``):
pipeline k takes the k-th slot of every block, whatever the blocks' run lengths."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sailor_planner.search.allocate import _zip_runs

ZONES = ("a", "b", "c", "d")


@st.composite
def blocks(draw):
    """1-4 blocks of run-length lists (pattern of 1-3 zones, count), all of the same total."""
    total = draw(st.integers(1, 40))
    out = []
    for _ in range(draw(st.integers(1, 4))):
        width = draw(st.integers(1, 3))
        cuts = sorted(draw(st.sets(st.integers(1, total - 1), max_size=6)) if total > 1 else [])
        sizes = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
        patterns = st.tuples(*[st.sampled_from(ZONES)] * width)
        out.append([(draw(patterns), n) for n in sizes])
    return out, total


def _expand(runs) -> list:
    return [pattern for pattern, n in runs for _ in range(n)]


@given(blocks())
@settings(max_examples=300, deadline=None)
def test_pipeline_k_takes_slot_k_of_every_block(case):
    per_block, _total = case
    runs = list(_zip_runs(per_block))
    want = [sum(p, ()) for p in zip(*(_expand(b) for b in per_block), strict=True)]
    assert _expand(runs) == want
    assert all(n > 0 for _p, n in runs)
    # a group ends exactly where some block's run ends (no finer, no coarser)
    ends = {sum(n for _p, n in b[: i + 1]) for b in per_block for i in range(len(b))}
    got = {sum(n for _p, n in runs[: i + 1]) for i in range(len(runs))}
    assert got == ends
