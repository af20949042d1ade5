"""Slurm: a node's GPUs from its GRES, for `deploy/slurm/worker.sh` (`sailor slurm-node`).

Slurm names GPUs by generic resource, ``gpu:<type>:<count>``, with site-chosen type names
(``a100``, ``h100``, ...); the catalog's aliases map the usual ones to catalog GPU types
(``a100`` -> A100-40; sites with 80 GB cards name them ``a100-80gb``). A node without a typed
GPU GRES is a CPU node.
"""

from __future__ import annotations

import re
import subprocess

from sailor_sim import get_gpu

from .errors import SailorRuntimeError

_GPU_GRES = re.compile(r"(?:^|,)gpu:([^:,()]+):(\d+)")


def gres_gpus(gres: str) -> tuple[str, int]:
    """(catalog GPU type, count) from a node's ``Gres=`` value; ("CPU", 1) without GPUs.
    ``gpu:a100:4(S:0-1)`` -> ("A100-40", 4). Raises SailorRuntimeError on an unknown type."""
    found = _GPU_GRES.search(gres.strip())
    if found is None:
        return "CPU", 1
    name, count = found.group(1), int(found.group(2))
    try:
        return get_gpu(name).name, count
    except ValueError as exc:
        raise SailorRuntimeError(
            f"the node's GRES names GPU type {name!r}, which the catalog does not know ({exc}); "
            "register it or pass --gpu-type to `sailor worker`",
            field="gres",
        ) from None


def node_gres(node: str) -> str:
    """The ``Gres=`` value of Slurm node ``node`` (from ``scontrol show node -o``)."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "node", "-o", node],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise SailorRuntimeError(
            f"cannot ask Slurm about node {node!r} ({exc}); run this inside a Slurm job",
            field="node",
        ) from None
    for field in out.split():
        if field.startswith("Gres="):
            return field[len("Gres=") :]
    return ""
