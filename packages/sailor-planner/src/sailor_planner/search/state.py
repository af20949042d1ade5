"""State and helpers of the search: memo tables, the candidates found, and small pure helpers
(allocation ladder, region groups, cheapest prices)."""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass, field

from .allocate import Scored


@dataclass
class Memo:
    """Sub-results that do not depend on availability, keyed on everything that sets them."""

    tables: dict = field(default_factory=dict)
    splits: dict = field(default_factory=dict)
    suffixes: dict = field(default_factory=dict)
    """Per (GPU type, mbs, base TP degree, reference zone): the split DP's rows its depths
    share (``partition.Suffixes``)."""
    joint: dict = field(default_factory=dict)
    singles: dict = field(default_factory=dict)
    lbs: dict = field(default_factory=dict)
    """Per shape, per class: (B, F) lower bounds of a pipeline's 1F1B time."""
    may_fit: dict = field(default_factory=dict)
    """Per (single-type shape, most replicas): whether it may fit in a mixed plan."""


@dataclass
class Found:
    """Every scored candidate that respects the constraints, and the running best."""

    objective: str
    constraints: object
    keep: int = 1
    """How many of the best the branch and bound must keep exact (top_k plus a margin)."""
    admitted: list = field(default_factory=list)
    scored: list = field(default_factory=list)
    best: Scored | None = None
    top: list = field(default_factory=list)
    shape_best: dict = field(default_factory=dict)
    """Per shape, the first admitted candidate of the best key (what ``Search._refine``
    starts from)."""
    _shape_ranks: list | None = None

    def key(self, s: Scored) -> tuple:
        if self.objective == "cost":
            return (s.cost_per_iteration, -s.throughput)
        return (-s.throughput, s.cost_per_iteration)

    def add(self, s: Scored) -> bool:
        self.scored.append(s)
        if not self.constraints.admits(s.throughput, s.cost_per_iteration, s.cost_per_hour):
            return False
        self.admitted.append(s)
        if self.best is None or self.key(s) < self.key(self.best):
            self.best = s
        held = self.shape_best.get(s.shape)
        if held is None or self.key(s) < self.key(held):
            self.shape_best[s.shape] = s
            self._shape_ranks = None
        bisect.insort(self.top, (self.key(s), id(s), s))
        del self.top[self.keep :]
        return True

    def shape_threshold(self, n: int) -> Scored | None:
        """The best candidate of the n-th best shape (None: fewer shapes admitted yet)."""
        if self._shape_ranks is None:
            self._shape_ranks = sorted(self.shape_best.values(), key=self.key)
        return self._shape_ranks[n - 1] if len(self._shape_ranks) >= n else None

    @property
    def threshold(self) -> Scored | None:
        """The candidate a new one must beat to enter the kept best (None: not full yet)."""
        return self.top[-1][2] if len(self.top) >= self.keep else None


def ladder(top: int, lo: int) -> list[int]:
    """lo..top with two points per octave (1, 2, 3, 4, 6, 8, 12, 16, 24, ...) and top; the
    local search (``_refine``) then walks from the best points in steps of 1, 2 and 4."""
    out, v = set(), max(lo, 1)
    while v < top:
        out.add(v)
        step = max(1, 2 ** (max(v.bit_length() - 2, 0)))
        v += step
    out.add(top)
    if lo == 0:
        out.add(0)
    return sorted(out)


def region_groups(inventory, cross_region: bool) -> list[tuple[str, ...]]:
    """Zones grouped by region (or all together), each largest first; groups largest first."""
    from sailor_sim import get_zone

    cap: dict[str, int] = {}
    for p in inventory.pools:
        cap[p.zone] = cap.get(p.zone, 0) + p.count
    by_region: dict[str, list[str]] = {}
    for z in cap:
        by_region.setdefault("*" if cross_region else get_zone(z).region, []).append(z)
    groups = [tuple(sorted(zs, key=lambda z: (-cap[z], z))) for zs in by_region.values()]
    return sorted(groups, key=lambda grp: (-sum(cap[z] for z in grp), grp))


LINK_PROBE_BYTES = (1e5, 1e6, 1e7, 1e8, 1e9)
"""Message sizes at which zones' same-zone links are compared: curves of two zones may cross
(the Sailor fits: us-central1-b's A100 link is faster at 1 MB and 100 MB, -a's at 64 MB), so
no single size orders them."""


def _zone_link(sim, g: str, z: str) -> tuple[float, ...]:
    """Same-zone link of type ``g`` in zone ``z``: bytes/s at each probe size, and latency."""
    from sailor_sim import Endpoint

    curve = sim.network.link(Endpoint(z, g, 1), Endpoint(z, g, 1))
    return (*(round(curve.bandwidth(b), 3) for b in LINK_PROBE_BYTES), curve.latency_s)


def _zone_price(g: str, z: str) -> float:
    from sailor_sim import price_per_gpu_hour

    try:
        return price_per_gpu_hour(g, z)
    except Exception:  # an unpriced zone sorts last; the scorer reports the error itself
        return math.inf


def fastest_zone(sim, g: str, free: dict) -> str:
    """The zone holding type ``g`` with the fastest same-zone link at every probe size (the
    first by name among incomparable ones): where the stage tables of ``g`` are built."""
    zones = sorted(z for (t, z), n in free.items() if t == g and n > 0)
    links = {z: _zone_link(sim, g, z)[:-1] for z in zones}
    for z in zones:
        if all(all(a >= b for a, b in zip(links[z], links[y], strict=True)) for y in zones):
            return z
    return zones[0]


def zone_orders(groups, free: dict, sim, types) -> list[dict]:
    """Orders in which placement fills the zones of each region group, as maps from a default
    group (largest first, ``region_groups``) to the same zones reordered: the default, and per
    GPU type its own best zones first: more GPUs of the type, then cheaper, then a faster
    same-zone link (geometric mean over the probe sizes; ties keep the default order). Zones
    alike in all of these keep the default order, so an inventory of interchangeable zones
    scores one placement; at most 1 + types orders are scored (the Sailor fits give
    us-central1-b the faster A100 link and -a the faster V100 link, and equal-sized zones were
    ordered by name)."""
    out = [{grp: grp for grp in groups}]
    for g in types:
        quality = {z: _zone_quality(sim, g, z, free) for grp in groups for z in grp}
        order = {}
        for grp in groups:
            pos = {z: i for i, z in enumerate(grp)}
            order[grp] = tuple(sorted(grp, key=lambda z, pos=pos: (quality[z], pos[z])))
        if order not in out:
            out.append(order)
    return out


def _zone_quality(sim, g: str, z: str, free: dict) -> tuple:
    """Sort key of zone ``z`` for type ``g``: more GPUs, cheaper, faster link first."""
    link = _zone_link(sim, g, z)[:-1]
    mean = math.exp(sum(math.log(max(b, 1e-9)) for b in link) / len(link))
    return (-free.get((g, z), 0), _zone_price(g, z), -round(mean, 3))


def has_type(free: dict, g: str, group) -> bool:
    return any(free.get((g, z), 0) > 0 for z in group)


@functools.cache
def min_price(g: str) -> float:
    from sailor_sim import PRICE_CATALOG

    return min(v[0] for v in PRICE_CATALOG[g].values())


def layout_of(s: Scored):
    return s.layout


def counts_of(s: Scored) -> tuple[int, ...]:
    counts = [0] * len(s.shape.classes)
    for g in s.groups:
        counts[g.cls] += g.count
    return tuple(counts)
