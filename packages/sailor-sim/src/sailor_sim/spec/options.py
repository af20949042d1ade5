"""Execution options: how a job is run, beyond the plan's parallel degrees.

Each option has a memory term and a time term in the simulator (``option_terms``) and a rule
for combinations it refuses (``check_options``). Gradient accumulation is not an option: it is
the plan's ``Replica.num_microbatches`` (``Plan.gradient_accumulation_steps``).

- ``grad_dtype``: precision policy. ``Job.dtype`` is the compute dtype; bf16/fp16 training
  keeps fp32 master weights (Micikevicius et al. 2018, "Mixed Precision Training", Sec. 3.1)
  and fp32 main gradients by default (Megatron-LM ``accumulate_allreduce_grads_in_fp32``);
  ``grad_dtype='bf16'`` keeps and reduces them in bf16 (half the gradient bytes and traffic).
- ``flash_attention``: Dao et al. 2022 (arXiv 2205.14135) Sec. 3.1: the (a, s, s) scores are
  never stored (memory: only the log-sum-exp per row), and recomputed in backward (time: one
  more QK^T per block). Default: on for bf16/fp16 on GPUs with bf16 tensor cores (Ampere and
  later, what FlashAttention-2 supports); refused on V100/T4/Turing and in fp32.
- ``recompute``: activation recomputation, Korthikanti et al. 2022 (arXiv 2205.05198).
  'selective' (Sec. 5) recomputes the attention core (memory: no s^2 terms; time: the attention
  core's forward FLOPs again); 'full' (Sec. 2) stashes only each block's input (time: one more
  forward of the blocks). 'selective_op' is torchtitan's op-level selective checkpointing
  (``activation_checkpoint.selective_ac_option = "op"``, torchtitan
  ``models/llama3/parallelize_llama.py`` ``_get_custom_policy``): a block keeps its input, the
  attention kernel's output and every other matmul output (the 1st, 3rd, ... of q, k, v, o,
  gate, up, down) and recomputes the rest (memory: ``op_sac_stash``; time: the FLOPs of the
  even-numbered matmuls again).
- ``zero``: optimizer/gradient/parameter sharding over the data-parallel replicas of a stage
  (Rajbhandari et al. 2020, ZeRO, Sec. 5): 'zero1' shards optimizer states (and fp32 master
  weights), 'zero2' also gradients and, between steps, parameters (as FSDP2 runs it without
  resharding after forward, FSDP SHARD_GRAD_OP: the gathered parameters stay from forward to
  backward), 'zero3' also parameters (= FSDP FULL_SHARD), 'hybrid' is
  ZeRO-3 within a node and replication across nodes (FSDP HYBRID_SHARD). Time: reduce-scatter
  of gradients + all-gather of parameters replaces the all-reduce (same ring volume, Sec. 7);
  ZeRO-3 all-gathers every layer's parameters in forward and backward of every microbatch,
  overlapped with compute by prefetch, exposed beyond it. Refused with PP > 1 (DeepSpeed and
  FSDP do not pipeline sharded parameters).
- ``sequence_parallel``: Korthikanti et al. 2022 Sec. 4.2.2: the norm and dropout regions hold
  1/tp of their activations; the TP all-reduces become reduce-scatter + all-gather (same
  volume, no time change). Needs TP > 1 in every replica.
- ``p2p_scatter_gather``: Narayanan et al. 2021 Sec. 4.1: with TP, each TP rank sends 1/tp
  of a stage-boundary activation and the receiver all-gathers it over its intra-node link
  (time: the inter-node part / tp; memory: none). Off for frameworks that send it whole.
- ``fused_loss``: how the framework's cross-entropy holds the logits (memory only: the head's
  ``memory.transient_bytes``). True (Megatron-LM's vocab-parallel cross-entropy, this
  runtime): the fp32 softmax is built in one buffer, stashed, and turned into the gradient in
  place, so beside it only the logits in the training dtype live. False (eager
  ``F.cross_entropy`` on the upcast logits: torchtitan ``components/loss.py``, Hugging Face
  ``loss_utils.py``): backward also holds the log-softmax's gradient and its input's, two more
  fp32 copies (8 B per logit; LLaMA-3-8B at 2 x 8192 tokens: 16 GiB).
- ``fp8``: the transformer blocks' GEMMs in FP8 with per-tensor 'delayed' or 'current'
  scaling (Transformer Engine recipes) inside bf16/fp16 training; terms and sources in
  ``fp8.py``. Refused in fp32, on GPUs without FP8 tensor cores, and with sharded parameters.
- ``expert_parallel``: the experts of each MoE layer split over this many data-parallel
  replicas of a stage, with all-to-all dispatch and combine (``moe.py``). Needs a MoE model
  and a replica count per stage that it divides.
- ``context_parallel``: ring attention over groups of this many data-parallel replicas of a
  stage, each taking seq / cp tokens of the same samples (``context_parallel.py``). Needs
  flash attention and a sequence length divisible by 2 cp.
- ``virtual_stages``: interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2.2): each GPU holds v
  model chunks: the fill/drain bubble divides by v, the p2p traffic multiplies by v. Runs on
  plans with >= 2 stages, microbatch counts that are multiples of the stage count and at least
  one layer per chunk (``interleave.py``, the one statement of that rule; ``check_replica`` and
  ``Simulator.check`` refuse the rest).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..dtypes import dtype_bytes
from ..errors import ValidationError
from ..simulate.features.fp8 import check_fp8, fp8_gpus_problem, fp8_stash
from .interleave import depth_problem

RECOMPUTE = ("none", "selective", "full", "selective_op")
ZERO = ("none", "zero1", "zero2", "zero3", "hybrid")
ZERO_PER_MICROBATCH = ("zero2", "zero3", "hybrid")
"""The stages that shard gradients (and zero3/hybrid parameters): collectives every microbatch
(``simulate.features.sharding``)."""
GRAD_DTYPES = ("fp32", "bf16")
FP8_RECIPES = ("none", "delayed", "current")


@dataclass(frozen=True)
class ExecutionOptions:
    """How the job runs (see the module docstring for each option's terms and sources)."""

    grad_dtype: str = "fp32"
    """Main-gradient dtype: 'fp32' (default) or 'bf16' (only with bf16/fp16 training)."""
    flash_attention: bool | None = None
    """None: on where supported (bf16/fp16 on Ampere or later); True/False: forced."""
    recompute: str = "none"
    """Activation recomputation: 'none', 'selective', 'full' or 'selective_op' (torchtitan's
    op-level policy)."""
    zero: str = "none"
    """Sharding over the stage's data-parallel replicas: 'none', 'zero1', 'zero2', 'zero3',
    'hybrid' (ZeRO-3 within a node)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism with TP (needs TP > 1)."""
    virtual_stages: int = 1
    """Model chunks per GPU under interleaved 1F1B (1 = plain 1F1B)."""
    p2p_scatter_gather: bool = True
    """The framework's pipeline p2p. True (Megatron-LM's default, our runtime): TP ranks split
    a stage-boundary tensor, the receiver all-gathers it, and sends overlap receives (batched
    isend/irecv on full-duplex links). False (DeepSpeed's PipelineEngine, under
    Megatron-DeepSpeed as in the original Sailor's GH200 runs): every TP rank sends the whole
    tensor, with blocking sends and receives one after the other (``p2p_full_duplex``).
    Every CLI takes ``--p2p-scatter-gather / --no-p2p-scatter-gather``; sailor-sim's also
    takes the framework's name, ``--p2p megatron|deepspeed`` (``P2P_STYLES``)."""
    fused_loss: bool = True
    """The framework's cross-entropy. True (Megatron-LM, our runtime): softmax and gradient in
    one fp32 buffer, in place. False (torchtitan, Hugging Face: eager F.cross_entropy on the
    upcast logits): two more fp32 copies of the logits in the head's backward."""
    fp8: str = "none"
    """FP8 GEMMs in the transformer blocks: 'none', 'delayed' or 'current' (per-tensor
    scaling recipe)."""
    expert_parallel: int = 1
    """Data-parallel replicas of a stage that split each MoE layer's experts (1 = none)."""
    context_parallel: int = 1
    """Data-parallel replicas of a stage that split each sample's sequence (ring attention;
    1 = none)."""

    @property
    def p2p_full_duplex(self) -> bool:
        """Whether a boundary's activation and gradient cross at once (``timing.stage_steps``)."""
        return self.p2p_scatter_gather

    def __post_init__(self) -> None:
        _one_of("grad_dtype", self.grad_dtype, GRAD_DTYPES)
        _one_of("fp8", self.fp8, FP8_RECIPES)
        for name in ("expert_parallel", "context_parallel"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(
                    f"must be an integer >= 1, got {value!r}", field=f"options.{name}"
                )
        _one_of("recompute", self.recompute, RECOMPUTE)
        _one_of("zero", self.zero, ZERO)
        if self.flash_attention not in (None, True, False):
            raise ValidationError(
                f"must be true, false or null, got {self.flash_attention!r}",
                field="options.flash_attention",
            )
        for name in ("sequence_parallel", "p2p_scatter_gather", "fused_loss"):
            if not isinstance(getattr(self, name), bool):
                raise ValidationError(
                    f"must be true or false, got {getattr(self, name)!r}",
                    field=f"options.{name}",
                )
        if not isinstance(self.virtual_stages, int) or self.virtual_stages < 1:
            raise ValidationError(
                f"must be an integer >= 1, got {self.virtual_stages!r}",
                field="options.virtual_stages",
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ExecutionOptions:
        if not data:
            return cls()
        if not isinstance(data, Mapping):
            raise ValidationError("must be an object of option names", field="options")
        allowed = set(cls.__dataclass_fields__)
        unknown = set(data) - allowed
        if unknown:
            raise ValidationError(
                f"unknown options {sorted(unknown)}; allowed: {sorted(allowed)}", field="options"
            )
        return cls(**data)

    @property
    def shards_optimizer(self) -> bool:
        return self.zero != "none"

    @property
    def shards_gradients(self) -> bool:
        return self.zero in ZERO_PER_MICROBATCH

    @property
    def uniform_replicas(self) -> bool:
        """Whether every replica of a stage runs collectives every microbatch (sharded
        gradients: ``features.sharding``; expert parallelism's all-to-alls:
        ``moe.check_plan_expert_parallel``), so they all need one TP degree and one
        microbatch count."""
        return self.shards_gradients or self.expert_parallel > 1

    @property
    def shards_parameters(self) -> bool:
        return self.zero in ("zero3", "hybrid")

    def describe(self) -> str:
        """One line of the options that differ from the defaults (for tables)."""
        default = ExecutionOptions()
        diff = [f"{k}={v}" for k, v in self.to_dict().items() if getattr(default, k) != v]
        return ", ".join(diff) or "defaults"


def _one_of(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValidationError(f"{value!r} is not one of {allowed}", field=f"options.{name}")


def flash_supported(gpu, dtype: str) -> bool:
    """FlashAttention-2 runs in fp16/bf16 on GPUs with bf16 tensor cores (sm80+: Ampere, Ada,
    Hopper); not on V100/T4/Turing (no bf16), not in fp32. CPU workers: torch's
    scaled_dot_product_attention runs its fused flash kernel on CPU in any dtype
    (``_scaled_dot_product_flash_attention_for_cpu``, torch >= 2.2), which is what the engine
    calls: no (a, s, s) scores are kept there either."""
    if gpu.platform == "cpu":
        return True
    return dtype in ("bf16", "fp16") and gpu.bf16_flops > 0


def profiled_with_flash(entry) -> bool:
    """Whether a profile entry's numbers already include flash attention: sailor-profiler
    measures the engine's layers, whose attention is torch's SDPA (fused, no score matrix,
    scores recomputed in backward) on CPU and GPU; analytic and imported (Megatron-DeepSpeed,
    math attention) tables do not."""
    return entry.measured


def uses_flash(options: ExecutionOptions, gpu, dtype: str) -> bool:
    """Whether flash attention runs on ``gpu`` (default: where supported)."""
    if options.flash_attention is None:
        return flash_supported(gpu, dtype)
    return options.flash_attention


def check_options(options: ExecutionOptions, dtype: str) -> None:
    """Combinations refused whatever the plan (the plan-dependent ones: ``check_plan``)."""
    if options.grad_dtype == "bf16" and dtype == "fp32":
        raise ValidationError(
            "bf16 gradients need bf16 or fp16 training (dtype is fp32); use grad_dtype='fp32'",
            field="options.grad_dtype",
        )
    if options.virtual_stages > 1 and options.shards_parameters:
        raise ValidationError(
            f"interleaved 1F1B (virtual_stages={options.virtual_stages}) needs pipeline stages "
            f"and {options.zero} refuses them; use zero1/zero2 or virtual_stages=1",
            field="options.virtual_stages",
        )
    if options.flash_attention is True and dtype == "fp32":
        raise ValidationError(
            "flash attention runs in bf16/fp16 only; train in bf16 or set flash_attention=false",
            field="options.flash_attention",
        )
    if options.context_parallel > 1 and options.flash_attention is False:
        raise ValidationError(
            "context parallelism (ring attention) runs on flash attention, which keeps no "
            "(s, s) scores; set flash_attention on or context_parallel=1",
            field="options.context_parallel",
        )
    if options.fp8 != "none" and dtype == "fp32":
        raise ValidationError(
            "fp8 GEMMs run inside bf16/fp16 training (dtype is fp32); use --precision fp8 "
            "(bf16 with FP8 GEMMs) or fp8='none'",
            field="options.fp8",
        )
    if options.fp8 != "none" and options.shards_parameters:
        raise ValidationError(
            f"fp8 with {options.zero} (sharded parameters) is not modelled: the cached FP8 "
            "weight copies would be gathered per layer; use zero1/zero2 or fp8='none'",
            field="options.fp8",
        )


def check_replica(
    options: ExecutionOptions, gpu, dtype: str, tp: int, num_stages: int, sequence_length: int = 0
) -> None:
    """Combinations refused for one replica of a plan (GPU, TP degree, pipeline depth; the
    tokens of a sequence each rank's attention sees, ``Job.local_sequence_length``, where
    known: 0 skips the checks that need it)."""
    if options.flash_attention is True and not flash_supported(gpu, dtype):
        raise ValidationError(
            f"flash attention is not supported on {gpu.name} (needs Ampere or later: bf16 "
            "tensor cores); set flash_attention=false or use another GPU type",
            field="options.flash_attention",
        )
    check_fp8(options.fp8, gpu, dtype)
    if options.context_parallel > 1 and not uses_flash(options, gpu, dtype):
        raise ValidationError(
            f"context parallelism needs flash attention, which {gpu.name} does not run in "
            f"{dtype}; train in bf16/fp16 on Ampere or later, or set context_parallel=1",
            field="options.context_parallel",
        )
    if options.sequence_parallel and tp < 2:
        raise ValidationError(
            "sequence parallelism splits activations over TP ranks and needs tp > 1 in every "
            "replica; set sequence_parallel=false or use tp >= 2",
            field="options.sequence_parallel",
        )
    if options.sequence_parallel and sequence_length % tp:  # the engine's rule (options.py)
        raise ValidationError(
            f"sequence parallelism splits each sequence's {sequence_length} tokens over the "
            f"{tp} TP ranks, which do not divide them; set sequence_parallel=false or use a "
            "sequence length divisible by tp",
            field="options.sequence_parallel",
        )
    if options.shards_parameters and num_stages > 1:
        raise ValidationError(
            f"{options.zero} (sharded parameters) is not supported with pipeline parallelism "
            f"({num_stages} stages): DeepSpeed and FSDP do not pipeline ZeRO-3; use zero1/zero2 "
            "or one stage",
            field="options.zero",
        )
    problem = depth_problem(options.virtual_stages, num_stages)  # interleave.py: the rule
    if problem is not None:
        raise ValidationError(problem, field="options.virtual_stages")


def check_options_on(options: ExecutionOptions, dtype: str, gpus) -> None:
    """Options that no GPU type of ``gpus`` (``GPUType``s, e.g. an inventory's) can run: a
    planner refuses them up front instead of finding no plan."""
    names = ", ".join(g.name for g in gpus)
    if options.flash_attention is True and not any(flash_supported(g, dtype) for g in gpus):
        raise ValidationError(
            f"flash attention runs on none of {names} in {dtype} (needs Ampere or later and "
            "bf16/fp16); set flash_attention=false or add such GPUs",
            field="options.flash_attention",
        )
    problem = fp8_gpus_problem(options.fp8, gpus)
    if problem:
        raise ValidationError(problem, field="options.fp8")
    if options.sequence_parallel and not any(g.gpus_per_node >= 2 for g in gpus):
        raise ValidationError(
            f"sequence parallelism needs tp > 1, and nodes of {names} have one GPU; "
            "set sequence_parallel=false",
            field="options.sequence_parallel",
        )


# ---- memory and time terms -------------------------------------------------------------------
_SCORES = ("softmax_output", "softmax_dropout_mask", "softmax_dropout_output")
"""The (a, s, s) attention-core tensors selective recomputation drops (Korthikanti Sec. 5)."""
_REPLICATED = (
    "attention_norm_input",
    "qkv_input",
    "attention_dropout_mask",
    "mlp_norm_input",
    "mlp_input",
    "mlp_dropout_mask",
    "embedding_dropout_mask",
    "embedding_norm_input",
    "attention_post_norm_input",
    "mlp_post_norm_input",
    "final_norm_input",
    "lm_head_input",
)
"""Tensors every TP rank holds whole; sequence parallelism splits them (Korthikanti Sec.
4.2.2, Table 2: 34 sbh -> 34 sbh / t)."""


def stash_bytes(model, layer_id: int, mbs: int, seq: int, dtype: str, tp: int, options, flash):
    """Bytes layer ``layer_id`` keeps for backward per microbatch under ``options``."""
    terms = model.stash_terms(layer_id, mbs, seq, dtype, tp, flash)
    if options.sequence_parallel:
        terms = {k: v // tp if k in _REPLICATED else v for k, v in terms.items()}
    if options.fp8 != "none":
        terms = fp8_stash(model, layer_id, terms, dtype)
    if model.layer_kind(layer_id) != "block":
        return sum(terms.values())
    if options.recompute == "full":  # only the block's input survives (SP: its 1/tp shard)
        return terms["attention_norm_input"]
    if options.recompute == "selective":
        return sum(v for k, v in terms.items() if k not in _SCORES)
    if options.recompute == "selective_op":
        return op_sac_stash(model, terms, mbs, seq, dtype, tp)
    return sum(terms.values())


def block_matmuls(model, tp: int) -> list[tuple[int, int]]:
    """A block's matmuls in forward order, as torchtitan's Llama runs them (q, k, v, attention
    output, then gate, up, down; or up, down without a gated MLP): (output width per token on
    one TP rank, the matmul's other dimension: FLOPs per token = 2 h x it / tp). Row-parallel
    outputs (attention output, down) are whole after their all-reduce."""
    h, kv, ffn, q = model.hidden_size, model.kv_size, model.ffn_hidden_size, model.q_width
    mlp = (
        [(ffn // tp, ffn), (ffn // tp, ffn), (h, ffn)]
        if model.gated_mlp
        else [
            (ffn // tp, ffn),
            (h, ffn),
        ]
    )
    # q is heads x head_dim wide, more than h where attention_head_dim says so (Gemma, Qwen3)
    return [(q // tp, q), (kv // tp, kv), (kv // tp, kv), (h, q), *mlp]


def op_sac_stash(model, terms: dict, mbs: int, seq: int, dtype: str, tp: int) -> int:
    """Bytes a block keeps under torchtitan's op-level selective checkpointing: its input (the
    checkpoint's argument), the flash/SDPA output and log-sum-exp, and the output of every
    odd-numbered matmul (``_get_custom_policy`` saves the ops of ``_save_list`` except every
    second ``aten.mm``); everything else is recomputed from these in backward."""
    tokens, e = mbs * seq, dtype_bytes(dtype)
    kept = [width for width, _ in block_matmuls(model, tp)[0::2]]
    block_input = terms["attention_norm_input"]  # already split under sequence parallelism
    attention_out = tokens * model.hidden_size // tp * e
    lse = terms.get("softmax_lse", 0)
    return block_input + attention_out + lse + sum(tokens * w * e for w in kept)


def recompute_transient(model, last: int, mbs: int, seq: int, dtype: str, tp: int, flash) -> int:
    """Full recomputation rebuilds one block's whole stash while it runs backward."""
    if model.num_layers < 1:
        return 0
    return sum(model.stash_terms(1, mbs, seq, dtype, tp, flash).values())


def recomputed_forward_fraction(model, mbs: int, seq: int, tp: int, options, flash) -> float:
    """Fraction of a block's forward FLOPs done again in backward: all of it under full
    recomputation; the attention core (QK^T and softmax @ V: 4 b s^2 h / tp of the block's
    ``forward_flops``) under selective; flash attention adds one QK^T (2 b s^2 h / tp). A
    measured profile already holds flash's own recomputation (the simulator passes
    ``flash=False`` for it)."""
    if model.num_layers < 1:
        return 0.0
    if options.recompute == "full":
        return 1.0
    block = model.forward_flops(1, mbs, seq, tp)
    core = model.attention_core_flops(mbs, seq, tp)
    if options.recompute == "selective_op":  # the even-numbered matmuls run again
        redone = sum(inner for _, inner in block_matmuls(model, tp)[1::2])
        matmul = 2.0 * mbs * seq * model.hidden_size * redone / tp
        return (matmul + (0.5 * core if flash else 0.0)) / block
    if flash:  # the scores are rebuilt in backward whatever else is recomputed
        return 0.5 * core / block
    if options.recompute == "selective":
        return core / block
    return 0.0


def recomputed_gemm_share(model, tp: int, options) -> float:
    """Fraction of a block's GEMM FLOPs done again in backward: all under full recomputation,
    the even-numbered matmuls under selective_op (``block_matmuls``), none otherwise (the
    attention core selective reruns is no GEMM of FP8's). Under FP8 that share of the rerun
    runs its GEMMs in FP8, as the first forward did."""
    if options.recompute == "full":
        return 1.0
    if options.recompute != "selective_op":
        return 0.0
    widths = [inner for _, inner in block_matmuls(model, tp)]
    return sum(widths[1::2]) / sum(widths)


def activation_factor(
    options, stage_index: int, num_stages: int, num_microbatches: int | None = None
) -> float:
    """Stashed activations of stage i under interleaved 1F1B relative to 1F1B's min(p - i, M)
    microbatches of the stage. Megatron-LM's schedule (core/pipeline_parallel/schedules.py,
    ``forward_backward_pipelining_with_interleaving``) runs num_warmup = 2 (p - i - 1) +
    (v - 1) p forward chunks, at most the M v there are, before rank i's first backward, so
    at its peak it holds min(num_warmup + 1, M v) chunks of 1/v of its layers each. Stage 0:
    p + (p - 1) / v stage activations, Korthikanti et al. 2022's 1 + (p - 1) / (p v) factor
    (Sec. 4.2.3); the last stage: p - (p - 1) / v, not 1F1B's one microbatch (that formula
    extended to every stage, 1 + (p - 1 - i) / (p v), gave the last stage 1 and missed most of
    its activations). ``num_microbatches`` None: as many as the schedule fills (the bound a
    planner uses before it knows M)."""
    v = options.virtual_stages
    if v == 1 or num_stages < 2:
        return 1.0
    p, i = num_stages, stage_index
    m = num_microbatches if num_microbatches is not None else p * v  # never the cap
    chunks = min(2 * (p - i - 1) + (v - 1) * p + 1, m * v)
    return chunks / v / min(p - i, m)


P2P_STYLES = {"megatron": True, "deepspeed": False}
"""``--p2p`` name -> ``p2p_scatter_gather``: how a framework's pipeline moves stage-boundary
tensors (see ``ExecutionOptions.p2p_scatter_gather``)."""

ORIGINAL_SAILOR_RUNS = ExecutionOptions(p2p_scatter_gather=False)
"""How the original Sailor's validation runs executed (Megatron-DeepSpeed, fp32): every TP
rank sends the whole stage-boundary tensor. Their pipelined GH200 runs (TP 4) match one
full-tensor transfer per TP pair, not a 1/tp share (bench/sim_validation.py)."""
