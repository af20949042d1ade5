"""Time components: 1F1B pipeline, p2p transfers, ring all-reduce, TP all-reduces, egress.

Pure functions over numbers and link curves; ``simulator.py`` feeds them and caches results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .memory import GRAD_BYTES
from .network import LinkCurve, NetworkModel
from .zones import relationship

DP_BUCKET_BYTES = 160 * 1024**2
"""Gradient bucket of one all-reduce call: Megatron-LM's DistributedDataParallel default of
40 M parameters (fp32 main grads) per bucket (``bucket_size`` in megatron/core/distributed)."""
ALLREDUCE_BUS_EFFICIENCY: dict[str, tuple[float, str]] = {
    # platform -> (achieved fraction of the link's p2p bandwidth in a cross-node ring, source)
    "superchip": (0.4, "GH200 + Slingshot-11 (libfabric NCCL plugin): single-stage D=16/32 runs"),
    "sxm": (0.5, "NCCL tests ring bus bandwidth vs p2p on InfiniBand / GCP GPUDirect-TCPX"),
    "pcie": (0.5, "as sxm; PCIe hosts share the NIC through the CPU"),
    "cpu": (0.5, "gloo ring on TCP"),
}
"""Ring all-reduce reaches less than the p2p curve: 4 rings (one per TP rank) share a node's
NICs with reduction kernels in between, and every step waits for the slowest peer."""
MICROBATCH_OVERHEAD_S = 0.0
"""Per-microbatch, per-stage schedule overhead (Python, p2p handshakes) not in the profile."""


@dataclass(frozen=True)
class PipelineTime:
    total_s: float
    breakdown: dict[str, float]
    bottleneck_stage: int


def pipeline_time(stage_times, p2p: list[float], num_microbatches: int) -> PipelineTime:
    """1F1B time of one pipeline (Narayanan et al. 2021, Sec. 2.2).

    ``stage_times``: per stage, objects with ``forward_s``, ``backward_s``, ``tp_comm_s`` per
    microbatch; ``p2p``: per stage boundary, seconds to move one microbatch's activations (the
    gradient back costs the same). Fill and drain: every stage once plus every boundary in both
    directions; steady state: M - 1 steps of the slowest stage including its blocking p2p: each
    step a stage sends and receives an activation and a gradient on each of its boundaries
    (Megatron's send_forward_recv_backward / send_backward_recv_forward), which serialize on the
    GPU's NIC: 2 transfers per boundary, so 2 for the end stages and 4 for middle ones.
    Breakdown (sums to ``total_s``): compute and tp_comm = M x the bottleneck's share,
    pipeline_bubble = the other stages' fill/drain, p2p = the exposed transfers.
    """
    m = num_microbatches
    n = len(stage_times)
    per = [t.forward_s + t.backward_s + t.tp_comm_s + MICROBATCH_OVERHEAD_S for t in stage_times]
    sends = [
        2.0 * ((p2p[i] if i < n - 1 else 0.0) + (p2p[i - 1] if i > 0 else 0.0)) for i in range(n)
    ]
    k = max(range(n), key=lambda i: per[i] + sends[i])
    fill = 2.0 * sum(p2p)
    b = stage_times[k]
    breakdown = {
        "compute": m * (b.forward_s + b.backward_s + MICROBATCH_OVERHEAD_S),
        "tp_comm": m * b.tp_comm_s,
        "pipeline_bubble": sum(per) - per[k],
        "p2p": (m - 1) * sends[k] + fill,
    }
    return PipelineTime(sum(breakdown.values()), breakdown, k)


P2P_SCATTER_GATHER = False
"""Whether TP ranks split a p2p tensor (Megatron-LM's scatter_gather_tensors_in_pipeline).
The original Sailor runs (Megatron-DeepSpeed) send the full tensor from every TP rank: their
pipelined GH200 runs show one full-tensor transfer per pair, not a 1/tp share."""


def pipeline_total(stage_times, p2p: list[float], num_microbatches: int) -> float:
    """``pipeline_time(...).total_s`` without the breakdown (the per-pipeline fast path)."""
    n = len(stage_times)
    total, worst = 0.0, 0.0
    for i, t in enumerate(stage_times):
        c = t.forward_s + t.backward_s + t.tp_comm_s + MICROBATCH_OVERHEAD_S
        total += c
        send = (p2p[i] if i < n - 1 else 0.0) + (p2p[i - 1] if i > 0 else 0.0)
        if c + 2.0 * send > worst:
            worst = c + 2.0 * send
    return (num_microbatches - 1) * worst + total + 2.0 * sum(p2p)


def p2p_transfer_time(link: LinkCurve, nbytes: int, pairs: int) -> float:
    """Each of ``pairs`` concurrent GPU pairs moves ``nbytes`` (or ``nbytes / pairs`` with
    scatter-gather); the link's curve is the aggregate over the pairs."""
    if nbytes <= 0:
        return 0.0
    per_pair = nbytes / pairs if P2P_SCATTER_GATHER else nbytes
    return link.latency_s + per_pair * pairs / link.bandwidth(per_pair)


def allreduce_time(
    link: LinkCurve, nbytes: float, ranks: int, parallel_rings: int = 1, efficiency: float = 0.5
) -> float:
    """Ring all-reduce of ``nbytes`` over ``ranks`` (Patarasuk & Yuan 2009): 2(n-1)/n of the data
    crosses every link, in 2(n-1) latency-bound steps per bucket. A link with a measured ring
    gives its bus bandwidth and step latency; otherwise its p2p curve at ``efficiency``."""
    if ranks < 2 or nbytes <= 0:
        return 0.0
    buckets = max(1, math.ceil(nbytes / parallel_rings / DP_BUCKET_BYTES))
    chunk = nbytes / parallel_rings / buckets / ranks
    volume = 2.0 * (ranks - 1) / ranks * nbytes
    bw = link.ring_bandwidth(chunk, efficiency)
    return volume / bw + buckets * 2 * (ranks - 1) * link.ring_latency_s


STEP_SYNC_BYTES = 16
"""The per-step whole-world all-reduce: two float64 (loss and squared gradient norm)."""


def step_sync_time(link: LinkCurve, ranks: int) -> float:
    """The per-step all-reduce over every rank of the loss and the squared gradient norm
    (global-norm clipping: Megatron-LM's ``clip_grad_norm_fp32`` all-reduces the norm over the
    model-parallel world, our engine's ``world_sums`` over the whole world). Latency-bound:
    a ring of 2(n-1) steps (``allreduce_time``) over the plan's slowest-latency link."""
    return allreduce_time(link, STEP_SYNC_BYTES, ranks)


RingKind = tuple[str, str, int]
"""(zone, GPU type, TP) of a data-parallel replica: all the ring's edges depend on."""


def ring_kinds(replicas) -> tuple[tuple[RingKind, int], ...]:
    """The ring of one stage as sorted ((zone, GPU type, TP), replicas) runs: the ring visits
    replicas sorted by (zone, GPU type, TP), so it crosses each zone boundary as few times as
    possible."""
    counts: dict[RingKind, int] = {}
    for r in replicas:
        k = (r.zone, r.gpu_type, r.tp)
        counts[k] = counts.get(k, 0) + 1
    return tuple(sorted(counts.items()))


def kind_edges(kinds) -> list[tuple[RingKind, RingKind]]:
    """Every edge of the ring over sorted ``kinds`` runs, once per (run, run) transition: inside
    a run of >= 2 replicas, between consecutive runs, and back from the last to the first."""
    edges = [(k, k) for k, count in kinds if count >= 2]
    edges += [(kinds[j][0], kinds[j + 1][0]) for j in range(len(kinds) - 1)]
    if len(kinds) > 1:
        edges.append((kinds[-1][0], kinds[0][0]))
    return edges


def edge_allreduce_time(
    network: NetworkModel, a: RingKind, b: RingKind, ranks: int, grad_bytes_unsharded: float
) -> float:
    """Ring all-reduce time if every edge were the a -> b edge: the TP shards of a replica
    reduce in parallel rings (min TP of the two concurrent pairs), on the edge's own curve
    (a cross-zone edge is slower): its measured ring, else the platform's bus efficiency."""
    from .network import Endpoint

    (za, ga, ta), (zb, gb, tb) = a, b
    pairs = min(ta, tb)
    link = network.link(Endpoint(za, ga, pairs), Endpoint(zb, gb, pairs))
    return allreduce_time(link, grad_bytes_unsharded, ranks, pairs, bus_efficiency(ga, gb))


def edge_egress_usd(
    network: NetworkModel, a: RingKind, b: RingKind, ranks: int, grad_bytes_unsharded: float
) -> float:
    """$ of one all-reduce over the a -> b ring edge: 2(n-1)/n of the gradients cross it."""
    if a[0] == b[0] or ranks < 2:
        return 0.0
    rate = network.egress_per_gb(a[0], b[0])
    return 2.0 * (ranks - 1) / ranks * grad_bytes_unsharded / 1e9 * rate


def ring_allreduce_time(network: NetworkModel, replicas, grad_bytes_unsharded: int) -> float:
    """All-reduce of one stage's gradients over its replicas: the slowest ring edge."""
    n = len(replicas)
    if n < 2:
        return 0.0
    return max(
        edge_allreduce_time(network, a, b, n, grad_bytes_unsharded)
        for a, b in kind_edges(ring_kinds(replicas))
    )


def bus_efficiency(gpu_type_a: str, gpu_type_b: str | None = None) -> float:
    """``ALLREDUCE_BUS_EFFICIENCY`` of a ring edge between two GPU types (the lower one)."""
    from .gpus import get_gpu

    def one(gpu_type: str) -> float:
        platform = get_gpu(gpu_type).platform
        return ALLREDUCE_BUS_EFFICIENCY.get(platform, ALLREDUCE_BUS_EFFICIENCY["sxm"])[0]

    return min(one(gpu_type_a), one(gpu_type_b or gpu_type_a))


def tp_comm_time(model, first, last, mbs, seq, dtype, link: LinkCurve, tp: int) -> float:
    """Megatron TP all-reduces per microbatch (Shoeybi et al. 2019, Sec. 3): two per block in
    forward and two in backward on the (b, s, h) activations, one in the embedding forward and
    one in the head backward."""
    if tp < 2:
        return 0.0
    blocks = max(0, min(last, model.num_layers) - max(first, 1) + 1)
    calls = 4 * blocks + (1 if first == 0 else 0) + (1 if last == model.head_layer_id else 0)
    nbytes = model.activation_out_bytes(0, mbs, seq, dtype)
    one = 2.0 * (tp - 1) / tp * nbytes / link.bandwidth(nbytes / tp) + 2 * (tp - 1) * link.latency_s
    return calls * one


def dp_egress_usd(network: NetworkModel, replicas, grad_bytes_unsharded: float) -> float:
    """$ per iteration for the data-parallel ring's cross-zone edges."""
    n = len(replicas)
    if n < 2:
        return 0.0
    return sum(
        edge_egress_usd(network, a, b, n, grad_bytes_unsharded)
        for a, b in kind_edges(ring_kinds(replicas))
    )


def exposed_tail(dp_sync_s, optimizer_s, drain_s) -> tuple[float, float]:
    """(tail seconds, its optimizer share) after the critical pipeline's 1F1B: stage i
    all-reduces (``dp_sync_s[i]``) then steps (``optimizer_s[i]``), overlapping the drain of
    the stages before it (``drain_s[i]``: the critical pipeline's backward + p2p of stage i);
    tail = max(0, max_i (dp_i + opt_i - sum_{k<i} drain_k))."""
    tail, opt, lead = 0.0, 0.0, 0.0
    for i, (sync, step) in enumerate(zip(dp_sync_s, optimizer_s, strict=True)):
        exposed = sync + step - lead
        if i == 0 or exposed > tail:
            tail, opt = exposed, step
        if i < len(drain_s):
            lead += drain_s[i]
    tail = max(tail, 0.0)
    return tail, min(opt, tail)


def egress_usd(network: NetworkModel, job, plan, unsharded_params=None) -> float:
    """$ per iteration for bytes leaving a zone: p2p activations and gradients between stages,
    and the data-parallel ring's cross-zone edges."""
    total = 0.0
    model, seq = job.model, job.sequence_length
    for i in range(plan.num_stages - 1):
        boundary = plan.stages[i].last_layer
        for a, b in zip(plan.stages[i].replicas, plan.stages[i + 1].replicas, strict=True):
            if a.zone != b.zone:
                nbytes = (
                    2
                    * a.num_microbatches
                    * model.activation_out_bytes(boundary, a.microbatch_size, seq, job.dtype)
                )
                total += nbytes / 1e9 * network.egress_per_gb(a.zone, b.zone)
    for s in plan.stages:
        if unsharded_params is not None:
            params = unsharded_params(s.first_layer, s.last_layer)
        else:
            params = sum(model.params(i) for i in s.layer_ids)
        total += dp_egress_usd(network, s.replicas, GRAD_BYTES[job.dtype] * params)
    return total


__all__ = [
    "PipelineTime",
    "allreduce_time",
    "bus_efficiency",
    "dp_egress_usd",
    "edge_allreduce_time",
    "edge_egress_usd",
    "egress_usd",
    "exposed_tail",
    "kind_edges",
    "pipeline_total",
    "p2p_transfer_time",
    "pipeline_time",
    "relationship",
    "ring_allreduce_time",
    "ring_kinds",
    "step_sync_time",
    "tp_comm_time",
]
