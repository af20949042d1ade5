"""The simulator's memory of computed components, in one object.

Every number a ``Simulator`` reuses lives in a named table of one ``ComponentCache``. The
cache is stamped with what the numbers were computed from (the profile store and the network
model, each with its version, and the catalog revision: GPU types, zones, prices); ``refresh``
drops every table at once when any of them moved, so a live simulator follows ``set_price``,
``register_gpu``, a new profile entry or a new link exactly as a fresh one would.

Keys are plain tuples of small ints and strings: a job enters as ``Job.cache_id`` (equal jobs,
one id), a replica and a stage's replica list as the small ids this cache assigns them
(``replica_id``, ``stage_id``), so lookups hash a few ints, not tuples of tuples. The ids live
here, not in the plan's value types, and are dropped with the tables that use them.
"""

from __future__ import annotations

import itertools
from typing import Any

from .. import revision


class ComponentCache:
    """Named tables of memoized components, all invalidated together. Each table is a dict
    that lives as long as the cache (cleared in place), keyed as its comment says."""

    def __init__(self) -> None:
        self.stage_time: dict[tuple, Any] = {}
        """(``Job.timing_id``, StageSlice) -> StageTime."""
        self.layer_table: dict[tuple, Any] = {}
        """(job, GPU type, mbs, tp) -> the profile's LayerTable under the job's options."""
        self.range_memory: dict[tuple, tuple] = {}
        """(job, StageSlice) -> position-independent memory parts."""
        self.replica_info: dict[tuple, Any] = {}
        """(job, first, last, i, p, replicas in the stage (under ZeRO: their signature),
        replica id) -> ReplicaInfo."""
        self.replica_compute: dict[tuple, tuple] = {}
        """As ``replica_info`` but keyed by the replica without its zone -> (StageTime, peak
        bytes, capacity)."""
        self.replica_ok: set[tuple] = set()
        """(job, GPU type, tp) already checked to run the job."""
        self.p2p: dict[tuple, Any] = {}
        """job -> {compose.p2p_key(src, dst, sending stage replicas): P2P per microbatch}."""
        self.stage_sync: dict[tuple, Any] = {}
        """(job, unsharded parameters of the range, stage replica signature) -> DataParallelSync."""
        self.ring_kinds: dict[int, tuple] = {}
        """stage replica signature -> ``timing.ring_kinds`` of its replicas."""
        self.ring_edge: dict[tuple, tuple[float, float]] = {}
        """(all-reduce bytes, ring edge a, b, ranks, run length inside a zone or 0) ->
        (all-reduce seconds, egress $)."""
        self.ring_curve: dict[tuple, Any] = {}
        """ring edge (a, b) -> ``timing.edge_curve`` (curve, parallel rings, bus efficiency),
        or None where the edge all-reduces hierarchically (its size enters every lookup)."""
        self.ring_hierarchical: dict[tuple, float] = {}
        """(ring kind, replicas of its run, bytes) -> hierarchical all-reduce seconds."""
        self.shard_collective: dict[tuple, float] = {}
        """(job, bytes, params or grads, ring kinds, lead replica) -> one layer's ZeRO-3
        gather / reduce-scatter seconds (layers of equal size share it)."""
        self.layer_bytes: dict[tuple, list[float]] = {}
        """(job, params or grads) -> unsharded bytes of every layer id."""
        self.shard_layers: dict[tuple, list[float]] = {}
        """(job, ring kinds, lead replica, params or grads) -> ``shard_collective`` of every
        layer id."""
        self.shard_exposed: dict[tuple, float] = {}
        """(job, StageSlice, StageTime, ring kinds, lead replica) -> the
        stage's exposed ZeRO-3 traffic per microbatch (``_exposed_shard_comm``)."""
        self.largest_layer: dict[tuple, int] = {}
        """(job, first, last, tp) -> parameters of the largest layer of first..last at TP tp
        (what ZeRO-3 gathers at once)."""
        self.step_sync: dict[tuple, float] = {}
        """(endpoint kinds, ranks) -> seconds."""
        self.param_prefix: dict[int, list[int]] = {}
        """job -> prefix sums of unsharded parameters per layer id."""
        self.price: dict[tuple[str, str], float] = {}
        """(GPU type, zone) -> $/s of one GPU."""
        self.stage_summary: dict[tuple, Any] = {}
        """(job, stage with replicas, i, p) -> compose.StageSummary."""
        self.replica_ids: dict[tuple, int] = {}
        """A replica's fields (``Replica._key``), or all but its zone -> its id."""
        self.stage_ids: dict[tuple, int] = {}
        """A stage's replicas' fields (``Stage._rkeys``) -> its id (equal lists, one id)."""
        self._next_id = itertools.count()
        self._stamp: tuple = ()
        self.clears = 0
        """How many times the tables were dropped (tests read it)."""

    def _tables(self) -> list:
        return [v for k, v in vars(self).items() if not k.startswith("_") and k != "clears"]

    # ---- ids: equal values get one small int, so keys hash ints -------------------------------
    # (Each lookup inlined: ``summarize`` asks for every stage of every plan it composes.)
    def replica_id(self, replica) -> int:
        """The id of ``replica`` (equal replicas, one id)."""
        key = replica._key
        found = self.replica_ids.get(key)
        if found is None:  # setdefault with a shared counter: atomic under the GIL, ids unique
            found = self.replica_ids.setdefault(key, next(self._next_id))
        return found

    def compute_id(self, replica) -> int:
        """The id of what ``replica``'s time and memory depend on: all but its zone, which only
        prices it (replicas that differ only by zone share it)."""
        gpu_type, _zone, *rest = replica._key
        key = (gpu_type, *rest)
        found = self.replica_ids.get(key)
        if found is None:
            found = self.replica_ids.setdefault(key, next(self._next_id))
        return found

    def stage_id(self, stage) -> int:
        """The id of ``stage``'s replica list (equal lists, one id; not its layer range)."""
        key = stage._rkeys
        found = self.stage_ids.get(key)
        if found is None:
            found = self.stage_ids.setdefault(key, next(self._next_id))
        return found

    def refresh(self, profiles, network) -> bool:
        """Drop every table if the profiles, the network or a catalog changed since the last
        call; True when it dropped them."""
        stamp = (profiles, profiles.version, network, network.version, revision.current())
        if stamp == self._stamp:
            return False
        catalog_moved = not self._stamp or self._stamp[4] != stamp[4]
        self.clear()
        if catalog_moved:  # resolved profile tables and link curves read GPU specs too
            profiles.forget_resolved()
            network.forget_resolved()
        self._stamp = stamp
        return True

    def clear(self) -> None:
        for table in self._tables():
            table.clear()
        self.clears += 1

    def sizes(self) -> dict[str, int]:
        """Entries per table (for benches and debugging)."""
        return {k: len(v) for k, v in vars(self).items() if isinstance(v, dict | set)}
