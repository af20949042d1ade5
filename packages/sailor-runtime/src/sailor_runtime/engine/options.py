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
- ``zero``: ``none``, or ``zero1`` = AdamW states sharded across each data-parallel group
  (Rajbhandari et al. 2020, ZeRO, Sec. 5.1, P_os). ``zero2``, ``zero3`` and ``hybrid`` (the
  simulator models them) are refused: the engine accumulates full
  gradients over the microbatches and reduces them after the last one, so sharding gradients
  after the fact would not lower the peak (see the engine README).
- ``sequence_parallel``: refused (the zoo keeps the hidden state replicated in a TP group).

Gradient accumulation is not an option here: it is the plan's ``num_microbatches`` per replica
(gradients of all microbatches accumulate in ``.grad`` and are reduced once per step).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

PRECISIONS = ("fp32", "bf16", "fp16")
RECOMPUTE = ("none", "selective", "full")
ZERO = ("none", "zero1")
"""What the engine runs of the simulator's ``ExecutionOptions.zero`` values."""


class OptionsError(ValueError):
    """A bad execution option (names the field and the fix)."""

    def __init__(self, message: str, *, field: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True)
class ExecutionOptions:
    precision: str | None = None
    """fp32 | bf16 | fp16 (mixed, fp32 master weights); None = the job's dtype."""
    recompute: str = "none"
    """none | selective | full."""
    flash_attention: bool = True
    """SDPA (flash where available) instead of the explicit attention math."""
    zero: str = "none"
    """'none' or 'zero1' (optimizer states sharded across each DP group)."""
    sequence_parallel: bool = False
    """Not supported by the engine (refused)."""

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
        if self.sequence_parallel:
            raise OptionsError(
                "sequence parallelism is not supported by the engine; use false",
                field="sequence_parallel",
            )

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
            flash_attention=None if self.flash_attention else False,
        )

    def describe(self) -> str:
        parts = [
            self.precision or "job dtype",
            f"recompute {self.recompute}",
            "sdpa" if self.flash_attention else "math attention",
        ]
        if self.zero != "none":
            parts.append(f"ZeRO-{self.zero[-1]}")
        return ", ".join(parts)
