"""Execution options applied to a built stage from outside its constructors (as torchtitan's
``parallelize`` applies activation checkpointing): the model's shapes and parameter names do not
change, only how its forward runs. Precision (autocast) and the sharded optimizer belong to the
engine's step, not to the modules; see ``sailor_runtime.engine.options``.
"""

from __future__ import annotations

from torch import nn

from .layers import Attention, Block

RECOMPUTE = ("none", "selective", "full")


def apply_execution(
    stage: nn.Module, recompute: str = "none", flash_attention: bool = True
) -> nn.Module:
    """Set activation recomputation (``none`` | ``selective``: the attention core | ``full``:
    each block keeps only its input) and the attention kernel (SDPA or the explicit math) on
    every block of ``stage``; returns ``stage``."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"unknown recompute {recompute!r}; use one of {RECOMPUTE}")
    for module in stage.modules():
        if isinstance(module, Block):
            module.recompute_full = recompute == "full"
        if isinstance(module, Attention):
            module.recompute_core = recompute == "selective"
            module.flash = bool(flash_attention)
    return stage
