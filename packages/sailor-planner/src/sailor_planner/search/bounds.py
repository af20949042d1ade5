"""Bounds of the branch and bound: upper bounds on iterations/s and lower bounds on $/iteration
and $/hour of an allocation, of a range of allocations, and of every allocation of a
(shape, layout) node, sound whatever the links: a ring or a p2p between two zones may beat
both zones' own (the Sailor fits' us-central1-a -> b does), so the bounds take the fastest
of either (``_fastest_ring``, the search's ``_fastest_p2p``); see ``bounds`` for the
derivation.
"""

from __future__ import annotations

import math

from sailor_sim import usd_per_second

from .templates import Shape


class Bounder:
    def __init__(self, job, scorer, options, free: dict, groups=None, poll=None) -> None:
        self.job = job
        self.poll = poll or (lambda: None)
        """The search's ``_poll``, called in the loops over zones: over hundreds of pools one
        bound's rings took 0.15 s, long enough to keep a cancelled search running."""
        self.groups = [tuple(sorted({z for _g, z in free}))] if groups is None else groups
        """Zone groups a stage's replicas may spread over (``state.region_groups``)."""
        self.scorer = scorer
        self.opt = options
        self.zones_of: dict[str, set[str]] = {}
        """Zones holding each GPU type: a bound's ring takes the fastest zone that holds all
        its types, or a ring across zones where that can be faster (``_fastest_ring``)."""
        for (g, z), n in free.items():
            if n > 0:
                self.zones_of.setdefault(g, set()).add(z)
        self.free = free
        self.gpu_usd: dict[str, float] = {}
        """$/s of one GPU of each type in its cheapest zone of the inventory: what the
        scorer bills (``usd_per_second``) at the least, where a plan can place it. The
        catalog's cheapest region anywhere, which the bounds took before, is far below it:
        us-central1's A100-40 costs 34 % more than AWS us-east-1's, its H100 61 %, and every
        cost bound fell that short (2026-11-27: the 512-GPU min-cost search took half the time)."""
        for (g, z), n in free.items():
            if n > 0:
                self.gpu_usd[g] = min(self.gpu_usd.get(g, math.inf), usd_per_second(g, z))
        self._sync: dict[tuple, float] = {}
        self._spanning_rings: dict[tuple, float] = {}
        """(ring bytes, stage-0 kinds, zones, ranks) -> ``_spanning_uncached``."""
        self._zone_floor: dict[tuple, float] = {}
        self._signatures: dict[tuple, int] = {}
        """(GPU types, zone) -> ``_signature_id``."""
        self._signature_ids: dict[tuple, int] = {}
        """``Simulator.zone_ring_signature`` -> its small int."""
        self._distinct: dict[tuple, list[str]] = {}
        """(GPU types, zones) -> ``_distinct_zones`` (without ``held``)."""
        """(ring bytes, stage-0 kinds, zones, ranks) -> ``_zone_edge_floor_uncached``."""

    def node_key(self, shape: Shape, lbs, max_d) -> float | None:
        """A bound over every allocation of a (shape, layout), or None if none can meet the
        constraints. Throughput: all pipelines at once, the cheapest all-reduce (two replicas).
        Cost: one pipeline per class, each sample at its class's cheapest rate."""
        # Pipelines take longest with fewest of them; the all-reduce grows with the replicas.
        # One class: a single pipeline needs no all-reduce, two or more at least a 2-ring.
        # Mixed shapes run one pipeline per class at least (a ring over the classes).
        if len(max_d) == 1:
            least = self.bounds(shape, lbs, [1], sync_replicas=1)
            full = least
            if max_d[0] >= 2:
                full = max(least, self.bounds(shape, lbs, max_d, sync_replicas=2))
        else:
            full = self.bounds(shape, lbs, max_d, sync_replicas=2)
            least = self.bounds(shape, lbs, [1] * len(max_d), sync_replicas=2)
        c = self.opt.constraints
        if c.min_throughput is not None and full[0] * (1 + 1e-9) < c.min_throughput:
            return None
        if c.max_cost_per_iteration is not None and least[1] > c.max_cost_per_iteration * (
            1 + 1e-9
        ):
            return None
        if c.max_cost_per_hour is not None and least[2] > c.max_cost_per_hour * (1 + 1e-9):
            return None
        if self.opt.objective == "cost":
            floor = self._cost_floor(shape, lbs, max_d)
            if len(max_d) == 1 and c.min_throughput is not None:
                fewest = self._fewest_meeting_floor(shape, lbs, max_d[0])
                if fewest is None:
                    return None
                floor = max(floor, self.bounds(shape, lbs, max_d, fewest=[fewest])[1])
            return floor
        return -full[0]

    def _fewest_meeting_floor(self, shape: Shape, lbs, most: int) -> int | None:
        """The fewest pipelines of a one-class node that may reach ``min_throughput`` (None
        if no count up to ``most`` may): one pipeline, with no all-reduce, if its bound meets
        it; else d >= 2 pipelines take T >= gbs B / (d mbs) + F + the cheapest ring of two
        (a ring only slows as replicas join), which meets the floor only from the d solved
        here on. Every allocation of the node that meets the floor lies between it and
        ``most``, so the node's cost is bounded over that range (``bounds``)."""
        floor = self.opt.constraints.min_throughput
        if self.meets(*self.bounds(shape, lbs, [1], sync_replicas=1)):
            return 1
        cls, (b, f, _o) = shape.classes[0], lbs[0]
        ring = (
            0.0
            if self.job.options.zero == "hybrid"
            else self._fastest_ring(shape, (((cls.gpu, cls.tps[0]), 2),))
        )
        room = (1 + 1e-9) / floor - f - ring  # seconds left for the steady state
        if room <= 0:
            return None
        d = max(2, math.ceil(self.job.sample_slots * b / (cls.mbs * room) * (1 - 1e-9)))
        return d if d <= most else None

    def _cost_floor(self, shape: Shape, lbs, max_d) -> float:
        """Lower bound on $/iteration of any allocation: every sample at the cheapest class's
        steady-state price, plus one fill (every GPU bills the whole iteration, at least each
        pipeline's M B + F). Interleaved 1F1B's F may be negative (``lower_bounds``): a
        pipeline then still takes >= (M - 1 + 1 / v) B >= M B (1 - (1 - 1 / v) / p), its
        microbatch count M being a multiple of p, so every sample costs at least that share
        of the steady-state price."""
        gbs = self.job.sample_slots
        per_sample = min(
            cls.gpus * self.gpu_usd[cls.gpu] * b / cls.mbs
            for cls, (b, _f, _o) in zip(shape.classes, lbs, strict=True)
        )
        usd_min = sum(cls.gpus * self.gpu_usd[cls.gpu] for cls in shape.classes)
        extra = min(f for _b, f, _o in lbs)
        if extra < 0:
            v = self.job.options.virtual_stages
            return per_sample * gbs * (1.0 - (1.0 - 1.0 / v) / shape.depth)
        return per_sample * gbs + usd_min * extra

    def bounds(
        self,
        shape: Shape,
        lbs,
        counts,
        sync_replicas: int | None = None,
        fewest=None,
        ring: float | None = None,
    ) -> tuple[float, float, float]:
        """(upper bound on iterations/s, lower bounds on $/iteration and $/hour).

        Pipeline j with M_j microbatches takes at least M_j B_j + F_j; the samples
        sum_j mbs_j M_j must reach the global batch, so the pipelines take at least
        T = (gbs + sum_j mbs_j F_j / B_j) / sum_j (mbs_j / B_j) (and at least B_j + F_j each);
        then stage 0 all-reduces (a ring in one zone) and steps its optimizer. The GPUs bill
        at their cheapest price; egress only adds. With ``fewest`` (same classes used, no class
        with more pipelines than in ``counts``) the bound holds for every allocation between the
        two: T only falls and the all-reduce and the bill only grow as pipelines are added.
        With ``ring`` (seconds stage 0's sync takes at least, on no assumption about links:
        ``spanning_ring``, ``Scorer.first_ring``) that is the sync instead.

        The $/iteration bound is also taken per term (``_cost_terms``): over a range of
        allocations the bill of ``fewest`` times the time of ``counts`` undercounts a sample's
        price by up to counts / fewest, where the samples' own price does not fall as
        pipelines are added.
        """
        gbs = self.job.sample_slots
        fewest = counts if fewest is None else fewest
        rate = spread = usd = usd_most = 0.0
        longest = opt = 0.0
        per_sample = fill = math.inf
        kinds = []
        for d, d0, cls, (b, f, o) in zip(counts, fewest, shape.classes, lbs, strict=True):
            if d:
                rate += d * cls.mbs / b
                spread += d * cls.mbs * f / b
                pipeline_usd = cls.gpus * self.gpu_usd[cls.gpu]
                usd += d0 * pipeline_usd
                usd_most += d * pipeline_usd
                per_sample = min(per_sample, pipeline_usd * b / cls.mbs)
                fill = min(fill, f)
                longest = max(longest, b + f)
                opt = max(opt, o)
                kinds.append(((cls.gpu, cls.tps[0]), d0))
        if rate <= 0:
            return 0.0, math.inf, math.inf
        if sync_replicas is not None:  # the cheapest ring over any number of replicas
            kinds = (
                [(kinds[0][0], sync_replicas)] if len(kinds) == 1 else [(k, 1) for k, _ in kinds]
            )
        if ring is not None:
            sync = ring
        else:
            sync = self._fastest_ring(shape, tuple(sorted(kinds)))
            if self.job.options.zero == "hybrid":  # its volume falls as replicas are added
                sync = 0.0
        if self.job.options.shards_optimizer:  # a shard over at most every replica
            opt /= max(1, sum(counts))
        t = max((gbs + spread) / rate, longest) + sync + opt
        terms = _cost_terms(gbs, per_sample, fill, sync + opt, usd, usd_most)
        return 1.0 / t, max(usd * t, terms), usd * 3600.0

    def _fastest_ring(self, shape: Shape, kinds: tuple) -> float:
        """A lower bound on the seconds of stage 0's data-parallel sync (``Simulator.ring_sync``:
        the all-reduce, or ZeRO's volumes; ZeRO-3's is per microbatch, inside the stage times,
        so 0 here) over ``kinds`` ((GPU, TP), replicas): in the zone where it is fastest, or
        across zones where a ring through two or more can be faster."""
        if len(kinds) == 1 and kinds[0][1] < 2:
            return 0.0  # one replica: no ring (``Simulator.ring_time``), whatever the options
        kinds = tuple((k, _two_bits(n)) for k, n in kinds)
        key = (shape.bounds[0], kinds)
        hit = self._sync.get(key)
        if hit is None:
            types = [g for (g, _tp), _n in kinds]
            zones = set.intersection(*(self.zones_of.get(g, set()) for g in types))
            zones = zones or set.union(*(self.zones_of.get(g, set()) for g in types))
            one_zone = math.inf
            for z in self._distinct_zones(tuple(sorted(set(types))), zones):
                self.poll()
                ring = tuple(sorted(((z, *k), n) for k, n in kinds))
                one_zone = min(one_zone, self.scorer.sync(shape, 0, ring, 1, kinds[0][0]).seconds)
            hit = self._sync[key] = min(one_zone, self._any_spanning_ring(shape, kinds))
        return hit

    def _distinct_zones(self, types: tuple[str, ...], zones, held=None) -> list[str]:
        """One zone of ``zones`` (sorted) per ring signature over ``types``
        (``Simulator.zone_ring_signature``) and, with ``held`` (zone -> what it holds), per
        what it holds: the rest time every ring inside them alike, so a bound over zones
        needs only these (an inventory in 8 zones of default links has one)."""
        if held is None:
            hit = self._distinct.get((types, frozenset(zones)))
            if hit is not None:
                return hit
        out, seen = [], set()
        for z in sorted(zones):
            key = (self._signature_id(types, z), None if held is None else held(z))
            if key not in seen:
                seen.add(key)
                out.append(z)
        if held is None:
            self._distinct[(types, frozenset(zones))] = out
        return out

    def _signature_id(self, types: tuple[str, ...], zone: str) -> int:
        """A small int per distinct ``Simulator.zone_ring_signature`` (a tuple of link
        curves, slow to hash), the same for zones whose rings time alike."""
        hit = self._signatures.get((types, zone))
        if hit is None:
            sig = self.scorer.sim.zone_ring_signature(zone, types)
            hit = self._signatures[(types, zone)] = self._signature_ids.setdefault(
                sig, len(self._signature_ids)
            )
        return hit

    def _any_spanning_ring(self, shape: Shape, kinds: tuple) -> float:
        """A lower bound on stage 0's sync over ``kinds`` where its replicas sit in two zones
        or more of one region group (``_spanning_uncached`` over the group's zones holding
        the types), inf where no two zones hold them: a ring across zones can beat every
        zone's own (two replicas in us-central1-a and -b of the Sailor fits only use a -> b
        and b -> a), so the one-zone ring alone is no lower bound. With more replicas than
        the group has such zones, one zone holds two, side by side in the ring (its runs are
        sorted by zone first, ``timing.ring_kinds``), so the ring also takes at least the
        fastest edge inside a zone (``_zone_edge_floor``)."""
        first, last = shape.bounds[0]
        nbytes = self.scorer.sim.ring_sync_bytes(self.job, first, last)
        if nbytes is None:
            return math.inf  # ZeRO-3, hybrid: not one ring's seconds (the one-zone value)
        ranks = sum(n for _k, n in kinds)
        if ranks < 2:
            return math.inf
        stage0 = tuple(sorted({k for k, _n in kinds}))
        held = set.union(*(self.zones_of.get(g, set()) for g, _tp in stage0))
        best = math.inf
        for group in self.groups:  # a stage's replicas stay in one group of its layout
            zones = tuple(sorted(held.intersection(group)))
            if len(zones) < 2:
                continue
            # Over 2 ranks: a ring all-reduce only slows as ranks join (2 (n - 1) / n of the
            # bytes per rank, n - 1 latency steps), so one bound serves every ring size.
            hit = self._spanning(nbytes, stage0, zones, 2)
            if hit <= 0:
                continue
            if ranks > len(zones):
                hit = max(hit, self._zone_edge_floor(nbytes, stage0, zones, ranks))
            best = min(best, hit)
        return best

    def _zone_edge_floor(self, nbytes, stage0, zones, ranks: int) -> float:
        """The fastest ring edge inside any of ``zones`` between stage-0 kinds it holds, over
        ``ranks`` replicas (``Simulator.zone_edge_seconds``); 0 where one is hierarchical (its
        seconds depend on the run: no floor taken)."""
        key = (nbytes, stage0, zones, ranks)
        hit = self._zone_floor.get(key)
        if hit is None:
            hit = self._zone_floor[key] = self._zone_edge_floor_uncached(
                nbytes, stage0, zones, ranks
            )
        return hit

    def _zone_edge_floor_uncached(self, nbytes, stage0, zones, ranks: int) -> float:
        seconds = self.scorer.sim.zone_edge_seconds
        fastest = math.inf
        types = tuple(sorted({g for g, _tp in stage0}))

        def kinds_in(z: str) -> tuple:
            return tuple((g, tp) for g, tp in stage0 if self.free.get((g, z), 0))

        for z in self._distinct_zones(types, zones, kinds_in):
            held = [(z, g, tp) for g, tp in kinds_in(z)]
            for a in held:
                for b in held:
                    self.poll()
                    t = seconds(a, b, ranks, nbytes)
                    if t is None:
                        return 0.0
                    fastest = min(fastest, t)
        return 0.0 if fastest == math.inf else fastest

    def spanning_ring(self, shape: Shape, counts, zones: tuple[str, ...]) -> float:
        """A lower bound on the seconds of stage 0's sync when ``counts`` pipelines per class
        cannot put their stage-0 replicas in one zone of ``zones`` (else 0).

        Why it is sound: some GPU type then needs more GPUs at stage 0 than any of these zones
        holds, so the ring visits two zones or more, entering each of them and leaving each
        of them over an edge between zones, and it takes as long as its slowest edge
        (``Simulator.ring_time``), every edge over all of its replicas. So it takes at least
        the second least of the zones' fastest inbound edges, and of their fastest outbound
        ones (``Simulator.ring_edge_seconds``, over the zones of ``zones`` and the shape's stage-0
        kinds). The same-zone bound (``_fastest_ring``) puts every replica in one zone; the
        Sailor fits make every edge into us-central1-a fast but the others 8x slower."""
        first, last = shape.bounds[0]
        nbytes = self.scorer.sim.ring_sync_bytes(self.job, first, last)
        if nbytes is None:
            return 0.0  # ZeRO-3, hybrid: the sync is not one ring's seconds
        need: dict[str, int] = {}
        for d, cls in zip(counts, shape.classes, strict=True):
            need[cls.gpu] = need.get(cls.gpu, 0) + d * cls.tps[0]
        if all(n <= max(self.free.get((g, z), 0) for z in zones) for g, n in need.items()):
            return 0.0
        used = zip(counts, shape.classes, strict=True)
        stage0 = tuple(sorted({(cls.gpu, cls.tps[0]) for d, cls in used if d}))
        return self._spanning(nbytes, stage0, zones, sum(counts))

    def _spanning(self, nbytes, stage0, zones, ranks: int) -> float:
        """``_spanning_uncached``, cached by the ring's bytes: equal ranges' rings share it."""
        key = (nbytes, stage0, zones, ranks)
        hit = self._spanning_rings.get(key)
        if hit is None:
            hit = self._spanning_rings[key] = self._spanning_uncached(nbytes, stage0, zones, ranks)
        return hit

    def _spanning_uncached(self, nbytes, stage0, zones, ranks: int) -> float:
        seconds = self.scorer.sim.ring_edge_seconds
        kinds = [(z, g, tp) for z in zones for g, tp in stage0 if self.free.get((g, z), 0)]
        inbound: dict[str, float] = {}
        outbound: dict[str, float] = {}
        for a in kinds:
            for b in kinds:
                self.poll()
                if a[0] != b[0]:
                    t = seconds(a, b, ranks, nbytes)
                    inbound[b[0]] = min(inbound.get(b[0], math.inf), t)
                    outbound[a[0]] = min(outbound.get(a[0], math.inf), t)
        if len(inbound) < 2:  # no two zones hold the types: no placement fits, 0 bounds it
            return 0.0
        return max(sorted(inbound.values())[1], sorted(outbound.values())[1])

    def meets(self, thr: float, cost: float, hourly: float) -> bool:
        c = self.opt.constraints
        tol = 1 + 1e-9
        if c.min_throughput is not None and thr * tol < c.min_throughput:
            return False
        if c.max_cost_per_iteration is not None and cost > c.max_cost_per_iteration * tol:
            return False
        if c.max_cost_per_hour is not None and hourly > c.max_cost_per_hour * tol:
            return False
        return True


def _cost_terms(gbs, per_sample, fill, tail, usd, usd_most) -> float:
    """A lower bound on $/iteration of every allocation between ``fewest`` and ``counts``
    (``Bounder.bounds``), term by term: its bill times T >= (gbs + spread) / rate + tail, and
    bill x gbs / rate >= gbs x the cheapest class's $ per sample (a ratio of sums is at least
    its least ratio); bill x spread / rate >= bill x the least fill F (spread / rate is an
    average of the classes' F, weighted by d mbs / B); the bill is at least ``usd`` (fewest
    pipelines) and at most ``usd_most``, which bounds a negative F (interleaving) from below;
    bill x tail (stage 0's sync and optimizer step) >= usd x tail."""
    bill_for_fill = usd if fill >= 0 else usd_most
    return gbs * per_sample + bill_for_fill * fill + usd * tail


def _two_bits(n: int) -> int:
    """``n`` rounded down to its two leading bits (1, 2, 3, 4, 6, 8, 12, 16, 24, ...): the
    replica counts a ring bound is computed for. A ring only slows as replicas join, so the
    bound holds, and a search asks ~12 counts per kind instead of every count up to the
    inventory's (1,066 rings, ~18 % of the 512-GPU search under py-spy, were counts 2..128);
    the ring of the rounded count is at most 1/3 short of its own (2 (n - 1) / n of the
    bytes)."""
    if n < 4:
        return n
    shift = n.bit_length() - 2
    return (n >> shift) << shift
