"""The execution options the engine runs: how it executes a plan, not what the plan is.

The options are the simulator's ``sailor_sim.ExecutionOptions`` (``RunSpec.options``) and the
precision is ``RunSpec.precision``: the engine declares no options of its own. This module says
which of them it runs (``unsupported_option``: on any plan; ``unsupported_reason``: on a given
plan) and how it reads them (``sdpa``, ``describe``):

- ``precision``: ``fp32``, or ``bf16`` / ``fp16`` mixed precision: parameters, gradients and
  AdamW states stay fp32 (the fp32 parameters are the master weights), the forward runs under
  ``torch.autocast`` in the low dtype (matmuls and attention in bf16/fp16, reductions and the
  loss in fp32, as autocast's op lists decide), and fp16 scales the loss dynamically
  (Micikevicius et al. 2018, "Mixed Precision Training", Sec. 3.2). ``None``: the job's dtype.
- ``recompute``: activation recomputation, ``none`` | ``selective`` (the attention core) |
  ``full`` (each block keeps only its input) (Korthikanti et al. 2022, Sec. 4-5);
  ``selective_op`` is simulated only.
- ``flash_attention``: unset or true: attention through ``F.scaled_dot_product_attention``
  (flash or memory-efficient kernels where the device has them); false: the explicit math
  (``sdpa``).
- ``zero``: ``none``; ``zero1`` = AdamW states sharded across each data-parallel group
  (Rajbhandari et al. 2020, ZeRO, Sec. 5.1, P_os; ``zero.ShardedAdamW``, any plan);
  ``zero2`` / ``zero3`` / ``hybrid`` through FSDP2 ``fully_shard`` (``fsdp``): gradients (and
  for zero3/hybrid parameters) sharded too, reduce-scattered every microbatch. Those three run
  on the plans ``unsupported_reason`` admits (one stage, replicas of one TP degree and one
  microbatch count).
- ``sequence_parallel``: Megatron sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2):
  norms, dropout and residual adds of each block hold 1/tp of the sequence; all-gather /
  reduce-scatter at the TP boundaries (``sailor_profiler.zoo.sequence``). Needs tp > 1 in
  every replica and a sequence length divisible by it.
- ``virtual_stages``: interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2.2; Megatron-LM's
  schedule, ``schedule.interleaved_steps``): each pipeline rank holds v model chunks, layers
  dealt round-robin over the p v chunks (``schedule.chunk_layers``). Needs >= 2 stages, a
  microbatch count that is a multiple of the stage count in every pipeline, at least one layer
  per chunk (``sailor_sim.spec.interleave``: the rule the simulator and the planner apply too),
  and the job planned with the same value (the simulator prices the bubble / v).

``unsupported_reason(options, job, plan)`` is the one place that says which plans the engine
runs with which options: the engine refuses the rest before any process group exists, the
controller filters the planner's plans by it.

Gradient accumulation is not an option here: it is the plan's ``num_microbatches`` per replica
(gradients of all microbatches accumulate in ``.grad`` and are reduced once per step).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sailor_sim import ZERO_PER_MICROBATCH, ExecutionOptions, SailorError, sharding_problem

from .parallel.schedule import interleave_problem

PRECISIONS = ("fp32", "bf16", "fp16")
"""The ``RunSpec.precision`` values the engine trains in (None: the job's dtype)."""
RECOMPUTE = ("none", "selective", "full")
"""The ``ExecutionOptions.recompute`` values the engine runs."""
FSDP_ZERO = ZERO_PER_MICROBATCH
"""The stages that shard gradients (zero2, zero3, hybrid: the simulator's) run through FSDP2
(``engine.parallel.fsdp``); ZeRO-1 is ``engine.parallel.zero``. Every ``zero`` value of the
simulator runs (see ``unsupported_reason`` for the plans each needs)."""
LEGACY_KEYS = ("precision", "recompute", "flash_attention", "zero", "sequence_parallel",
               "virtual_stages")  # fmt: skip
"""The keys of the options dict the engine wrote before it read the simulator's options
(checkpoint manifests and TrainConfig files of then): ``options_from_dict`` reads them."""


class OptionsError(SailorError):
    """A bad execution option (names the field and the fix)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, field=field)


def sdpa(options: ExecutionOptions) -> bool:
    """Attention through ``F.scaled_dot_product_attention`` (unset or forced flash), or the
    explicit math (``flash_attention`` false)."""
    return options.flash_attention is not False


def describe(options: ExecutionOptions, precision: str | None = None) -> str:
    """One line of how the engine runs ``options`` in ``precision`` (for logs)."""
    parts = [
        precision or "job dtype",
        f"recompute {options.recompute}",
        "sdpa" if sdpa(options) else "math attention",
    ]
    if options.zero != "none":
        parts.append("hybrid shard" if options.zero == "hybrid" else f"ZeRO-{options.zero[-1]}")
    if options.sequence_parallel:
        parts.append("sequence parallel")
    if options.virtual_stages > 1:
        parts.append(f"interleaved 1F1B x{options.virtual_stages}")
    return ", ".join(parts)


def options_from_dict(data: Mapping[str, Any] | None) -> tuple[str | None, ExecutionOptions]:
    """(precision, options) of an options dict: the simulator's ``ExecutionOptions.to_dict()``
    (no precision), or the engine's own dict of before (``LEGACY_KEYS``: the precision among
    the options, ``flash_attention`` true for SDPA), as old checkpoint manifests and configs
    hold it. Options the engine does not run raise ``OptionsError`` naming the field."""
    data = dict(data or {})
    legacy = "precision" in data
    precision = data.pop("precision", None)
    if legacy and data.get("flash_attention") is True:
        data["flash_attention"] = None  # SDPA: the simulator's default for the worker type
    try:
        options = ExecutionOptions.from_dict(data)
    except SailorError as exc:
        name = (exc.field or "options").removeprefix("options.")
        raise OptionsError(str(exc).split(": ", 1)[-1], field=name) from None
    reason = precision_problem(precision) or unsupported_option(options)
    if reason is not None:
        raise _error(reason)
    return precision, options


def hybrid_shard_size(plan) -> int:
    """Replicas per hybrid-shard group: those that fit one node of the first replica's GPU
    type (``sailor_sim.hybrid_group``, as the simulator's ``shard_group`` counts them)."""
    from sailor_sim import hybrid_group

    rep = plan.stages[0].replicas[0]
    return hybrid_group(rep.gpu_type, rep.tp, plan.num_pipelines)


def supports(options: ExecutionOptions, job, plan) -> bool:
    """Whether the engine runs ``plan`` of ``job`` with ``options``."""
    return unsupported_reason(options, job, plan) is None


def fsdp_depth_problem(options: ExecutionOptions, job, num_stages: int) -> str | None:
    """Why FSDP (``options.zero`` in ``FSDP_ZERO``; None for the other values) cannot run a
    plan of ``num_stages`` stages, or None. ZeRO-3 / hybrid free the gathered parameters
    after each layer, so they run on one stage (the simulator's rule too); ZeRO-2 pipelines,
    except over interleaved chunks or a tied embedding whose two copies sit on different
    stages (neither is built)."""
    if num_stages == 1 or options.zero not in FSDP_ZERO:
        return None
    zero = options.zero
    if options.shards_parameters:
        return (
            f"zero: {zero} (FSDP) runs on one-stage plans, this one has {num_stages} stages; "
            "use zero2 or zero1 with pipelining"
        )
    if options.virtual_stages > 1:
        return (
            f"zero: {zero} (FSDP) does not run interleaved 1F1B; use zero1 with "
            "virtual_stages > 1, or virtual_stages 1"
        )
    if job.model.tie_word_embeddings:
        return (
            f"zero: {zero} (FSDP) cannot shard a tied embedding over {num_stages} stages; use "
            "zero1 with pipelining, or one stage"
        )
    return None


def pipelines_fsdp(options: ExecutionOptions, job) -> bool:
    """Whether the engine runs ``options``' FSDP (or no FSDP) on plans of several stages: the
    controller asks the planner for one-stage plans only where it does not."""
    return fsdp_depth_problem(options, job, 2) is None


def unsupported_reason(options: ExecutionOptions, job, plan) -> str | None:
    """Why the engine cannot run ``plan`` of ``job`` with ``options`` (one line naming the
    fix), or None when it can. Torch-free: the controller filters the planner's plans by it."""
    replicas = [r for s in plan.stages for r in s.replicas]
    planned = job.options.virtual_stages
    if options.virtual_stages != planned:
        return (
            f"virtual_stages: the run asks {options.virtual_stages} but the job was planned "
            f"with {planned}; plan the job with the run's options (RunSpec.job())"
        )
    problem = interleave_problem(plan, job.model.head_layer_id, options.virtual_stages)
    if problem is not None:
        return problem
    if options.zero in FSDP_ZERO:
        problem = fsdp_depth_problem(options, job, plan.num_stages)
        if problem is not None:
            return problem
        problem = sharding_problem(options.zero, plan)  # the simulator's rule, one place
        if problem is not None:
            return f"zero: {problem}"
    if options.sequence_parallel:
        if any(r.tp < 2 for r in replicas):
            return "sequence_parallel: needs tp > 1 in every replica; use false on this plan"
        bad = [r.tp for r in replicas if job.sequence_length % r.tp]
        if bad:
            return (
                f"sequence_parallel: sequence length {job.sequence_length} is not divisible "
                f"by tp {bad[0]}; use false or another sequence length"
            )
    return None


def unsupported_option(options: ExecutionOptions) -> str | None:
    """Why the engine cannot run the simulator's ``options`` (as a ``RunSpec`` carries them)
    on any plan: one line naming the field and the fix, or None."""
    if options.grad_dtype != "fp32":
        return "grad_dtype: the engine keeps fp32 main gradients; use fp32"
    if options.fp8 != "none":
        return f"fp8: {options.fp8} is simulated, not run by the engine; use none"
    if options.recompute not in RECOMPUTE:
        return (
            f"recompute: {options.recompute} is simulated, not run by the engine; "
            f"use one of {RECOMPUTE}"
        )
    if options.expert_parallel > 1 or options.context_parallel > 1:
        return "expert_parallel / context_parallel: not run by the engine; use 1"
    if not options.fused_loss:
        return "fused_loss: the engine's cross-entropy is the fused one; use true"
    return None


def precision_problem(precision: str | None) -> str | None:
    """Why the engine cannot train in ``precision`` (``RunSpec.precision``), or None."""
    if precision is None or precision in PRECISIONS:
        return None
    return f"precision: {precision} is not run by the engine; use one of {PRECISIONS}"


def supports_options(options: ExecutionOptions) -> bool:
    """Whether the engine runs the simulator's ``options`` (on the plans ``supports`` admits)."""
    return unsupported_option(options) is None


def check_run(run) -> None:
    """Raise ``OptionsError`` (naming the field and the fix) when the engine does not run a
    ``RunSpec``'s precision or options (``precision_problem``, ``unsupported_option``)."""
    reason = precision_problem(run.precision) or unsupported_option(run.options)
    if reason is not None:
        raise _error(reason)


def _error(reason: str) -> OptionsError:
    field, message = reason.split(": ", 1)
    return OptionsError(message, field=field)


def trained_with(manifest: Mapping[str, Any]) -> str:
    """How a checkpoint was trained, from its manifest's precision and options (the engine's
    options dict of before too: ``options_from_dict``), for the resume's log line."""
    try:
        legacy, options = options_from_dict(manifest.get("options"))
    except (TypeError, ValueError) as exc:
        return f"options this engine does not read ({exc})"
    return describe(options, manifest.get("precision", legacy))
