"""The simulator's memory components: peak bytes of one GPU of a replica, as named terms.

``MemoryComponents`` is the memory half of ``Simulator`` (which inherits it, so its methods
share the simulator's profiles, network and ``ComponentCache``):

- ``layer_table(job, gpu, mbs, tp)``: the profile's per-layer table with the activations the
  job's execution options stash (``options.stash_bytes``);
- ``replica_memory(...)``: ``memory.memory_terms`` of one GPU at stage i of p (sum = peak);
- ``replica_peak(...)``: the same sum without building the dict (the planner's and
  ``compose``'s verdict), from the position-independent ``RangeMemory`` cached per range.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from ..catalog.gpus import get_gpu
from ..model.moe import experts_held, experts_held_elsewhere, held_layer_params
from ..spec.job import Job
from ..spec.options import (
    ExecutionOptions,
    activation_factor,
    profiled_with_flash,
    recompute_transient,
    stash_bytes,
    uses_flash,
)
from ..spec.plan import StageSlice
from .features.fp8 import FP8_WEIGHT_COPIES, fp8_weight_copy_bytes
from .features.sharding import hybrid_group
from .memory import (
    GRAD_BYTES,
    FrameworkOverhead,
    framework_overhead,
    gathered_weight_bytes,
    in_flight,
    memory_terms,
    peak_bytes,
    position_terms,
    sharding,
    static_bytes,
    transient_bytes,
    weight_cast_bytes,
)

_DEFAULT = ExecutionOptions()


class RangeMemory(NamedTuple):
    """Position-independent memory of a layer range on one replica."""

    params: int
    activation: int
    """Stashed bytes per microbatch (under the job's options)."""
    transient: int
    act_out: int
    """The (b, s, h) tensor a p2p buffer holds."""
    overhead: FrameworkOverhead
    capacity: int
    layers: tuple[int, int, int]
    """(first, last, tp): where ZeRO-3's largest gathered layer is looked up."""
    grad_bytes: int
    static: int
    """weights + gradients + optimizer states, unsharded (+ ``fp8_weights``)."""
    fp8_weights: int = 0
    """Cached FP8 copies of the linear weights (``fp8.fp8_weight_copy_bytes``)."""
    expert_params: int = 0
    """Routed-expert parameters among ``params`` (``moe.experts_held``; 0 without EP > 1)."""


def _rescaled(measured: int, base: int, now: int, whole: bool) -> int:
    """A measured per-layer stash under other options. Options that add or drop whole tensors
    (flash attention's and selective recomputation's (a, s, s) scores) change it by their
    bytes: measured + (now - base); a measured stash holds tensors the analytic count does
    not (a framework's unfused norms, expanded GQA keys), which those options leave alone.
    Options that keep a fraction of everything (full recomputation: the block input only;
    SP: 1/tp of the replicated part) scale it: measured x now / base."""
    if not base:
        return measured
    if whole:
        return measured * now // base
    return max(0, measured + now - base)


class MemoryComponents:
    """Memory of replicas; mixed into ``Simulator`` (needs ``profiles``, ``cache``,
    ``refresh``)."""

    def layer_table(self, job: Job, gpu_type: str, mbs: int, tp: int):
        """The profile's ``LayerTable`` with each layer's stashed activations scaled to the
        job's options (``options.stash_bytes`` / the stash the profile was taken with), so a
        measured profile keeps its measured ratio between layers, less the 16-bit weight
        copies a measured mixed-precision stash holds (``memory.weight_cast_bytes``), and the
        parameters one GPU holds under expert parallelism (1/ep of the routed experts)."""
        cache = self.cache.layer_table
        key = (job.cache_id, gpu_type, mbs, tp)
        hit = cache.get(key)
        if hit is None:
            model, gpu, dtype = job.model, get_gpu(gpu_type), job.dtype
            seq = job.local_sequence_length  # a context-parallel rank's share of each sample
            t = self.profiles.table(model, gpu, dtype, mbs, tp, seq, job.optimizer)
            flash = uses_flash(job.options, gpu, dtype)
            taken_with = profiled_with_flash(t.entry)
            casts = t.entry.measured and dtype != "fp32"  # autocast's weight copies in it
            if job.options == _DEFAULT and flash == taken_with and not casts:
                hit = cache[key] = t
                return hit
            acts, total = [0], 0
            whole = job.options.recompute == "full" or job.options.sequence_parallel
            for i in range(model.num_layer_ids):
                measured = t.activation[i + 1] - t.activation[i]
                if casts:  # counted once, as the 16-bit weights term
                    measured = max(0, measured - weight_cast_bytes(model, i, tp, dtype))
                base = model.activation_stash_bytes(i, mbs, seq, dtype, tp, taken_with)
                now = stash_bytes(model, i, mbs, seq, dtype, tp, job.options, flash)
                total += _rescaled(measured, base, now, whole)
                acts.append(total)
            hit = cache[key] = dataclasses.replace(
                t, activation=tuple(acts), params=self._held_params(job, t.params, tp)
            )
        return hit

    @staticmethod
    def _held_params(job: Job, prefix: tuple, tp: int) -> tuple:
        """Parameter prefix sums with the experts other ranks of an expert group hold taken
        out (``moe.experts_held_elsewhere``); unchanged without expert parallelism."""
        ep = job.options.expert_parallel
        if ep == 1:
            return prefix
        held, total = [0], 0
        for i in range(job.model.num_layer_ids):
            total += prefix[i + 1] - prefix[i] - experts_held_elsewhere(job.model, i, i, tp, ep)
            held.append(total)
        return tuple(held)

    def fp8_copy_prefix(self, job: Job, tp: int) -> tuple[int, ...]:
        """Prefix sums over layer ids of the cached FP8 weight copies on one GPU of a TP group
        (``fp8.fp8_weight_copy_bytes`` of the weights it holds); all 0 without FP8."""
        key = (job.cache_id, "fp8", tp)
        hit = self.cache.layer_table.get(key)
        if hit is None:
            model, ep, total, prefix = job.model, job.options.expert_parallel, 0, [0]
            for i in range(model.num_layer_ids):
                if job.options.fp8 != "none":
                    total += fp8_weight_copy_bytes(model, i, i, tp)
                    total -= FP8_WEIGHT_COPIES * experts_held_elsewhere(model, i, i, tp, ep)
                prefix.append(total)
            hit = self.cache.layer_table[key] = tuple(prefix)
        return hit

    def replica_memory(
        self, job: Job, s: StageSlice, stage_index: int, num_stages: int,
        num_microbatches: int, dp: int = 1,
    ) -> dict[str, int]:  # fmt: skip
        """Named peak-memory terms of one GPU of a replica computing ``s`` at stage
        ``stage_index`` of ``num_stages`` (sum = peak); ``dp`` = replicas of the stage (the
        ZeRO shard group)."""
        self.refresh()
        r = self._range_memory(job, s)
        i, p = stage_index, num_stages
        shards, gathered, experts = self._sharded(job, r, s.gpu_type, s.tp, dp)
        buffer, communicators = position_terms(r.act_out, s.tp, dp, i, p)
        extra = {"fp8_weight_copies": r.fp8_weights, "gathered_weights": gathered}
        return memory_terms(
            gpu=get_gpu(s.gpu_type),
            dtype=job.dtype,
            optimizer=job.optimizer,
            params=r.params,
            activation_per_microbatch=self._activation(job, r, i, p, num_microbatches),
            in_flight_microbatches=in_flight(i, p, num_microbatches),
            transient=r.transient,
            p2p_buffer=buffer,
            communicators=communicators,
            grad_bytes=r.grad_bytes,
            shards=shards,
            extra={k: v for k, v in extra.items() if v} or None,
            experts=experts,
        )

    def replica_peak(
        self, job: Job, s: StageSlice, stage_index: int, num_stages: int,
        num_microbatches: int, dp: int = 1,
    ) -> tuple[int, int]:  # fmt: skip
        """(peak bytes, capacity) of one GPU of a replica: ``sum(replica_memory(...))``
        without building the dict, O(1) after the first call per layer range."""
        self.refresh()
        return self._peak(job, s, stage_index, num_stages, num_microbatches, dp)

    def _peak(self, job: Job, s: StageSlice, i, p, m, dp) -> tuple[int, int]:
        r = self._range_memory(job, s)
        static = r.static
        if job.options.zero != "none":
            shards, gathered, experts = self._sharded(job, r, s.gpu_type, s.tp, dp)
            static = static_bytes(r.params, job.dtype, job.optimizer, r.grad_bytes, shards, experts)
            static += r.fp8_weights + gathered
        buffer, communicators = position_terms(r.act_out, s.tp, dp, i, p)
        act = self._activation(job, r, i, p, m)
        peak = peak_bytes(
            r.overhead, static, act, in_flight(i, p, m), r.transient, buffer, communicators
        )
        return peak, r.capacity

    def _range_memory(self, job: Job, s: StageSlice) -> RangeMemory:
        cache = self.cache.range_memory
        key = (job.cache_id, s)
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = self._range_memory_uncached(job, s)
        return hit

    def _range_memory_uncached(self, job: Job, s: StageSlice) -> RangeMemory:
        first, last, tp, mbs = s.first, s.last, s.tp, s.mbs
        model, gpu, dtype = job.model, get_gpu(s.gpu_type), job.dtype
        seq = job.local_sequence_length  # a context-parallel rank's share of each sample
        t = self.layer_table(job, s.gpu_type, mbs, tp)
        transient = transient_bytes(model, last, mbs, seq, dtype, tp, job.options.fused_loss)
        if job.options.recompute == "full" and first <= model.num_layers and last >= 1:
            flash = uses_flash(job.options, gpu, dtype)
            transient += recompute_transient(model, last, mbs, seq, dtype, tp, flash)
        params = t.span(t.params, first, last)  # held: 1/ep of the experts (layer_table)
        params -= model.shared_head_params(first, last, tp)  # a tied matrix held once
        grad = GRAD_BYTES[dtype] if job.options.grad_dtype == "fp32" else 2
        fp8_prefix = self.fp8_copy_prefix(job, tp)
        fp8_weights = fp8_prefix[last + 1] - fp8_prefix[first]
        return RangeMemory(
            params,
            t.span(t.activation, first, last),
            transient,
            model.activation_out_bytes(0, mbs, seq, dtype),
            framework_overhead(gpu),
            gpu.memory_bytes,
            (first, last, tp),
            grad,
            static_bytes(params, dtype, job.optimizer, grad) + fp8_weights,
            fp8_weights,
            experts_held(model, first, last, tp, job.options.expert_parallel),
        )

    def _sharded(self, job: Job, r: RangeMemory, gpu_type, tp, dp) -> tuple[tuple, int, tuple]:
        """(weights, gradients, optimizer) divisors under ZeRO, the bytes of parameters
        gathered from their shards (``memory.gathered_weight_bytes``), and (routed-expert
        parameters, their divisors): the ranks holding the same experts are the shard group
        / ep (Mixtral-8x7B on 8 H100s at EP 8 and ZeRO-1 has one rank per expert, so its
        experts' optimizer states are not sharded at all)."""
        zero = job.options.zero
        group = self.shard_group(job, gpu_type, tp, dp)
        shards = sharding(zero, group)
        ep = job.options.expert_parallel
        experts = (r.expert_params, sharding(zero, max(1, group // ep)))
        largest = 0
        if job.options.shards_parameters:
            key = (job.cache_id, *r.layers)
            largest = self.cache.largest_layer.get(key)
            if largest is None:
                first, last, tp = r.layers
                ep = job.options.expert_parallel  # a layer gathers its expert group's experts
                largest = max(
                    held_layer_params(job.model, i, tp, ep) for i in range(first, last + 1)
                )
                self.cache.largest_layer[key] = largest
        return shards, gathered_weight_bytes(zero, job.dtype, r.params, largest), experts

    @staticmethod
    def _activation(job: Job, r: RangeMemory, i: int, p: int, m: int) -> int:
        """Stash per microbatch in flight; interleaving holds more chunks on every stage
        (``options.activation_factor``, Megatron-LM's warm-up count)."""
        if job.options.virtual_stages == 1:
            return r.activation
        return int(r.activation * activation_factor(job.options, i, p, m))

    def shard_group(self, job: Job, gpu_type: str, tp: int, dp: int) -> int:
        """Data-parallel ranks a ZeRO shard spans: all ``dp`` replicas of the stage, or under
        'hybrid' those within one node (gpus_per_node / tp)."""
        if job.options.zero == "none":
            return 1
        if job.options.zero == "hybrid":
            return hybrid_group(gpu_type, tp, dp)
        return dp
