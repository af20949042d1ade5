"""Readers for the original Sailor network fits (``sailor/providers/*.json``).

- ``multizone_bandwidths_het.json`` / ``multizone_bandwidths.json``:
  [send zone][send GPU][count][recv zone][recv GPU][count] -> [[c0, c1, c2], max bytes/s].
- ``network_coeffs_all_homo.json``: {"inter": {gpu: {count: fit}}, "intra": {gpu: {count: fit}}}.
- ``intra_node_bandwidths.json``: {gpu: {count: fit}}.

Fits are GB/s = c0*x^2 + c1*x + c2, x = log2(bytes / 1e6), valid on 64 KB-1 GB; ``LinkCurve``
clamps the message size to that range and the result to [MIN_FRACTION * max, max].
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..catalog.gpus import get_gpu
from ..catalog.zones import get_zone
from ..errors import ProfileError, UnknownNameError
from ..simulate.network import (
    DEFAULT_INTER_NODE_LATENCY_S,
    INTRA_NODE_LATENCY_S,
    Endpoint,
    LinkCurve,
    NetworkModel,
)
from .profiles import load_json

SOURCE = "imported:sailor"


def _curve(fit: Any, latency: float, where: str) -> LinkCurve:
    try:
        (c0, c1, c2), max_bw = fit
        return LinkCurve(
            float(max_bw), latency, f"{SOURCE} {where}", (float(c0), float(c1), float(c2))
        )
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"expected [[c0, c1, c2], max bytes/s] ({exc})", field=where) from None


def _gpu(name: str) -> str | None:
    try:
        return get_gpu(name).name
    except UnknownNameError:
        return None


def read_multizone(path: str | Path, network: NetworkModel | None = None) -> NetworkModel:
    network = network or NetworkModel()
    data = load_json(Path(path), "network")
    name = Path(path).name
    for sz, by_gpu in data.items():
        for sg, by_count in by_gpu.items():
            for sc, by_zone in by_count.items():
                for dz, by_dgpu in by_zone.items():
                    for dg, by_dcount in by_dgpu.items():
                        for dc, fit in by_dcount.items():
                            src_gpu, dst_gpu = _gpu(sg), _gpu(dg)
                            if src_gpu is None or dst_gpu is None:
                                continue
                            get_zone(sz), get_zone(dz)
                            where = f"{name}[{sz}][{sg}][{sc}][{dz}][{dg}][{dc}]"
                            network.add_link(
                                Endpoint(sz, src_gpu, int(sc)),
                                Endpoint(dz, dst_gpu, int(dc)),
                                _curve(fit, DEFAULT_INTER_NODE_LATENCY_S, where),
                            )
    return network


def read_homogeneous(path: str | Path, network: NetworkModel | None = None) -> NetworkModel:
    network = network or NetworkModel()
    data = load_json(Path(path), "network")
    name = Path(path).name
    for kind, by_gpu in data.items():
        for g, by_count in by_gpu.items():
            gpu = _gpu(g)
            if gpu is None:
                continue
            for c, fit in by_count.items():
                where = f"{name}[{kind}][{g}][{c}]"
                if kind == "inter":
                    network.add_homogeneous(
                        gpu, int(c), _curve(fit, DEFAULT_INTER_NODE_LATENCY_S, where)
                    )
                elif kind == "intra":
                    network.add_intra_node(gpu, int(c), _curve(fit, INTRA_NODE_LATENCY_S, where))
    return network


def read_intra_node(path: str | Path, network: NetworkModel | None = None) -> NetworkModel:
    network = network or NetworkModel()
    data = load_json(Path(path), "network")
    for g, by_count in data.items():
        gpu = _gpu(g)
        if gpu is None:
            continue
        for c, fit in by_count.items():
            where = f"{Path(path).name}[{g}][{c}]"
            network.add_intra_node(gpu, int(c), _curve(fit, INTRA_NODE_LATENCY_S, where))
    return network
