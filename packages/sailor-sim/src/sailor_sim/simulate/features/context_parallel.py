"""Context parallelism (CP; ring attention): the sequence of each sample split over ``cp``
data-parallel replicas of a stage (``ExecutionOptions.context_parallel``).

Liu et al., "Ring Attention with Blockwise Transformers" (2023, arXiv 2310.01889), Sec. 3;
Megatron-Core ``context_parallel_size`` (Transformer Engine's ring attention with the sequence
cut into 2 cp chunks, each rank taking two, so causal work is balanced).

- Replicas: ``cp`` consecutive replicas of a stage form a CP group and work on the same
  samples, each on seq / cp of their tokens; a plan's replicas therefore process
  ``Job.sample_slots`` = global batch x cp samples per iteration. The group's gradients are
  reduced with the data-parallel ones (Megatron reduces over dp x cp), so the stage's ring is
  unchanged. Replicas of a group must be alike (they run attention in lock step).
- Compute: every per-token term of a layer scales with seq / cp tokens (the profile or the
  analytic table at the local length); each rank's queries still attend to all seq keys, so
  the attention core costs core(seq) / cp, not core(seq / cp): ``attention_extra_flops``.
- Communication: per block and microbatch, cp - 1 ring steps each pass a K and V chunk of
  seq / cp tokens to the next rank (forward), and K, V plus their gradients in backward;
  each step overlaps the attention of the chunk pair it holds, the excess is exposed
  (``kv_exchange_exposed``).
- Memory: activations are those of seq / cp tokens (flash attention keeps no scores; CP
  without flash is refused).
"""

from __future__ import annotations

from ...errors import PlanError, ValidationError


def sequence_splits(cp: int, sequence_length: int) -> bool:
    """Whether the sequence splits into 2 cp equal chunks (load-balanced causal ring: each
    rank takes one chunk from each end)."""
    return cp == 1 or sequence_length % (2 * cp) == 0


def check_context_parallel(cp: int, sequence_length: int) -> None:
    """The sequence must split into 2 cp equal chunks (``sequence_splits``)."""
    if not sequence_splits(cp, sequence_length):
        raise ValidationError(
            f"sequence length {sequence_length} does not split into 2 x {cp} equal chunks; "
            f"use a sequence length divisible by {2 * cp} or another context_parallel",
            field="options.context_parallel",
        )


def check_plan_context_parallel(cp: int, plan) -> None:
    """Each stage's replicas form groups of ``cp`` alike consecutive replicas."""
    if cp == 1:
        return
    bad = plan.unlike_group(cp, lambda r: (r.gpu_type, r.tp, r.microbatch_size, r.num_microbatches))
    if bad is None:
        return
    i, start = bad
    if start is None:
        raise PlanError(
            f"context_parallel {cp} does not divide the {len(plan.stages[i].replicas)} "
            f"replicas of stage {i}; use a data-parallel degree that is a multiple of {cp}",
            field="options.context_parallel",
        )
    raise PlanError(
        f"replicas {start}..{start + cp - 1} of stage {i} form a context-parallel group and "
        "must have the same GPU type, TP and microbatches",
        field="options.context_parallel",
    )


def attention_extra_flops(model, mbs: int, seq: int, tp: int, cp: int) -> float:
    """Forward attention-core FLOPs per block one CP rank does beyond a model of seq / cp
    tokens: its seq / cp queries attend to all seq keys, causally (the load-balanced chunks
    give every rank 1 / cp of the causal work, ``ModelSpec.causal_attention_flops``), where
    the model of seq / cp tokens is timed with its own causal attention."""
    if cp == 1:
        return 0.0
    return model.causal_attention_flops(mbs, seq, tp) / cp - model.causal_attention_flops(
        mbs, seq // cp, tp
    )


def kv_chunk_bytes(model, mbs: int, seq: int, tp: int, cp: int, e: int) -> float:
    """Bytes of the K and V chunk one rank passes per ring step (its seq / cp tokens, the TP
    rank's heads)."""
    if model.mla:  # MLA exchanges the per-head keys and values it expands from the latent
        kv = model.num_heads * (model.mla.qk_head_dim + model.mla.v_head_dim)
    else:
        kv = 2 * model.kv_size
    return mbs * seq / cp * kv / tp * e


def kv_exchange_exposed(
    model, layers: int, mbs: int, seq: int, tp: int, cp: int, e: int, link, core_flop_s: float
) -> float:
    """Exposed seconds per microbatch of the ring's KV exchange over ``layers`` blocks:
    (cp - 1) steps forward, each max(0, transfer - the chunk pair's attention), and backward
    with twice the bytes (K, V and their gradients) against twice the attention work.
    ``core_flop_s``: the attention core's achieved FLOP/s."""
    if cp == 1 or layers == 0:
        return 0.0
    nbytes = kv_chunk_bytes(model, mbs, seq, tp, cp, e)
    step_flops = model.causal_attention_flops(mbs, seq, tp) / cp / cp  # one chunk pair's
    transfer = link.latency_s + nbytes / link.bandwidth(nbytes)
    compute = step_flops / core_flop_s
    forward = max(0.0, transfer - compute)
    backward = max(0.0, 2 * transfer - 2 * compute)
    return layers * (cp - 1) * (forward + backward)
