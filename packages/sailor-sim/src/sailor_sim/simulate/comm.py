"""How much of a link's bandwidth a collective achieves: bus efficiency per fabric, sourced.

NCCL tests report a collective's *bus bandwidth* (nccl-tests doc/PERFORMANCE.md: for an
all-reduce of m bytes over n ranks in t seconds, 2 (n - 1) / n * m / t), the rate each link
carries; the ratio of that to the link's line rate is what a ring all-reduce, all-gather or
reduce-scatter reaches on it (protocol headers, reduction kernels, flow control). This module
holds that ratio per fabric kind (``BUS_EFFICIENCY``), each with the published measurement it
comes from, and the kind a link has when nothing else says (``intra_node_kind``,
``default_inter_node_kind``). It replaces one 0.5 for every fabric.

Where no published figure was found the entry says so ("assumed ..."): such a figure is a
stated assumption, not a measurement, and the per-estimate trust says which one was used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UnknownNameError


@dataclass(frozen=True)
class BusEfficiency:
    """Ring bus bandwidth / line rate of a fabric, and where the figure comes from."""

    value: float
    source: str


_NDR = (
    "NVIDIA/nccl-tests issue #290 (NVIDIA's AddyLaddy, 2025-03-03): 'For NDR @ 400Gbps you "
    "should see 46-48GB/s per NIC' (47 / 50 GB/s line rate)"
)
_EFA = (
    "NVIDIA/nccl issue #527: all_reduce_perf on 4 p4dn.24xlarge (400 Gb/s EFA per node), "
    "1 GiB, busbw 29.6 GB/s (29.6 / 50 GB/s)"
)
BUS_EFFICIENCY: dict[str, BusEfficiency] = {
    # intra-node
    "NVLink": BusEfficiency(
        0.82,
        "NVIDIA/nccl-tests issue #212 (NVIDIA's sjeaugey, 2024-05-06): NVLink4 line rate 450 GB/s, "
        "'with the protocol overhead (~20%) NCCL can get an effective NVLink bandwidth of "
        "370GB/s' as ring busbw (370 / 450)",
    ),
    "PCIe": BusEfficiency(0.82, "assumed equal to NVLink (NCCL's same simple/LL128 protocols)"),
    "AMD Infinity Fabric": BusEfficiency(0.82, "assumed equal to NVLink (no RCCL figure found)"),
    # inter-node
    "InfiniBand NDR": BusEfficiency(0.94, _NDR),
    "InfiniBand HDR": BusEfficiency(0.94, f"assumed equal to NDR (same verbs transport): {_NDR}"),
    "GCP RoCE (GPUDirect-RDMA)": BusEfficiency(0.94, f"assumed equal to InfiniBand: {_NDR}"),
    "RoCE": BusEfficiency(0.94, f"assumed equal to InfiniBand: {_NDR}"),
    "Intel Omni-Path": BusEfficiency(
        0.94, f"assumed equal to InfiniBand (an RDMA fabric; no NCCL figure found): {_NDR}"
    ),
    "AWS EFA": BusEfficiency(0.59, _EFA),
    "GCP GPUDirect-TCPX": BusEfficiency(0.59, f"assumed equal to EFA (no figure found): {_EFA}"),
    "cloud Ethernet": BusEfficiency(0.59, f"assumed equal to EFA (no figure found): {_EFA}"),
    "HPE Slingshot-11": BusEfficiency(
        0.4,
        "fitted on the original Sailor's 15 GH200 runs (libfabric NCCL plugin); "
        "bench/sim_validation.py refits it leave-one-out (0.3-0.4)",
    ),
    "TCP loopback": BusEfficiency(
        0.3,
        "gloo on CPU ranks of one host, measured by this project's sailor-profiler network "
        "runs: 0.2-0.4 of the p2p bandwidth (packages/sailor-profiler/README.md, links.json); "
        "the midpoint. Profiled links carry their measured ring instead",
    ),
}
"""Fabric kind -> ring bus efficiency (the kinds of ``data/instances.json`` fabrics)."""

INTRA_NODE_KIND = {
    "sxm": "NVLink", "superchip": "NVLink", "oam": "AMD Infinity Fabric", "pcie": "PCIe"
}  # fmt: skip
"""GPU platform -> the link between GPUs of one node (CPU workers: ``TCP loopback``)."""
DEFAULT_INTER_NODE_KIND = {"superchip": "HPE Slingshot-11", "cpu": "TCP loopback"}
"""Platform -> inter-node fabric where the GPU type's instances list none ('cloud Ethernet')."""


def bus_efficiency(kind: str) -> BusEfficiency:
    """The bus efficiency of a fabric kind (UnknownNameError naming the known kinds)."""
    try:
        return BUS_EFFICIENCY[kind]
    except KeyError:
        raise UnknownNameError(
            f"unknown fabric kind {kind!r}; known: {', '.join(sorted(BUS_EFFICIENCY))}",
            field="fabric.kind",
        ) from None


def intra_node_kind(gpu) -> str:
    """The link between GPUs of one node of ``gpu`` (a ``GPUType``)."""
    return INTRA_NODE_KIND.get(gpu.platform, "TCP loopback")


def default_inter_node_kind(gpu) -> str:
    """The fabric between nodes of ``gpu`` when no link says: its instances' catalog fabric,
    else the platform's (``DEFAULT_INTER_NODE_KIND``), else cloud Ethernet."""
    from ..catalog.instances import fabric_for

    if gpu.platform in DEFAULT_INTER_NODE_KIND:
        return DEFAULT_INTER_NODE_KIND[gpu.platform]
    fabric = fabric_for(gpu.name)
    return fabric.kind if fabric is not None else "cloud Ethernet"


# ---- collectives ---------------------------------------------------------------------------
# Times of one collective from the bytes it moves, the bus bandwidth the fabric sustains
# (line rate x BUS_EFFICIENCY) and the latency of one step. Volumes per rank as nccl-tests
# defines bus bandwidth (doc/PERFORMANCE.md): all-reduce 2(n-1)/n of the buffer, all-gather and
# reduce-scatter (n-1)/n of the gathered buffer, all-to-all (n-1)/n of each rank's buffer.


def latency_steps(ranks: int, steps_per_rank: int = 2) -> int:
    """Latency-bound steps of an all-reduce (``steps_per_rank`` 2) or a gather/scatter (1) over
    ``ranks``: a ring takes steps_per_rank x (n - 1); NCCL's double binary trees (NCCL 2.4,
    NVIDIA developer blog 'Massively Scale Your Deep Learning Training with NCCL 2.4') take
    steps_per_rank x ceil(log2 n) at the same bus bandwidth, and NCCL picks the faster, so
    large groups are not charged a ring's latency."""
    if ranks < 2:
        return 0
    return steps_per_rank * min(ranks - 1, math.ceil(math.log2(ranks)))


def allreduce_s(nbytes: float, ranks: int, bus_bandwidth: float, step_latency_s: float) -> float:
    """One all-reduce of ``nbytes``: 2(n-1)/n of them at the bus bandwidth, plus its steps."""
    if ranks < 2 or nbytes <= 0:
        return 0.0
    volume = 2.0 * (ranks - 1) / ranks * nbytes
    return volume / bus_bandwidth + latency_steps(ranks) * step_latency_s


def allgather_s(nbytes: float, ranks: int, bus_bandwidth: float, step_latency_s: float) -> float:
    """One all-gather (or reduce-scatter) whose gathered buffer is ``nbytes``: half an
    all-reduce's volume and steps."""
    if ranks < 2 or nbytes <= 0:
        return 0.0
    volume = (ranks - 1) / ranks * nbytes
    return volume / bus_bandwidth + latency_steps(ranks, 1) * step_latency_s


reduce_scatter_s = allgather_s


def alltoall_s(nbytes: float, ranks: int, bus_bandwidth: float, step_latency_s: float) -> float:
    """One all-to-all where every rank holds ``nbytes`` and keeps 1/n of them: (n-1)/n leave
    it at the bus bandwidth; the n - 1 sends run at once (NCCL groups the p2p calls), so one
    step's latency."""
    if ranks < 2 or nbytes <= 0:
        return 0.0
    return (ranks - 1) / ranks * nbytes / bus_bandwidth + step_latency_s
