"""The simulator: iteration time, memory and cost of a (Job, Plan), from public components.

``Simulator.estimate(job, plan)`` is ``compose.estimate_plan`` over these components, which
the planner also calls on partial plans, so its numbers are the estimate's:

- ``stage_time(job, StageSlice(first, last, gpu_type, tp, mbs)) -> StageTime``: per-microbatch
  forward, backward and TP-communication seconds of a layer range on one replica, and its
  optimizer step. O(1) after the first call per (model, GPU, dtype, mbs, TP): prefix sums over
  the profile.
- ``replica_memory(job, slice, i, p, m, dp)`` / ``replica_peak(...)``: named peak-memory terms
  of one GPU of a replica at stage i of p, and their sum against the GPU's capacity.
- ``p2p_time(job, boundary_layer, src, dst)``: one microbatch's activation (or its gradient)
  from replica ``src`` to ``dst`` across a stage boundary; ``p2p_egress_usd`` its egress.
- ``dp_sync_time(job, first, last, replicas)`` / ``ring_time``: the data-parallel gradient
  all-reduce of a stage over its replicas, by the ring's slowest edge.
- ``step_sync_time(endpoints, ranks)``: the per-step whole-world all-reduce of loss and
  gradient norm (latency-bound).
- ``timing.pipeline_time`` / ``timing.iteration_terms``: how they add up (``compose``).

Every memoized number lives in one ``ComponentCache`` (``self.cache``), dropped whole when the
profile store, the network model or a catalog (GPU types, zones, prices) changes.
"""

from __future__ import annotations

from pathlib import Path

from ..catalog.gpus import get_gpu
from ..catalog.prices import usd_per_second
from ..dtypes import dtype_bytes
from ..errors import PlanError
from ..inputs import positive_number
from ..model.moe import (
    check_plan_expert_parallel,
    expert_comm_per_microbatch,
    experts_held,
    experts_held_elsewhere,
)
from ..profiles.analytic import attention_flop_s, score_matrix_s
from ..profiles.files import load_profile_dir
from ..profiles.store import LINKS_FILE, ProfileStore
from ..spec.interleave import check_interleave
from ..spec.job import Job, as_job
from ..spec.options import (
    check_replica,
    profiled_with_flash,
    recomputed_forward_fraction,
    recomputed_gemm_share,
    uses_flash,
)
from ..spec.plan import Plan, Replica, Stage, StageSlice, as_plan
from . import timing
from .cache import ComponentCache
from .compose import P2P, DataParallelSync, ReplicaInfo, estimate_plan, p2p_key
from .features.context_parallel import (
    attention_extra_flops,
    check_plan_context_parallel,
    kv_exchange_exposed,
)
from .features.fp8 import fp8_speedup_bound, fp8_time_delta
from .features.sharding import check_plan_sharding
from .memory import GRAD_BYTES
from .network import Endpoint, NetworkModel
from .replica_memory import MemoryComponents
from .result import Estimate
from .timing import StageTime

__all__ = ["Simulator", "StageTime"]


class Simulator(MemoryComponents):
    """Predicts iteration time, memory and cost of plans from a profile store and a network
    model (defaults: the built-in catalogs, i.e. analytic profiles and default links)."""

    def __init__(self, profiles: ProfileStore | None = None, network: NetworkModel | None = None):
        self.profiles = profiles if profiles is not None else ProfileStore()
        self.network = network if network is not None else NetworkModel()
        self.cache = ComponentCache()
        """Every memoized component; ``refresh()`` drops it when an input changed."""

    def refresh(self) -> None:
        """Drop cached numbers if the profiles, the network or a catalog changed (every
        public method does this first)."""
        self.cache.refresh(self.profiles, self.network)

    def clear_caches(self) -> None:
        """Forget every cached component (done automatically on any input change)."""
        self.cache.clear()

    @classmethod
    def from_sailor_root(cls, root: str | Path, denoise: bool = True) -> Simulator:
        """Profiles and network fits from a folder laid out like the original Sailor repo;
        the imported profiles are denoised across microbatch sizes (``profile_denoise``)
        unless ``denoise=False``."""
        from ..original import load_sailor_network, load_sailor_profiles
        from ..profiles.denoise import denoise_store

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

    # ---- the whole plan --------------------------------------------------------------------
    def estimate(
        self, job: Job, plan: Plan, *, iterations: float | None = None, tokens: float | None = None
    ) -> Estimate:
        """Predict iteration time, memory and cost of ``plan`` for ``job`` (checks the plan);
        either may be given as its dict (``Job.to_dict``, ``Plan.to_dict``: a plan file)."""
        job, plan = as_job(job), as_plan(plan)
        for name, value in (("iterations", iterations), ("tokens", tokens)):
            if value is not None:  # -1 or NaN gave whole-run figures of -1 or NaN hours
                positive_number(value, name)
        self.refresh()
        self.check(job, plan)
        return estimate_plan(self, job, plan, iterations, tokens)

    def check(self, job: Job, plan: Plan) -> None:
        """``plan.check(job)`` in O(stages): coverage and the global batch here; each distinct
        replica's TP degree and dtype support when its numbers are first computed
        (``replica_info``), so cached replicas are not re-validated on every plan. Plans the
        options cannot run on are refused with ``PlanError`` naming the option: expert and
        context parallel groups, sharded data parallelism (``features.sharding``: one TP degree
        and one microbatch count per stage), and interleaved 1F1B's rule
        (``spec.interleave``: >= 2 stages, microbatch counts multiples of the stage count, a
        layer in every chunk)."""
        if plan.stages[-1].last_layer != job.model.head_layer_id:
            plan.check(job)
        if plan.stages[0]._samples != job.sample_slots:
            plan.check(job)
        options = job.options
        if options.expert_parallel != 1 or options.context_parallel != 1:  # else nothing to do
            check_plan_expert_parallel(options.expert_parallel, plan)
            check_plan_context_parallel(options.context_parallel, plan)
        if options.shards_gradients:
            check_plan_sharding(options.zero, plan)
        if options.virtual_stages != 1:
            check_interleave(plan, job.model.head_layer_id, options.virtual_stages)

    # ---- time components -------------------------------------------------------------------
    def stage_time(self, job: Job, s: StageSlice) -> StageTime:
        """Per-microbatch seconds of the slice's layers on one replica (its TP group and
        microbatch) and its optimizer step; O(1) per call."""
        self.refresh()
        return self._stage_time(job, s)

    def _stage_time(self, job: Job, s: StageSlice) -> StageTime:
        cache = self.cache.stage_time
        key = (job.timing_id, s)  # ZeRO stages of one execution style share their times
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = self._stage_time_uncached(job, s)
        return hit

    def _stage_time_uncached(self, job: Job, s: StageSlice) -> StageTime:
        first, last, tp, mbs = s.first, s.last, s.tp, s.mbs
        gpu = get_gpu(s.gpu_type)
        # A context-parallel rank processes seq / cp tokens of each sample.
        t = self.profiles.table(
            job.model, gpu, job.dtype, mbs, tp, job.local_sequence_length, job.optimizer
        )
        tp_s = 0.0
        if tp > 1 and not t.entry.includes_tp_comm:
            link = self.network.intra_node(gpu.name, tp)
            seq, dtype = job.local_sequence_length, job.dtype
            tp_s = timing.tp_comm_time(job.model, first, last, mbs, seq, dtype, link, tp)
        fwd, bwd = t.span(t.forward, first, last), t.span(t.backward, first, last)
        if job.options.context_parallel > 1:
            extra = self._cp_attention_s(job, s)
            fwd, bwd = fwd + extra, bwd + 2 * extra
        if job.options.fp8 != "none":
            fwd, bwd = self._fp8_time(job, s, fwd, bwd)
        scores = self._score_matrix_s(job, t.entry, s)
        fwd, bwd = fwd + scores[0], bwd + scores[1]
        recompute = self._recompute_s(job, t, s, tp_s)
        if job.options.recompute in ("full", "selective"):  # both redo the attention core
            recompute += scores[0]
        return StageTime(
            fwd,
            bwd,
            tp_s,
            self._optimizer_s(job, t, s),
            t.entry.source,
            recompute,
            framework_s=self._framework_s(job, gpu, t.entry, fwd + bwd + recompute),
        )

    @staticmethod
    def _score_matrix_s(job: Job, entry, s: StageSlice) -> tuple[float, float]:
        """(forward s, backward s) the slice's blocks spend moving attention scores through
        memory (``analytic.score_matrix_s``) where attention materializes them and the
        profile does not hold that traffic. Analytic profiles count FLOPs only: added without
        flash. The imported Megatron-DeepSpeed tables measured math attention: they hold it.
        Ours measured the engine's SDPA, which the engine runs unless flash is turned off
        (``flash_attention=False``: then its math attention)."""
        gpu = get_gpu(s.gpu_type)
        if entry.source.startswith("imported"):
            return 0.0, 0.0
        if entry.measured:
            materialized = job.options.flash_attention is False
        else:
            materialized = not uses_flash(job.options, gpu, job.dtype)
        if not materialized:
            return 0.0, 0.0
        blocks = max(0, min(s.last, job.model.num_layers) - max(s.first, 1) + 1)
        if not blocks:
            return 0.0, 0.0
        seq = job.local_sequence_length
        fwd, bwd = score_matrix_s(job.model, gpu, job.dtype, s.mbs, seq, s.tp)
        return blocks * fwd, blocks * bwd

    @staticmethod
    def _optimizer_s(job: Job, t, s: StageSlice) -> float:
        """The profile's optimizer step of the slice's layers, less the head's share for a
        matrix the slice holds once (``ModelSpec.shared_head_params``: a tied model in one
        stage steps the shared matrix once)."""
        step = t.span(t.optimizer, s.first, s.last)
        shared = job.model.shared_head_params(s.first, s.last, s.tp)
        if shared:
            head = job.model.head_layer_id
            step -= t.span(t.optimizer, head, head) * shared / job.model.params(head, s.tp)
        ep = job.options.expert_parallel
        if ep > 1:
            # The step is memory bound: it touches the parameters the rank holds, and under
            # expert parallelism those are 1/ep of the routed experts (``moe.experts_held``);
            # the profile timed a rank holding all of them (Mixtral-8x7B at EP 8: 13 % of a
            # stage's parameters held, its whole step had been charged).
            model = job.model
            for i in range(max(s.first, 1), min(s.last, model.num_layers) + 1):
                elsewhere = experts_held_elsewhere(model, i, i, s.tp, ep)
                if elsewhere:
                    step -= t.span(t.optimizer, i, i) * elsewhere / model.params(i, s.tp)
        return step

    @staticmethod
    def _cp_attention_s(job: Job, s: StageSlice) -> float:
        """Forward seconds a context-parallel rank's queries spend attending to the keys of
        the other ranks' chunks (``context_parallel.attention_extra_flops``), at the attention
        core's achieved FLOP/s; backward does twice the work."""
        blocks = max(0, min(s.last, job.model.num_layers) - max(s.first, 1) + 1)
        flops = attention_extra_flops(
            job.model, s.mbs, job.sequence_length, s.tp, job.options.context_parallel
        )
        return blocks * flops / attention_flop_s(get_gpu(s.gpu_type), job.dtype)

    @staticmethod
    def _fp8_time(job: Job, s: StageSlice, forward, backward) -> tuple[float, float]:
        """16-bit seconds of the slice's layers with their block GEMMs in FP8 (``fp8.py``);
        never below the whole range sped up as much as a GEMM is (the peak ratio over the FP8
        efficiency ratio: a measured profile can be faster than the analytic GEMM share the
        saving is computed from)."""
        gpu, seq, dtype, recipe = (
            get_gpu(s.gpu_type),
            job.local_sequence_length,
            job.dtype,
            job.options.fp8,
        )
        d_fwd = d_bwd = 0.0
        for layer_id in range(s.first, s.last + 1):
            f, b = fp8_time_delta(job.model, layer_id, gpu, dtype, s.mbs, seq, s.tp, recipe)
            d_fwd, d_bwd = d_fwd + f, d_bwd + b
        floor = fp8_speedup_bound(gpu, dtype)
        return max(forward + d_fwd, forward * floor), max(backward + d_bwd, backward * floor)

    @staticmethod
    def _framework_s(job: Job, gpu, entry, compute_s: float) -> float:
        """The framework's share on top of an analytic estimate's hardware compute time:
        compute x (1 / framework efficiency - 1), the efficiency fitted per execution style
        and GPU family on published runs (``analytic.framework_efficiency``). Measured and
        imported profiles already hold their framework's overhead: 0."""
        from ..profiles import analytic, trust

        if entry.source != "analytic" or analytic.calibrated(gpu, job.dtype) is None:
            return 0.0
        style = trust.execution_style(job.options.zero)
        found = analytic.framework_efficiency(style, analytic.gpu_family(gpu))
        if found is None:
            return 0.0
        return compute_s * (1.0 / found[0] - 1.0)

    def _recompute_s(self, job: Job, t, s: StageSlice, tp_s: float) -> float:
        """Forward work done again in backward (``options.recomputed_forward_fraction`` of
        the blocks' forward seconds; full recomputation also repeats their forward TP
        all-reduces: half of ``tp_s``, a parallel block's ``tp_forward_all_reduce_share``)."""
        a, b = max(s.first, 1), min(s.last, job.model.num_layers)
        if a > b:
            return 0.0
        # Flash's extra QK^T in backward is in a measured profile's backward already.
        gpu = get_gpu(s.gpu_type)
        flash = uses_flash(job.options, gpu, job.dtype) and not profiled_with_flash(t.entry)
        seq = job.local_sequence_length
        share = recomputed_forward_fraction(job.model, s.mbs, seq, s.tp, job.options, flash)
        span = t.span(t.forward, a, b)
        extra = share * span
        gemms = recomputed_gemm_share(job.model, s.tp, job.options)
        if gemms and job.options.fp8 != "none":  # the rerun GEMMs in FP8, as the first time
            extra += gemms * (self._fp8_time(job, s._replace(first=a, last=b), span, 0.0)[0] - span)
        if job.options.recompute == "full":
            extra += job.model.tp_forward_all_reduce_share * tp_s
        if job.options.context_parallel > 1:  # the attention over the other ranks' keys
            cp_s = self._cp_attention_s(job, s)
            extra += cp_s if job.options.recompute == "full" else 0.5 * cp_s if flash else 0.0
        return extra

    def p2p_time(
        self, job: Job, boundary_layer: int, src: Replica, dst: Replica, stage_replicas: int = 1
    ) -> float:
        """Seconds to send one microbatch's activations after ``boundary_layer`` (same for the
        gradient coming back); ``stage_replicas``: replicas of the sending stage, which share
        the nodes' NICs (see ``p2p``)."""
        self.refresh()
        return self.p2p(job, boundary_layer, src, dst, stage_replicas).seconds

    def p2p_egress_usd(self, job: Job, src: Replica, dst: Replica) -> float:
        """$ per iteration for one pipeline's activations (and gradients back) from ``src`` to
        ``dst`` when their zones differ."""
        self.refresh()
        return src.num_microbatches * self.p2p(job, 0, src, dst).egress_usd

    def p2p(
        self, job: Job, boundary_layer: int, src: Replica, dst: Replica, stage_replicas: int = 1
    ) -> P2P:
        """``P2P`` of one boundary per microbatch (``compose`` calls it after ``refresh``).

        As Megatron-LM sends it (scatter/gather, Narayanan et al. 2021 Sec. 4.1): each of the
        min(tp) TP rank pairs sends 1/tp of the (b, s, h) tensor, and the receiving replica
        all-gathers the pieces over its node's intra-node link (NVLink / PCIe). In the 1F1B
        steady state every replica of the stage on the same node sends at once: their pieces
        share the node's NICs (``timing.nics_per_node``: one per GPU on SXM / superchip nodes,
        one per node on PCIe nodes). Every boundary but the head's sends the same tensor, and
        the head never sends, so the layer id does not enter the key."""
        cache = self.p2p_known(job)
        key = p2p_key(self.cache.replica_id(src), self.cache.replica_id(dst), stage_replicas)
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = self._p2p(job, boundary_layer, src, dst, stage_replicas)
        return hit

    def _p2p(self, job: Job, boundary_layer: int, src: Replica, dst: Replica, d: int) -> P2P:
        seq, dtype = job.local_sequence_length, job.dtype
        nbytes = job.model.activation_out_bytes(boundary_layer, src.microbatch_size, seq, dtype)
        g_src, g_dst = get_gpu(src.gpu_type), get_gpu(dst.gpu_type)
        pairs = min(src.tp, dst.tp)
        split = job.options.p2p_scatter_gather
        if not split:  # every TP rank sends the whole tensor: pairs x the bytes
            nbytes *= pairs
        per_node = self.network.gpus_per_node(g_src)  # the cluster's node, if smaller
        sharing = max(1, min(d, per_node // src.tp))  # replicas per sending node
        flows = pairs * sharing
        nics = min(timing.nics_per_node(g_src), timing.nics_per_node(g_dst))
        if flows <= nics:  # every piece has a NIC of its own: the pairs' own curve
            nics, flows = pairs, pairs
        link = self.network.link(
            Endpoint(src.zone, src.gpu_type, nics), Endpoint(dst.zone, dst.gpu_type, nics)
        )
        seconds = timing.p2p_transfer_time(link, nbytes, pairs, flows)
        if pairs > 1 and split:  # the receiver's TP group gathers the pieces in its node
            intra = self.network.intra_node(g_dst.name, dst.tp)
            seconds += timing.allgather_time(intra, nbytes, pairs)
        egress = 0.0
        if src.zone != dst.zone:  # activations out, gradients back
            egress = 2 * nbytes / 1e9 * self.network.egress_per_gb(src.zone, dst.zone)
        return P2P(seconds, egress)

    def dp_sync_time(self, job: Job, first: int, last: int, replicas: tuple[Replica, ...]) -> float:
        """Gradient all-reduce of one stage over its replicas (0 for one replica)."""
        self.refresh()
        return self.stage_sync(job, Stage(first, last, tuple(replicas))).seconds

    def stage_sync(self, job: Job, stage: Stage) -> DataParallelSync:
        """Data-parallel sync of one stage over its replicas' ring (``ring_time`` over
        ``timing.ring_kinds``), by the job's ``options.zero``; ``compose`` calls it after
        ``refresh``. Volumes as ring all-reduce equivalents (a reduce-scatter or an all-gather
        moves half an all-reduce's bytes, ZeRO Sec. 7):

        - none: all-reduce of the gradients, once per iteration;
        - zero1/zero2: reduce-scatter of gradients + all-gather of parameters, once;
        - zero3: every microbatch, all-gather of parameters in forward and in backward and a
          gradient reduce-scatter (``per_microbatch_s``; exposed beyond compute);
        - hybrid: the zero3 traffic inside a node (NVLink/PCIe) every microbatch, then an
          all-reduce of each node's gradient shard across nodes once.
        """
        if len(stage.replicas) < 2:
            return DataParallelSync(0.0, 0.0)
        cache = self.cache.stage_sync
        # Keyed by the range's parameter count, not its bounds: equal blocks at other
        # depths sync the same bytes (the planner meets many such ranges).
        params = self.unsharded_params(job, stage.first_layer, stage.last_layer)
        key = (job.cache_id, params, self.cache.stage_id(stage))
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = self._stage_sync(job, stage)
        return hit

    def _stage_sync(self, job: Job, stage: Stage) -> DataParallelSync:
        r = stage.replicas[0]
        return self.ring_sync(
            job,
            stage.first_layer,
            stage.last_layer,
            self._ring_kinds(stage),
            self._max_microbatches(stage),
            r.gpu_type,
            r.tp,
        )

    def ring_sync(
        self, job: Job, first: int, last: int, kinds, max_microbatches: int, gpu_type: str, tp: int
    ) -> DataParallelSync:
        """``stage_sync`` of layers first..last over a ring given as ``timing.ring_kinds``
        runs, whose replicas run at most ``max_microbatches`` (ZeRO-3 pays its egress per
        microbatch) and the first of which is ``gpu_type`` at ``tp`` (hybrid shards inside
        its nodes). The planner scores candidates with it without building stages."""
        zero = job.options.zero
        one_ring = self.ring_sync_bytes(job, first, last, sum(count for _, count in kinds))
        if one_ring is not None:  # no ZeRO, ZeRO-1/2: one ring's seconds
            return DataParallelSync(*self.ring_time(job, first, last, kinds, one_ring))
        grad = self.grad_bytes(job, first, last)
        weights = dtype_bytes(job.dtype) * self.unsharded_params(job, first, last)
        per_mb = (2 * weights + grad) / 2
        if zero == "zero3":
            seconds, usd = self.ring_time(job, first, last, kinds, per_mb)
            return DataParallelSync(0.0, usd * max_microbatches, seconds)
        replicas = sum(count for _, count in kinds)  # hybrid: shard in a node, replicate across
        group = self.shard_group(job, gpu_type, tp, replicas)
        gpu = get_gpu(gpu_type)
        link = self.network.intra_node(gpu.name, gpu.gpus_per_node)
        inside = timing.allreduce_time(
            link, per_mb / tp, group, 1, timing.intra_bus_efficiency(gpu.name)
        )
        across = (
            self.ring_time(job, first, last, kinds, grad / group)
            if group < replicas
            else (0.0, 0.0)
        )
        return DataParallelSync(across[0], across[1], inside)

    def ring_sync_bytes(
        self, job: Job, first: int, last: int, ranks: int | None = None
    ) -> float | None:
        """Bytes whose ring all-reduce is all of ``ring_sync``'s seconds for layers
        first..last over a ring of ``ranks`` replicas: the gradients without ZeRO, half of
        gradients + weights (reduce-scatter and all-gather) under ZeRO-1/2; None under ZeRO-3
        and hybrid sharding, whose seconds are not one ring's. Under expert parallelism the
        routed experts a rank holds are reduced over the ranks / ep replicas holding them
        (Megatron-Core's expert data-parallel group): a ring of n_e = ranks / ep moves
        (n_e - 1) / n_e of their bytes per rank where the stage's ring moves (n - 1) / n, so
        they count at that ratio (0 when each expert has one holder). ``ranks`` None: the
        least over rings (the experts' 0), a lower bound for callers that do not know it."""
        zero = job.options.zero
        if zero not in ("none", "zero1", "zero2"):
            return None
        grad = self.grad_bytes(job, first, last)
        per_param = grad / max(1, self.unsharded_params(job, first, last))
        if zero != "none":
            weights = dtype_bytes(job.dtype) * self.unsharded_params(job, first, last)
            grad, per_param = (grad + weights) / 2, (per_param + dtype_bytes(job.dtype)) / 2
        ep = job.options.expert_parallel
        if ep > 1:
            experts = experts_held(job.model, first, last, 1, ep) * per_param
            share = 0.0
            if ranks is not None and ranks >= 2 and ranks // ep >= 2:
                n_e = ranks // ep
                share = ((n_e - 1) / n_e) / ((ranks - 1) / ranks)
            grad -= experts * (1.0 - share)
        return grad

    def ring_edge_seconds(
        self, a: timing.RingKind, b: timing.RingKind, ranks: int, nbytes: float
    ) -> float:
        """Seconds of a ring all-reducing ``nbytes`` (``ring_sync_bytes``, which the caller
        computes once for many edges) over ``ranks`` replicas if its slowest edge were the
        a -> b edge between two zones (``ring_time`` takes the slowest of its edges, so any ring
        with this edge takes at least this long)."""
        if a[0] == b[0]:
            raise ValueError("ring_edge_seconds is for an edge between two zones")
        return self._edge_seconds(a, b, ranks, nbytes)

    def zone_ring_signature(self, zone: str, gpu_types: tuple[str, ...]) -> tuple:
        """All that a ring inside ``zone`` over replicas of ``gpu_types`` takes from the zone:
        the link between two of their GPUs there at every count of GPU pairs up to a node
        (``_edge_curve``'s edges, ``timing.hierarchical_allreduce_time``'s NICs; the rest of
        an edge's seconds depends on the GPU types alone, and an edge inside a zone pays no
        egress). Zones with equal signatures time every such ring alike (``ring_time``,
        ``zone_edge_seconds``), so a caller bounding over zones times one of each."""
        counts = range(1, max(_node_width(g) for g in gpu_types) + 1)
        return tuple(
            self.network.link(Endpoint(zone, a, c), Endpoint(zone, b, c))
            for a in gpu_types
            for b in gpu_types
            for c in counts
        )

    def zone_edge_seconds(
        self, a: timing.RingKind, b: timing.RingKind, ranks: int, nbytes: float
    ) -> float | None:
        """``ring_edge_seconds`` of an edge inside one zone (a run of one kind, or two kinds
        side by side); None where it all-reduces hierarchically, its seconds then depending on
        the run's length."""
        if a[0] != b[0]:
            raise ValueError("zone_edge_seconds is for an edge inside one zone")
        curves = self.cache.ring_curve
        curve = curves.get((a, b), False)
        if curve is False:
            curve = curves[(a, b)] = self._edge_curve(a, b)
        return None if curve is None else self._edge_seconds(a, b, ranks, nbytes)

    def _edge_seconds(self, a, b, ranks: int, nbytes: float) -> float:
        edge = self.cache.ring_edge.get((nbytes, a, b, ranks, 0))
        return (edge or self._ring_edge(a, b, ranks, 0, nbytes))[0]

    @staticmethod
    def _max_microbatches(stage: Stage) -> int:
        return max(r.num_microbatches for r in stage.replicas)

    def ring_time(
        self, job: Job, first: int, last: int, kinds, nbytes: float | None = None
    ) -> tuple[float, float]:
        """(all-reduce seconds, egress $) of ``nbytes`` (default: the gradients of layers
        first..last) over a ring given as ``timing.ring_kinds`` runs: the slowest edge's time,
        every cross-zone edge's egress."""
        n = sum(count for _, count in kinds)
        if n < 2:
            return 0.0, 0.0
        grad = self.grad_bytes(job, first, last) if nbytes is None else nbytes
        cache, counts = self.cache.ring_edge, dict(kinds)
        seconds, usd = 0.0, 0.0
        for a, b in timing.kind_edges(kinds):
            run = counts[a] if a == b else 0
            edge = cache.get((grad, a, b, n, run)) or self._ring_edge(a, b, n, run, grad)
            seconds = max(seconds, edge[0])
            usd += edge[1]
        return seconds, usd

    def _ring_edge(self, a, b, ranks: int, run: int, nbytes: float) -> tuple[float, float]:
        """(all-reduce seconds, egress $) of one ring edge (``_edge_time``), computed once per
        key of ``ComponentCache.ring_edge``: the planner's ring bounds ask for the same edges
        over many shapes. (Callers look the key up first: the hit is the hot path.)"""
        key = (nbytes, a, b, ranks, run)
        edge = self.cache.ring_edge.get(key)
        if edge is None:
            edge = self.cache.ring_edge[key] = (
                self._edge_time(a, b, ranks, run, nbytes),
                timing.edge_egress_usd(self.network, a, b, ranks, nbytes),
            )
        return edge

    def _edge_time(self, a, b, ranks: int, run: int, nbytes: float) -> float:
        """A ring edge's all-reduce seconds: inside a run of ``run`` equal replicas,
        hierarchical (intra-node NVLink / PCIe, then across nodes); but where the all-reduce
        itself was measured (a ring in links.json, or the original Sailor's per-GPU-count
        fits, taken from whole-ring runs) that measurement is what NCCL achieved, used flat;
        so are CPU workers (processes of one host: their measured p2p link is the loopback)."""
        curves = self.cache.ring_curve
        curve = curves.get((a, b), False)
        if curve is False:
            curve = curves[(a, b)] = self._edge_curve(a, b)
        if curve is None:  # hierarchical: depends on the run, not on the whole ring's size
            key = (a, run, nbytes)
            hit = self.cache.ring_hierarchical.get(key)
            if hit is None:
                hit = timing.hierarchical_allreduce_time(self.network, a, run, nbytes)
                self.cache.ring_hierarchical[key] = hit
            return hit
        link, pairs, efficiency = curve
        # = timing.edge_allreduce_time(self.network, a, b, ranks, nbytes), its lookups kept
        return timing.allreduce_time(link, nbytes, ranks, pairs, efficiency)

    def _edge_curve(self, a, b):
        """None where the a -> b edge all-reduces hierarchically (``_edge_time``), else its
        ``timing.edge_curve`` (curve, parallel rings, bus efficiency)."""
        if a == b:
            zone, gpu_type, tp = a
            link = self.network.link(Endpoint(zone, gpu_type, tp), Endpoint(zone, gpu_type, tp))
            flat = (
                link.ring_bus_bandwidth is not None
                or any(g == gpu_type for g, _ in self.network.homogeneous)
                or get_gpu(gpu_type).platform == "cpu"
            )
            if not flat:
                return None
        return timing.edge_curve(self.network, a, b)

    def grad_bytes(self, job: Job, first: int, last: int) -> int:
        """Unsharded gradient bytes of layers first..last (fp32 main grads, ``GRAD_BYTES``,
        or bf16 with ``options.grad_dtype='bf16'``)."""
        per = GRAD_BYTES[job.dtype] if job.options.grad_dtype == "fp32" else 2
        return per * self.unsharded_params(job, first, last)

    def dp_egress_per_gb(self, replicas: tuple[Replica, ...]) -> float:
        """$ per GB of unsharded gradients for one all-reduce over ``replicas``' ring."""
        return timing.dp_egress_usd(self.network, replicas, 1e9)

    def unsharded_params(self, job: Job, first: int, last: int) -> int:
        """Parameters of layers first..last at TP 1 (O(1): prefix sums per model) that one
        replica holds: under expert parallelism 1/ep of the routed experts, whose gradients
        are reduced over the replicas holding the same experts (counted as the stage's ring,
        which ep divides)."""
        cache = self.cache.param_prefix
        prefix = cache.get(job.cache_id)
        if prefix is None:
            prefix = [0]
            ep = job.options.expert_parallel
            for i in range(job.model.num_layer_ids):
                held = job.model.params(i) - experts_held_elsewhere(job.model, i, i, 1, ep)
                prefix.append(prefix[-1] + held)
            cache[job.cache_id] = prefix
        return prefix[last + 1] - prefix[first] - job.model.shared_head_params(first, last)

    def step_sync_time(self, endpoints, ranks: int) -> float:
        """The per-step whole-world all-reduce of loss and gradient norm
        (``timing.step_sync_time``) over ``ranks`` GPUs whose (zone, GPU type) kinds are
        ``endpoints``; the ring's latency is that of the slowest pair of kinds."""
        self.refresh()
        cache = self.cache.step_sync
        key = (frozenset(endpoints), ranks)
        hit = cache.get(key)
        if hit is None:
            kinds = sorted(key[0])
            links = [
                self.network.link(Endpoint(za, ga, 1), Endpoint(zb, gb, 1))
                for k, (za, ga) in enumerate(kinds)
                for zb, gb in kinds[k:]
            ]
            worst = max(links, key=lambda c: c.latency_s) if links else None
            hit = cache[key] = 0.0 if worst is None else timing.step_sync_time(worst, ranks)
        return hit

    def plan_step_sync_time(self, plan: Plan) -> float:
        """``step_sync_time`` over every GPU of ``plan`` (what ``estimate`` adds)."""
        endpoints = {(r.zone, r.gpu_type) for s in plan.stages for r in s.replicas}
        ranks = sum(r.tp for s in plan.stages for r in s.replicas)
        return self.step_sync_time(endpoints, ranks)

    def tied_sync_time(self, job: Job, ends: tuple) -> float:
        """Seconds of the per-step sum of a tied matrix's two copies, the embedding's on the
        first stage and the head's on the last (the runtime's ``engine.parallel.tied``);
        ``ends`` = ``tied_ends`` of the plan: per kind of pipeline ((zone, GPU type, TP) of
        its first stage, the same of its last, pipelines), empty for one stage. Where every
        pipeline has one TP degree at both ends, each pair of ranks holding the same rows
        all-reduces its 1/tp of the [vocab, hidden] gradient (Megatron's embedding group),
        all pairs at once: the slowest pair's link. Otherwise the ranks of both stages
        all-reduce the full matrix, over the slowest of their links."""
        model = job.model
        if not ends or not model.tie_word_embeddings:
            return 0.0
        self.refresh()
        key = ("tied", job.cache_id, ends)
        hit = self.cache.step_sync.get(key)
        if hit is None:
            grad = GRAD_BYTES[job.dtype] if job.options.grad_dtype == "fp32" else 2
            full = model.vocab_size * model.hidden_size * grad

            def link(a, b):
                return self.network.link(Endpoint(a[0], a[1], 1), Endpoint(b[0], b[1], 1))

            if all(first[2] == last[2] for first, last, _n in ends):
                hit = max(
                    timing.allreduce_time(link(first, last), full / first[2], 2, 1, 1.0)
                    for first, last, _n in ends
                )
            else:
                kinds = sorted({(e[0], e[1]) for first, last, _n in ends for e in (first, last)})
                ranks = sum(n * (first[2] + last[2]) for first, last, n in ends)
                hit = max(
                    timing.allreduce_time(link(a, b), full, ranks, 1, 1.0)
                    for k, a in enumerate(kinds)
                    for b in kinds[k:]
                )
            self.cache.step_sync[key] = hit
        return hit

    def usd_per_s(self, gpu_type: str, zone: str, gpus: int = 1) -> float:
        """$/s of ``gpus`` GPUs of a type in a zone (the price catalog, cached until it
        changes)."""
        cache = self.cache.price
        hit = cache.get((gpu_type, zone))
        if hit is None:
            hit = cache[(gpu_type, zone)] = usd_per_second(gpu_type, zone, 1)
        return gpus * hit

    # ---- what compose reads per replica ----------------------------------------------------
    def replica_info(self, job: Job, stage: Stage, i: int, p: int, replica: Replica) -> ReplicaInfo:
        """Time, peak memory and $/s of ``replica`` in ``stage`` at position i of p; checks
        the replica can run the job (TP degree, dtype) the first time it is seen."""
        r, first, last, d = replica, stage.first_layer, stage.last_layer, len(stage.replicas)
        # Under ZeRO the replica's time depends on its stage's ring (the shard traffic), not
        # only on how many replicas the stage has.
        ring = self.cache.stage_id(stage) if job.options.shards_optimizer else d
        key = (job.cache_id, first, last, i, p, ring, self.cache.replica_id(r))
        hit = self.cache.replica_info.get(key)
        if hit is None:
            t, peak, capacity = self._replica_compute(job, stage, i, p, r, ring)
            usd = self.usd_per_s(r.gpu_type, r.zone, r.tp)
            hit = self.cache.replica_info[key] = ReplicaInfo(t, peak, capacity, usd)
        return hit

    def _replica_compute(self, job: Job, stage: Stage, i: int, p: int, r: Replica, ring):
        """(StageTime, peak bytes, capacity) of a replica, whatever its zone: replicas that
        differ only by zone (the planner's usual case) compute them once."""
        first, last = stage.first_layer, stage.last_layer
        key = (job.cache_id, first, last, i, p, ring, self.cache.compute_id(r))
        hit = self.cache.replica_compute.get(key)
        if hit is None:
            self._check_replica(job, stage, i, p, r)
            s = StageSlice.of(stage, r)
            peak, capacity = self._peak(job, s, i, p, r.num_microbatches, len(stage.replicas))
            t = self._sharded_time(job, stage, self._stage_time(job, s), r)
            expert = self._expert_comm_s(job, first, last, r)
            context = self._context_comm_s(job, first, last, r)
            if expert or context:  # (0 in stage_time; _replace costs microseconds)
                t = t._replace(expert_comm_s=expert, context_comm_s=context)
            hit = self.cache.replica_compute[key] = (t, peak, capacity)
        return hit

    def _sharded_time(self, job: Job, stage: Stage, t: StageTime, r: Replica) -> StageTime:
        """A replica's time under ZeRO: each rank steps only its shard of the optimizer
        states; ZeRO-3 / FSDP traffic runs layer by layer behind compute and what is not
        hidden is exposed (``shard_comm_s``, ``_exposed_shard_comm``)."""
        if not job.options.shards_optimizer:
            return t
        r0 = stage.replicas[0]
        lead = (r0.gpu_type, r0.tp)
        return self.sharded_time(job, StageSlice.of(stage, r), t, self._ring_kinds(stage), lead)

    def _ring_kinds(self, stage: Stage):
        sig = self.cache.stage_id(stage)
        kinds = self.cache.ring_kinds.get(sig)
        if kinds is None:
            kinds = self.cache.ring_kinds[sig] = timing.ring_kinds(stage.replicas)
        return kinds

    def sharded_time(
        self, job: Job, s: StageSlice, t: StageTime, kinds, lead: tuple[str, int]
    ) -> StageTime:
        """``_sharded_time`` of a replica computing slice ``s`` in a stage whose replicas form
        the ring ``kinds`` (``timing.ring_kinds`` runs) and whose first replica is ``lead`` =
        (GPU type, TP): the planner scores candidates with it without building stages."""
        if not job.options.shards_optimizer:
            return t
        replicas = sum(count for _, count in kinds)
        group = self.shard_group(job, s.gpu_type, s.tp, replicas)
        exposed = 0.0
        if job.options.shards_parameters and replicas > 1:
            exposed = self._exposed_shard_comm(job, s, t, kinds, lead)
        optimizer = t.optimizer_s / group
        ep = job.options.expert_parallel
        if ep > 1:
            # The routed experts a rank holds are held by group / ep ranks only (Megatron-Core's
            # expert data-parallel group), so ZeRO shards their states ep times less than the
            # rest (as ``_sharded`` does their bytes); the step is memory bound, its share of
            # the experts is their share of the held parameters.
            model = job.model
            experts = experts_held(model, s.first, s.last, s.tp, ep)
            held = sum(model.params(i, s.tp) for i in range(s.first, s.last + 1))
            held -= experts_held_elsewhere(model, s.first, s.last, s.tp, ep)
            if experts and held:
                share = experts / held
                optimizer = t.optimizer_s * ((1 - share) / group + share / max(1, group // ep))
        return t._replace(optimizer_s=optimizer, shard_comm_s=exposed)

    def _expert_comm_s(self, job: Job, first: int, last: int, r: Replica) -> float:
        """Expert-parallel all-to-alls per microbatch of a replica (``moe.py``): its expert
        group's ranks on one node talk over NVLink, the others over the GPU's inter-node link
        in the replica's zone."""
        ep = job.options.expert_parallel
        if ep == 1:
            return 0.0
        gpu = get_gpu(r.gpu_type)
        # NVLink joins the group's ranks of one domain: a cluster's may be smaller than the
        # catalog's node (4 A100 per node), beyond it the all-to-all crosses the NICs.
        local = max(1, self.network.gpus_per_nvlink_domain(gpu) // r.tp)
        intra = self.network.intra_node(gpu.name, min(ep, local) * r.tp)
        end = Endpoint(r.zone, r.gpu_type, 1)
        inter = self.network.link(end, end)
        e, seq = dtype_bytes(job.dtype), job.local_sequence_length
        links = (local, intra, inter)
        return expert_comm_per_microbatch(
            job.model, first, last, r.microbatch_size, seq, r.tp, e, ep, links
        )

    def _context_comm_s(self, job: Job, first: int, last: int, r: Replica) -> float:
        """Exposed ring KV exchange per microbatch of a context-parallel replica
        (``context_parallel.kv_exchange_exposed``): over NVLink when its CP group's
        tp x cp GPUs fit in an NVLink domain (a node, or the --fabric cluster's domain), else over
        the GPU's inter-node link in its zone."""
        cp = job.options.context_parallel
        if cp == 1:
            return 0.0
        gpu = get_gpu(r.gpu_type)
        if r.tp * cp <= self.network.gpus_per_nvlink_domain(gpu):  # the cluster's, if smaller
            link = self.network.intra_node(gpu.name, r.tp * cp)
        else:
            end = Endpoint(r.zone, r.gpu_type, 1)
            link = self.network.link(end, end)
        blocks = max(0, min(last, job.model.num_layers) - max(first, 1) + 1)
        e = dtype_bytes(job.dtype)
        core = attention_flop_s(gpu, job.dtype)
        return kv_exchange_exposed(
            job.model, blocks, r.microbatch_size, job.sequence_length, r.tp, cp, e, link, core
        )

    def _exposed_shard_comm(
        self, job: Job, s: StageSlice, t: StageTime, kinds, lead: tuple[str, int]
    ) -> float:
        """Seconds per microbatch of ZeRO-3 / FSDP traffic not hidden behind compute, layer
        by layer as FSDP runs it (one unit per layer, prefetch of one unit ahead): forward
        gathers layer i + 1's parameters while layer i computes, so the first gather is
        exposed and every later one only beyond its predecessor's forward; backward re-gathers
        layer i - 1 and reduce-scatters layer i + 1's gradients while layer i computes, and the
        last reduce-scatter is exposed. A gather (reduce-scatter) is half a ring all-reduce of
        the same bytes (``_layer_collective_s``). Per-layer compute is the profile's, with the
        stage's recomputation spread over its layers by forward time. Memoized by its
        arguments (the planner asks the same stage slice for many allocations)."""
        key = (job.cache_id, s, t, kinds, lead)
        hit = self.cache.shard_exposed.get(key)
        if hit is None:
            hit = self.cache.shard_exposed[key] = self._exposed_shard_comm_uncached(
                job, s, t, kinds, lead
            )
        return hit

    def _exposed_shard_comm_uncached(
        self, job: Job, s: StageSlice, t: StageTime, kinds, lead: tuple[str, int]
    ) -> float:
        first, last = s.first, s.last
        table = self.profiles.table(
            job.model, get_gpu(s.gpu_type), job.dtype, s.mbs, s.tp, job.sequence_length,
            job.optimizer,
        )  # fmt: skip
        layers = range(first, last + 1)
        fwd = [table.span(table.forward, i, i) for i in layers]
        share = t.recompute_s / t.forward_s if t.forward_s > 0 else 0.0
        bwd = [
            table.span(table.backward, i, i) + share * f for i, f in zip(layers, fwd, strict=True)
        ]
        gather = self._layer_collectives(job, kinds, lead, "params")[first : last + 1]
        scatter = self._layer_collectives(job, kinds, lead, "grads")[first : last + 1]
        exposed = gather[0] + scatter[0]
        for k in range(len(fwd) - 1):
            exposed += max(0.0, gather[k + 1] - fwd[k])
        for k in range(len(bwd)):  # backward runs k = last .. first
            overlapped = (gather[k - 1] if k > 0 else 0.0) + (
                scatter[k + 1] if k + 1 < len(bwd) else 0.0
            )
            exposed += max(0.0, overlapped - bwd[k])
        return exposed

    def _layer_collectives(self, job: Job, kinds, lead, what: str) -> list[float]:
        """``_ring_layer_collective_s`` of every layer id over one ring, each distinct layer
        size computed once (memoized: the planner asks many stage ranges over one ring)."""
        key = (job.cache_id, kinds, lead, what)
        hit = self.cache.shard_layers.get(key)
        if hit is None:
            sizes = self.cache.layer_bytes.get((job.cache_id, what))
            if sizes is None:
                sizes = [self._layer_bytes(job, i, what) for i in range(job.model.num_layer_ids)]
                self.cache.layer_bytes[(job.cache_id, what)] = sizes
            by_size: dict[float, float] = {}
            hit = []
            for i, nbytes in enumerate(sizes):
                seconds = by_size.get(nbytes)
                if seconds is None:
                    seconds = by_size[nbytes] = self._bytes_collective_s(
                        job, kinds, lead, i, nbytes, what
                    )
                hit.append(seconds)
            self.cache.shard_layers[key] = hit
        return hit

    def _layer_collective_s(self, job: Job, stage: Stage, layer: int, what: str) -> float:
        """``_ring_layer_collective_s`` over ``stage``'s ring."""
        r0 = stage.replicas[0]
        kinds, lead = self._ring_kinds(stage), (r0.gpu_type, r0.tp)
        return self._ring_layer_collective_s(job, kinds, lead, layer, what)

    def _layer_bytes(self, job: Job, layer: int, what: str) -> float:
        """Unsharded bytes of one layer's parameters (``what`` = "params") or gradients."""
        if what == "params":
            return dtype_bytes(job.dtype) * self.unsharded_params(job, layer, layer)
        return self.grad_bytes(job, layer, layer)

    def _ring_layer_collective_s(self, job: Job, kinds, lead, layer: int, what: str) -> float:
        """One layer's all-gather of its parameters or reduce-scatter of its gradients over the
        stage's shard group: half a ring all-reduce of the unsharded bytes (volume
        (n - 1) / n of them, n - 1 steps); hybrid: inside the node over NVLink / PCIe."""
        nbytes = self._layer_bytes(job, layer, what)
        return self._bytes_collective_s(job, kinds, lead, layer, nbytes, what)

    def _bytes_collective_s(self, job: Job, kinds, lead, layer: int, nbytes, what: str) -> float:
        """``_ring_layer_collective_s`` of a layer of ``nbytes`` (layers of one size share
        it)."""
        if nbytes == 0:
            return 0.0
        key = (job.cache_id, nbytes, what, kinds, lead)
        hit = self.cache.shard_collective.get(key)
        if hit is None:
            hit = self._collective_s(job, kinds, lead, layer, nbytes)
            self.cache.shard_collective[key] = hit
        return hit

    def _collective_s(self, job: Job, kinds, lead, layer: int, nbytes: float) -> float:
        if job.options.zero == "hybrid":
            lead_gpu, lead_tp = lead
            replicas = sum(count for _, count in kinds)
            group = self.shard_group(job, lead_gpu, lead_tp, replicas)
            gpu = get_gpu(lead_gpu)
            link = self.network.intra_node(gpu.name, gpu.gpus_per_node)
            efficiency = timing.intra_bus_efficiency(gpu.name)
            return timing.allreduce_time(link, nbytes / lead_tp, group, 1, efficiency) / 2
        return self.ring_time(job, layer, layer, kinds, nbytes)[0] / 2

    def _check_replica(self, job: Job, stage: Stage, i: int, p: int, r: Replica) -> None:
        checked = self.cache.replica_ok
        key = (job.cache_id, r.gpu_type, r.tp, p > 1)
        if key in checked:
            return
        problem = job.model.tp_problem(r.tp)
        gpu = get_gpu(r.gpu_type)
        if problem is None:
            problem = gpu.dtype_problem(job.dtype) or self._node_problem(gpu, r.tp)
        if problem is not None:
            j = stage.replicas.index(r)
            raise PlanError(problem, field=f"plan.stages[{i}].replicas[{j}]")
        # names the option it refuses
        check_replica(job.options, gpu, job.dtype, r.tp, p, job.local_sequence_length)
        checked.add(key)

    def _node_problem(self, gpu, tp: int) -> str | None:
        """Why a TP group of ``tp`` GPUs does not fit in one node of the cluster given, or
        None. ``Replica`` checks the catalog's node; a cluster file with smaller nodes (4 A100
        per node) would otherwise have its TP all-reduces timed on one node's NVLink while
        the group spans two nodes."""
        per_node = self.network.gpus_per_node(gpu)
        if tp <= per_node:
            return None
        return (
            f"TP {tp} exceeds the {per_node} GPUs of a node of the cluster given "
            f"({self.network.cluster.source}); TP stays within a node: use tp <= {per_node}"
        )

    def p2p_known(self, job: Job) -> dict:
        """``job``'s ``p2p`` results so far, by ``compose.p2p_key``."""
        table = self.cache.p2p.get(job.cache_id)
        if table is None:
            table = self.cache.p2p[job.cache_id] = {}
        return table

    def summaries(self) -> dict:
        """The table ``compose`` memoizes stage summaries in."""
        return self.cache.stage_summary

    def ids(self) -> ComponentCache:
        """What assigns replicas and stages the ids ``compose``'s keys use."""
        return self.cache


def _node_width(gpu_type: str) -> int:
    """The most GPUs (TP pairs or NICs) one link of a node of ``gpu_type`` spans."""
    gpu = get_gpu(gpu_type)
    return max(gpu.gpus_per_node, timing.nics_per_node(gpu))
