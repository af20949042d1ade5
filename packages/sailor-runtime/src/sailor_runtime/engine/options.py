"""Execution options of a run: how the engine executes a plan, not what the plan is.

Same names and meanings as the simulator's execution options (sailor_sim job/plan):

- ``precision``: ``fp32``, or ``bf16`` / ``fp16`` mixed precision: parameters, gradients and
  AdamW states stay fp32 (the fp32 parameters are the master weights), the forward runs under
  ``torch.autocast`` in the low dtype (matmuls and attention in bf16/fp16, reductions and the
  loss in fp32, as autocast's op lists decide), and fp16 scales the loss dynamically
  (Micikevicius et al. 2018, "Mixed Precision Training", Sec. 3.2). ``None``: the job's dtype.
- ``recompute``: activation recomputation, ``none`` | ``selective`` (the attention core) |
  ``full`` (each block keeps only its input) (Korthikanti et al. 2022, Sec. 4-5).
- ``flash_attention``: attention through ``F.scaled_dot_product_attention`` (flash or
  memory-efficient kernels where the device has them) instead of the explicit math.
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
from dataclasses import asdict, dataclass
from typing import Any

from sailor_sim import SailorError

from .schedule import interleave_problem

PRECISIONS = ("fp32", "bf16", "fp16")
RECOMPUTE = ("none", "selective", "full")
ZERO = ("none", "zero1", "zero2", "zero3", "hybrid")
"""The simulator's ``ExecutionOptions.zero`` values, all run by the engine (see
``unsupported_reason`` for the plans each needs)."""
FSDP_ZERO = ("zero2", "zero3", "hybrid")
"""Run through FSDP2 (``engine.fsdp``); ZeRO-1 is ``engine.zero``."""


class OptionsError(SailorError):
    """A bad execution option (names the field and the fix)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, field=field)


@dataclass(frozen=True)
class ExecutionOptions:
    precision: str | None = None
    """fp32 | bf16 | fp16 (mixed, fp32 master weights); None = the job's dtype."""
    recompute: str = "none"
    """none | selective | full."""
    flash_attention: bool = True
    """SDPA (flash where available) instead of the explicit attention math."""
    zero: str = "none"
    """none | zero1 (AdamW states sharded) | zero2 | zero3 | hybrid (FSDP2)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism in every TP group (needs tp > 1)."""
    virtual_stages: int = 1
    """Model chunks per pipeline rank (interleaved 1F1B); 1 = plain 1F1B."""

    def __post_init__(self) -> None:
        if self.precision is not None and self.precision not in PRECISIONS:
            raise OptionsError(
                f"unknown precision {self.precision!r}; use one of {PRECISIONS}", field="precision"
            )
        if self.recompute not in RECOMPUTE:
            raise OptionsError(
                f"unknown recompute {self.recompute!r}; use one of {RECOMPUTE}", field="recompute"
            )
        if self.zero not in ZERO:
            raise OptionsError(
                f"{self.zero!r} is not run by the engine; use one of {ZERO}",
                field="zero",
            )
        if not isinstance(self.sequence_parallel, bool):
            raise OptionsError(
                f"must be true or false, got {self.sequence_parallel!r}",
                field="sequence_parallel",
            )
        v = self.virtual_stages
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise OptionsError(f"must be an integer >= 1, got {v!r}", field="virtual_stages")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ExecutionOptions:
        data = dict(data or {})
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise OptionsError(
                f"unknown keys {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}",
                field="options",
            )
        return cls(**data)

    def simulated(self):
        """The simulator's ``ExecutionOptions`` for these (what ``sailor run`` predicts with):
        recomputation and ZeRO by the same names; SDPA leaves flash attention to the
        simulator's default for the worker type, the explicit math is flash off."""
        from sailor_sim import ExecutionOptions as SimOptions

        return SimOptions(
            recompute=self.recompute,
            zero=self.zero,
            sequence_parallel=self.sequence_parallel,
            flash_attention=None if self.flash_attention else False,
            virtual_stages=self.virtual_stages,
        )

    def describe(self) -> str:
        parts = [
            self.precision or "job dtype",
            f"recompute {self.recompute}",
            "sdpa" if self.flash_attention else "math attention",
        ]
        if self.zero != "none":
            parts.append("hybrid shard" if self.zero == "hybrid" else f"ZeRO-{self.zero[-1]}")
        if self.sequence_parallel:
            parts.append("sequence parallel")
        if self.virtual_stages > 1:
            parts.append(f"interleaved 1F1B x{self.virtual_stages}")
        return ", ".join(parts)


def hybrid_shard_size(plan) -> int:
    """Replicas per hybrid-shard group: those that fit one node of the first replica's GPU
    type (``gpus_per_node // tp``), as the simulator's ``shard_group`` counts them."""
    from sailor_sim import get_gpu

    rep = plan.stages[0].replicas[0]
    return max(1, min(plan.num_pipelines, get_gpu(rep.gpu_type).gpus_per_node // rep.tp))


def supports(options: ExecutionOptions, job, plan) -> bool:
    """Whether the engine runs ``plan`` of ``job`` with ``options``."""
    return unsupported_reason(options, job, plan) is None


def unsupported_reason(options: ExecutionOptions, job, plan) -> str | None:
    """Why the engine cannot run ``plan`` of ``job`` with ``options`` (one line naming the
    fix), or None when it can. Torch-free: the controller filters the planner's plans by it."""
    replicas = [r for s in plan.stages for r in s.replicas]
    planned = job.options.virtual_stages
    if options.virtual_stages != planned:
        return (
            f"virtual_stages: the run asks {options.virtual_stages} but the job was planned "
            f"with {planned}; plan the job with the run's options (ExecutionOptions.simulated())"
        )
    problem = interleave_problem(plan, job.model.head_layer_id, options.virtual_stages)
    if problem is not None:
        return problem
    if options.zero in FSDP_ZERO:
        if plan.num_stages > 1:
            return (
                f"zero: {options.zero} (FSDP) runs on one-stage plans, this one has "
                f"{plan.num_stages} stages; use zero1 with pipelining"
            )
        if len({r.tp for r in replicas}) > 1 or len({r.num_microbatches for r in replicas}) > 1:
            return (
                f"zero: {options.zero} (FSDP) needs every replica with the same TP degree and "
                "microbatch count (one all-gather per microbatch in each shard group); "
                "use zero1 on this plan"
            )
        shard = hybrid_shard_size(plan)
        if options.zero == "hybrid" and plan.num_pipelines % shard:
            return (
                f"zero: hybrid shards over groups of {shard} replicas, which do not divide "
                f"{plan.num_pipelines}; use zero3"
            )
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


def unsupported_option(options) -> str | None:
    """Why the engine cannot run the simulator's ``options`` (``sailor_sim.ExecutionOptions``,
    as a ``RunSpec`` carries them) on any plan: one line naming the field and the fix, or
    None. The options it runs are then resolved by ``from_run``."""
    if options.grad_dtype != "fp32":
        return "grad_dtype: the engine keeps fp32 main gradients; use fp32"
    if options.fp8 != "none":
        return f"fp8: {options.fp8} is simulated, not run by the engine; use none"
    if options.expert_parallel > 1 or options.context_parallel > 1:
        return "expert_parallel / context_parallel: not run by the engine; use 1"
    return None


def supports_options(options) -> bool:
    """Whether the engine runs the simulator's ``options`` (on the plans ``supports`` admits)."""
    return unsupported_option(options) is None


def from_run(run) -> ExecutionOptions:
    """The engine's view of a ``RunSpec``'s precision and execution options; raises
    ``OptionsError`` for options it does not run (``unsupported_option``)."""
    reason = unsupported_option(run.options)
    if reason is not None:
        raise OptionsError(reason.split(": ", 1)[1], field=reason.split(": ", 1)[0])
    o = run.options
    return ExecutionOptions(
        precision=run.precision,
        recompute=o.recompute,
        flash_attention=o.flash_attention is not False,  # unset: SDPA, flash where it can
        zero=o.zero,
        sequence_parallel=o.sequence_parallel,
        virtual_stages=o.virtual_stages,
    )
