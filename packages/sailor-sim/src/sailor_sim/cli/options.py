"""The execution-option flags every CLI that builds a ``Job`` shares (sailor-sim, sailor-planner).

Each flag maps to one ``ExecutionOptions`` field; unset flags keep its default, and
``ExecutionOptions`` refuses bad values with an error naming the option (the CLIs print it as one
``error:`` line and exit 2).
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import ValidationError
from ..spec.options import FP8_RECIPES, GRAD_DTYPES, P2P_STYLES, RECOMPUTE, ZERO, ExecutionOptions

Zero = Annotated[
    str, typer.Option("--zero", help=f"Optimizer/gradient/parameter sharding: {', '.join(ZERO)}.")
]
Recompute = Annotated[
    str, typer.Option("--recompute", help=f"Activation recomputation: {', '.join(RECOMPUTE)}.")
]
Flash = Annotated[
    bool | None,
    typer.Option(
        "--flash/--no-flash", help="Flash attention (default: on for bf16/fp16 on Ampere+)."
    ),
]
SequenceParallel = Annotated[
    bool,
    typer.Option("--sequence-parallel", help="Megatron sequence parallelism (needs tp > 1)."),
]
VirtualStages = Annotated[
    int, typer.Option("--virtual-stages", help="Model chunks per GPU (interleaved 1F1B).")
]
GradDtype = Annotated[
    str, typer.Option("--grad-dtype", help=f"Main-gradient dtype: {', '.join(GRAD_DTYPES)}.")
]
Fp8 = Annotated[
    str,
    typer.Option(
        "--fp8",
        help=f"FP8 GEMMs in the blocks, per-tensor scaling: {', '.join(FP8_RECIPES)} "
        "(--precision fp8 = bf16 with 'delayed').",
    ),
]
ContextParallel = Annotated[
    int,
    typer.Option(
        "--cp", help="Context parallelism: replicas per stage that split each sequence (ring)."
    ),
]
ExpertParallel = Annotated[
    int,
    typer.Option("--ep", help="Expert parallelism: replicas per stage that split the experts."),
]

P2p = Annotated[
    str,
    typer.Option(
        "--p2p",
        help="Pipeline p2p of the framework: 'megatron' (TP ranks scatter/gather, sends "
        "overlap receives; our runtime) or 'deepspeed' (whole tensors, blocking in turn).",
    ),
]

FabricFlag = Annotated[
    str | None,
    typer.Option(
        "--fabric",
        help="The fabric between nodes: a catalog fabric name (e.g. ib-ndr-8x400) or a "
        "sailor-cluster/1 JSON file (default: the GPU type's cloud instances' fabric).",
    ),
]


def execution_options(
    zero: str = "none",
    recompute: str = "none",
    flash: bool | None = None,
    sequence_parallel: bool = False,
    virtual_stages: int = 1,
    grad_dtype: str = "fp32",
    p2p: str = "megatron",
    fp8: str = "none",
    expert_parallel: int = 1,
    context_parallel: int = 1,
) -> ExecutionOptions:
    """The ``ExecutionOptions`` the flags describe (raises ``ValidationError`` on bad values)."""
    if p2p not in P2P_STYLES:
        raise ValidationError(
            f"unknown p2p style {p2p!r}; use {' or '.join(P2P_STYLES)}", field="--p2p"
        )
    return ExecutionOptions(
        p2p_scatter_gather=P2P_STYLES[p2p],
        grad_dtype=grad_dtype,
        flash_attention=flash,
        recompute=recompute,
        zero=zero,
        sequence_parallel=sequence_parallel,
        virtual_stages=virtual_stages,
        fp8=fp8,
        expert_parallel=expert_parallel,
        context_parallel=context_parallel,
    )
