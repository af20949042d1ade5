"""Flags the CLIs share beyond RunSpec's: the fabric and the framework's p2p style.

The job and execution-option flags are RunSpec's fields (``specs.with_spec``): declared once,
in ``spec/run.py`` and ``spec/options.py``, for every CLI.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

import typer

from ..errors import ValidationError
from ..spec.options import P2P_STYLES, ExecutionOptions

P2p = Annotated[
    str,
    typer.Option(
        "--p2p",
        help="Pipeline p2p of the framework: 'megatron' (TP ranks scatter/gather, sends "
        "overlap receives; our runtime) or 'deepspeed' (whole tensors, blocking in turn); "
        "the framework's name for --p2p-scatter-gather/--no-p2p-scatter-gather.",
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


def with_p2p(options: ExecutionOptions, p2p: str | None) -> ExecutionOptions:
    """``options`` with the p2p rule of the framework named by ``--p2p`` (None: unchanged)."""
    if p2p is None:
        return options
    if p2p not in P2P_STYLES:
        raise ValidationError(
            f"unknown p2p style {p2p!r}; use {' or '.join(P2P_STYLES)}", field="--p2p"
        )
    return replace(options, p2p_scatter_gather=P2P_STYLES[p2p])
