"""The simulator: iteration time, memory and cost of a (Job, Plan), from public components.

``Simulator.estimate(job, plan)`` is composed of exactly these public components, which the
planner's dynamic program calls on partial plans so its numbers agree with ``estimate``:

- ``stage_time(job, first, last, gpu_type, tp, mbs) -> StageTime``: per-microbatch forward,
  backward and TP-communication seconds of a layer range on one replica, and its optimizer step.
  O(1) after the first call per (model, GPU, dtype, mbs, TP): prefix sums over the profile.
- ``replica_memory(job, first, last, gpu_type, tp, mbs, stage_index, num_stages,
  num_microbatches, dp=1) -> dict[str, int]``: named peak-memory terms of one GPU.
- ``p2p_time(job, boundary_layer, src, dst) -> float``: one microbatch's activation (or its
  gradient) from replica ``src`` to ``dst`` across stage boundary after ``boundary_layer``.
- ``dp_sync_time(job, first, last, replicas) -> float``: data-parallel gradient all-reduce of a
  stage over its replicas (``timing.ring_allreduce_time``).
- ``timing.pipeline_time(...)``: 1F1B fill, steady state and drain of one pipeline.
- ``step_sync_time(endpoints, ranks) -> float`` (``plan_step_sync_time(plan)``): the per-step
  whole-world all-reduce of loss and gradient norm (latency-bound), breakdown term ``step_sync``.

Iteration time = the slowest pipeline's 1F1B time (each pipeline j uses its own replicas, so a
slow replica slows only its pipeline unless microbatches are balanced against it), plus the
exposed tail: max over stages of (all-reduce + optimizer step - the time that stage idles while
earlier stages drain), plus the step sync. Costs: GPU-hours by type and zone, and egress by
link relationship.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from . import timing
from .compose import estimate_plan
from .estimate import Estimate
from .gpus import get_gpu
from .job import Job
from .memory import (
    GRAD_BYTES,
    framework_overhead,
    in_flight,
    memory_terms,
    peak_bytes,
    position_terms,
    static_bytes,
    transient_bytes,
)
from .network import Endpoint, NetworkModel
from .plan import Plan, Replica
from .profile_files import load_profile_dir
from .profiles import LINKS_FILE, ProfileStore


class StageTime(NamedTuple):
    """Per-microbatch seconds of one replica's layer range, and its optimizer step."""

    forward_s: float
    backward_s: float
    tp_comm_s: float
    """TP all-reduces (forward + backward) not already inside the profile."""
    optimizer_s: float
    source: str

    @property
    def per_microbatch_s(self) -> float:
        return self.forward_s + self.backward_s + self.tp_comm_s


class Simulator:
    """Predicts iteration time, memory and cost of plans from a profile store and a network
    model (defaults: the built-in catalogs, i.e. analytic profiles and default links).
    Component results are cached; the caches follow changes to ``profiles`` / ``network``."""

    def __init__(self, profiles: ProfileStore | None = None, network: NetworkModel | None = None):
        self.profiles = profiles if profiles is not None else ProfileStore()
        self.network = network if network is not None else NetworkModel()
        self._stage_cache: dict[tuple, StageTime] = {}
        self._mem_cache: dict[tuple, tuple[int, dict[str, int]]] = {}
        self._range_cache: dict[tuple, tuple] = {}
        self._p2p_cache: dict[tuple, float] = {}
        self._p2p_pairs: dict[tuple, tuple[dict, dict]] = {}
        """Per job: p2p seconds and egress $ per (src id << 32 | dst id) replica pair."""
        self._dp_cache: dict[tuple, float] = {}
        self._replica_cache: dict[tuple, dict] = {}
        self._valid: set[tuple] = set()
        self._ring_cache: dict[tuple, tuple] = {}
        self._edge_cache: dict[tuple, tuple[float, float]] = {}
        """Per (gradient bytes, ring edge, ranks): (all-reduce seconds, egress $)."""
        self._param_prefix: dict[str, list[int]] = {}
        self._stage_summaries: dict[tuple, dict] = {}
        self._prices: dict[tuple[str, str], float] = {}
        self._dp_egress_cache: dict[tuple, float] = {}
        self._step_sync_cache: dict[tuple, float] = {}
        self._endpoint_sets: dict[frozenset, frozenset] = {}
        self._versions = (self.profiles.version, self.network.version)

    def clear_caches(self) -> None:
        """Forget every cached component (done automatically when profiles or links change)."""
        for name, value in vars(self).items():
            if name.startswith("_") and isinstance(value, dict | set):
                value.clear()
        self._versions = (self.profiles.version, self.network.version)

    def _fresh(self) -> None:
        if self._versions != (self.profiles.version, self.network.version):
            self.clear_caches()

    @classmethod
    def from_sailor_root(cls, root: str | Path, denoise: bool = True) -> Simulator:
        """Profiles and network fits from a folder laid out like the original Sailor repo;
        the imported profiles are denoised across microbatch sizes (``profile_denoise``)
        unless ``denoise=False``."""
        from .original import load_sailor_network, load_sailor_profiles
        from .profile_denoise import denoise_store

        store = load_sailor_profiles(root)
        return cls(denoise_store(store) if denoise else store, load_sailor_network(root))

    @classmethod
    def from_profile_dir(cls, path: str | Path) -> Simulator:
        """Profiles (``*.json``) and, when present, ``links.json`` from a sailor profile folder;
        entries the folder lacks are resolved as usual (interpolated, else analytic)."""
        from .network import load_network_file

        store = load_profile_dir(path)
        links = Path(path) / LINKS_FILE
        return cls(store, load_network_file(links) if links.exists() else NetworkModel())

    # ---- components ------------------------------------------------------------------------
    def stage_time(
        self, job: Job, first: int, last: int, gpu_type: str, tp: int, mbs: int
    ) -> StageTime:
        """Per-microbatch seconds of layers first..last on one replica (TP group of ``tp``
        GPUs of ``gpu_type``, microbatch ``mbs``) and its optimizer step; O(1) per call."""
        self._fresh()
        key = (
            (job.model.name, job.dtype, job.sequence_length, job.optimizer),
            first,
            last,
            gpu_type,
            tp,
            mbs,
        )
        hit = self._stage_cache.get(key)
        if hit is not None:
            return hit
        gpu = get_gpu(gpu_type)
        t = self.profiles.table(
            job.model, gpu, job.dtype, mbs, tp, job.sequence_length, job.optimizer
        )
        tp_s = 0.0
        if tp > 1 and not t.entry.includes_tp_comm:
            tp_s = timing.tp_comm_time(
                job.model,
                first,
                last,
                mbs,
                job.sequence_length,
                job.dtype,
                self.network.intra_node(gpu.name, tp),
                tp,
            )
        result = StageTime(
            t.span(t.forward, first, last),
            t.span(t.backward, first, last),
            tp_s,
            t.span(t.optimizer, first, last),
            t.entry.source,
        )
        self._stage_cache[key] = result
        return result

    def replica_memory(
        self,
        job: Job,
        first: int,
        last: int,
        gpu_type: str,
        tp: int,
        mbs: int,
        stage_index: int,
        num_stages: int,
        num_microbatches: int,
        dp: int = 1,
    ) -> dict[str, int]:
        """Named peak-memory terms of one GPU of a replica (sum = peak)."""
        self._fresh()
        return self._memory(
            job, first, last, gpu_type, tp, mbs, stage_index, num_stages, num_microbatches, dp
        )[1]

    def replica_peak(
        self,
        job: Job,
        first: int,
        last: int,
        gpu_type: str,
        tp: int,
        mbs: int,
        stage_index: int,
        num_stages: int,
        num_microbatches: int,
        dp: int = 1,
    ) -> tuple[int, int]:
        """(peak bytes, capacity) of one GPU of a replica: the per-replica memory verdict of
        ``estimate`` (fits = peak <= capacity), O(1) after the first call per layer range."""
        self._fresh()
        rng = self._range(job, first, last, gpu_type, tp, mbs)
        return self._peak(rng, tp, stage_index, num_stages, num_microbatches, dp)

    @staticmethod
    def _peak(rng: tuple, tp: int, i: int, p: int, m: int, dp: int) -> tuple[int, int]:
        """``replica_peak`` from a ``_range`` tuple (``estimate`` has it at hand)."""
        _, static, act, transient, act_out, over, capacity = rng
        buffer, communicators = position_terms(act_out, tp, dp, i, p)
        peak = peak_bytes(over, static, act, in_flight(i, p, m), transient, buffer, communicators)
        return peak, capacity

    def _memory(
        self, job, first, last, gpu_type, tp, mbs, i, p, m, dp
    ) -> tuple[int, dict[str, int]]:
        # Only what changes the terms enters the key: the in-flight count and which p2p
        # neighbours and communicators exist, not the stage index, depth or microbatch count.
        key = (
            (job.model.name, job.dtype, job.sequence_length, job.optimizer),
            first,
            last,
            gpu_type,
            tp,
            mbs,
            in_flight(i, p, m),
            i > 0,
            i < p - 1,
            dp > 1,
        )
        hit = self._mem_cache.get(key)
        if hit is not None:
            return hit
        model, gpu, seq = job.model, get_gpu(gpu_type), job.sequence_length
        t = self.profiles.table(model, gpu, job.dtype, mbs, tp, seq, job.optimizer)
        act_out = model.activation_out_bytes(0, mbs, seq, job.dtype)
        transient = transient_bytes(model, last, mbs, seq, job.dtype, tp)
        buffer, communicators = position_terms(act_out, tp, dp, i, p)
        terms = memory_terms(
            gpu=gpu,
            dtype=job.dtype,
            optimizer=job.optimizer,
            params=t.span(t.params, first, last),
            activation_per_microbatch=t.span(t.activation, first, last),
            in_flight_microbatches=in_flight(i, p, m),
            transient=transient,
            p2p_buffer=buffer,
            communicators=communicators,
        )
        result = (sum(terms.values()), terms)
        self._mem_cache[key] = result
        return result

    def _range(self, job: Job, first: int, last: int, gpu_type: str, tp: int, mbs: int) -> tuple:
        """Position-independent numbers of a layer range on one replica, cached: (StageTime,
        static bytes, activation bytes per microbatch, transient bytes, p2p tensor bytes,
        framework overhead, capacity)."""
        key = (
            (job.model.name, job.dtype, job.sequence_length, job.optimizer),
            first,
            last,
            gpu_type,
            tp,
            mbs,
        )
        hit = self._range_cache.get(key)
        if hit is None:
            model, gpu, seq = job.model, get_gpu(gpu_type), job.sequence_length
            t = self.profiles.table(model, gpu, job.dtype, mbs, tp, seq, job.optimizer)
            hit = self._range_cache[key] = (
                self.stage_time(job, first, last, gpu_type, tp, mbs),
                static_bytes(t.span(t.params, first, last), job.dtype, job.optimizer),
                t.span(t.activation, first, last),
                transient_bytes(model, last, mbs, seq, job.dtype, tp),
                model.activation_out_bytes(0, mbs, seq, job.dtype),
                framework_overhead(gpu),
                gpu.memory_bytes,
            )
        return hit

    def p2p_time(self, job: Job, boundary_layer: int, src: Replica, dst: Replica) -> float:
        """Seconds to send one microbatch's activations after ``boundary_layer`` (same for the
        gradient coming back). Every TP rank sends its full copy to its peer rank (no
        scatter-gather), so min(tp) pairs each move the whole tensor in parallel."""
        self._fresh()
        # Every boundary but the head's sends the same (b, s, h) tensor, so the layer id does
        # not enter the key (the head never sends).
        key = ((job.model.name, job.dtype, job.sequence_length, job.optimizer), src._id, dst._id)
        hit = self._p2p_cache.get(key)
        if hit is None:
            nbytes = job.model.activation_out_bytes(
                boundary_layer, src.microbatch_size, job.sequence_length, job.dtype
            )
            pairs = min(src.tp, dst.tp)
            link = self.network.link(
                Endpoint(src.zone, src.gpu_type, pairs), Endpoint(dst.zone, dst.gpu_type, pairs)
            )
            hit = self._p2p_cache[key] = timing.p2p_transfer_time(link, nbytes, pairs)
        return hit

    def dp_sync_time(self, job: Job, first: int, last: int, replicas: tuple[Replica, ...]) -> float:
        """Gradient all-reduce of one stage over its replicas (0 for one replica)."""
        self._fresh()
        return self._dp_sync(job, first, last, replicas, tuple(r._id for r in replicas))

    def _dp_sync(self, job: Job, first: int, last: int, replicas, sig) -> float:
        if len(replicas) < 2:
            return 0.0
        grad_bytes = self.grad_bytes(job, first, last)
        key = (grad_bytes, sig)
        hit = self._dp_cache.get(key)
        if hit is None:
            kinds = self._ring_cache.get(sig)
            if kinds is None:
                kinds = self._ring_cache[sig] = timing.ring_kinds(replicas)
            hit = self._dp_cache[key] = self.ring_time(job, first, last, kinds)[0]
        return hit

    def step_sync_time(self, endpoints, ranks: int) -> float:
        """The per-step whole-world all-reduce of loss and gradient norm
        (``timing.step_sync_time``) over ``ranks`` GPUs whose (zone, GPU type) kinds are
        ``endpoints``; the ring's latency is that of the slowest pair of kinds."""
        self._fresh()
        key = (frozenset(endpoints), ranks)
        hit = self._step_sync_cache.get(key)
        if hit is None:
            kinds = sorted(key[0])
            links = [
                self.network.link(Endpoint(za, ga, 1), Endpoint(zb, gb, 1))
                for k, (za, ga) in enumerate(kinds)
                for zb, gb in kinds[k:]
            ]
            worst = max(links, key=lambda c: c.latency_s) if links else None
            hit = 0.0 if worst is None else timing.step_sync_time(worst, ranks)
            self._step_sync_cache[key] = hit
        return hit

    def plan_step_sync_time(self, plan: Plan) -> float:
        """``step_sync_time`` over every GPU of ``plan`` (what ``estimate`` adds)."""
        endpoints = {(r.zone, r.gpu_type) for s in plan.stages for r in s.replicas}
        ranks = sum(r.tp for s in plan.stages for r in s.replicas)
        return self.step_sync_time(endpoints, ranks)

    def ring_time(self, job: Job, first: int, last: int, kinds) -> tuple[float, float]:
        """(all-reduce seconds, egress $) of layers first..last over a ring given as
        ``timing.ring_kinds`` runs (what ``dp_sync_time`` and the DP egress compute)."""
        n = sum(count for _, count in kinds)
        if n < 2:
            return 0.0, 0.0
        grad = self.grad_bytes(job, first, last)
        seconds, usd = 0.0, 0.0
        for a, b in timing.kind_edges(kinds):
            key = (grad, a, b, n)
            edge = self._edge_cache.get(key)
            if edge is None:
                edge = self._edge_cache[key] = (
                    timing.edge_allreduce_time(self.network, a, b, n, grad),
                    timing.edge_egress_usd(self.network, a, b, n, grad),
                )
            seconds = max(seconds, edge[0])
            usd += edge[1]
        return seconds, usd

    def grad_bytes(self, job: Job, first: int, last: int) -> int:
        """Unsharded gradient bytes of layers first..last (fp32 main grads, ``GRAD_BYTES``)."""
        return GRAD_BYTES[job.dtype] * self.unsharded_params(job, first, last)

    def dp_egress_per_gb(self, replicas: tuple[Replica, ...]) -> float:
        """$ per GB of unsharded gradients for one all-reduce over ``replicas``' ring."""
        return self._dp_egress(replicas, tuple(r._id for r in replicas))

    def _dp_egress(self, replicas, sig) -> float:
        hit = self._dp_egress_cache.get(sig)
        if hit is None:
            hit = self._dp_egress_cache[sig] = timing.dp_egress_usd(self.network, replicas, 1e9)
        return hit

    def unsharded_params(self, job: Job, first: int, last: int) -> int:
        """Parameters of layers first..last at TP 1 (O(1): prefix sums per model)."""
        prefix = self._param_prefix.get(job.model.name)
        if prefix is None:
            prefix = [0]
            for i in range(job.model.num_layer_ids):
                prefix.append(prefix[-1] + job.model.params(i))
            self._param_prefix[job.model.name] = prefix
        return prefix[last + 1] - prefix[first]

    # ---- the whole plan --------------------------------------------------------------------
    def estimate(
        self, job: Job, plan: Plan, *, iterations: float | None = None, tokens: float | None = None
    ) -> Estimate:
        """Predict iteration time, memory and cost of ``plan`` for ``job`` (checks the plan)."""
        self._fresh()
        self.check(job, plan)
        return estimate_plan(self, job, plan, iterations, tokens)

    def check(self, job: Job, plan: Plan) -> None:
        """``plan.check(job)`` in O(stages): coverage and the global batch here; each distinct
        replica's TP degree and dtype support when its numbers are first computed
        (``_replica_info``), so cached replicas are not re-validated on every plan."""
        if plan.stages[-1].last_layer != job.model.head_layer_id:
            plan.check(job)
        if plan.stages[0]._samples != job.global_batch_size:
            plan.check(job)

    def egress_per_iteration(self, job: Job, plan: Plan) -> float:
        """$ of cross-zone traffic per iteration: p2p between stages and the DP rings."""
        return timing.egress_usd(
            self.network, job, plan, lambda a, b: self.unsharded_params(job, a, b)
        )

    def p2p_egress_usd(self, job: Job, src: Replica, dst: Replica) -> float:
        """$ per iteration for one pipeline's activations (and gradients back) from ``src`` to
        ``dst`` when their zones differ (every boundary but the head's sends (b, s, h))."""
        if src.zone == dst.zone:
            return 0.0
        nbytes = (
            2
            * src.num_microbatches
            * job.model.activation_out_bytes(0, src.microbatch_size, job.sequence_length, job.dtype)
        )
        return nbytes / 1e9 * self.network.egress_per_gb(src.zone, dst.zone)

    def p2p_egress(self, job: Job, plan: Plan) -> float:
        """$ per iteration of activations and gradients crossing zones between stages."""
        total = 0.0
        stages = plan.stages
        for i in range(len(stages) - 1):
            for a, b in zip(stages[i].replicas, stages[i + 1].replicas, strict=True):
                if a.zone != b.zone:
                    nbytes = (
                        2
                        * a.num_microbatches
                        * job.model.activation_out_bytes(
                            stages[i].last_layer, a.microbatch_size, job.sequence_length, job.dtype
                        )
                    )
                    total += nbytes / 1e9 * self.network.egress_per_gb(a.zone, b.zone)
        return total
