"""Time components: 1F1B pipeline, the iteration's named terms, p2p transfers, ring all-reduce,
TP all-reduces, egress.

Pure functions over numbers and link curves; ``simulator.py`` feeds them and caches results.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ..catalog.gpus import get_gpu
from ..catalog.zones import relationship
from .comm import allreduce_s, default_inter_node_kind, intra_node_kind
from .comm import bus_efficiency as of_kind
from .memory import GRAD_BYTES
from .network import Endpoint, LinkCurve, NetworkModel

DP_BUCKET_BYTES = 160 * 1024**2
"""Gradient bucket of one all-reduce call: Megatron-LM's DistributedDataParallel default of
40 M parameters (fp32 main grads) per bucket (``bucket_size`` in megatron/core/distributed)."""


CROSS_ZONE_KIND = "cloud Ethernet"
"""The fabric kind of a ring edge between zones (``comm.BUS_EFFICIENCY``): RDMA fabrics end at
the zone; what crosses zones is the provider's IP network."""


def transfers_per_boundary(full_duplex: bool) -> float:
    """Transfer times one 1F1B step spends per stage boundary: 1 where the activation going
    down and the gradient coming up cross the (full-duplex) link at once, as Megatron-LM's
    batched ``send_forward_recv_backward`` and our runtime's isend + recv issue them; 2 where
    the framework sends and receives one after the other (DeepSpeed's PipelineEngine executes
    SendActivation and RecvGrad as separate blocking instructions, deepspeed/runtime/pipe/
    engine.py), as in the original Sailor's GH200 runs (``options.p2p_scatter_gather`` False)."""
    return 1.0 if full_duplex else 2.0


MICROBATCH_OVERHEAD_S = 0.0
"""Per-microbatch, per-stage schedule overhead (Python, p2p handshakes) not in the profile."""


class StageTime(NamedTuple):
    """Per-microbatch seconds of one replica's layer range, and its optimizer step."""

    forward_s: float
    backward_s: float
    tp_comm_s: float
    """TP all-reduces (forward + backward) not already inside the profile."""
    optimizer_s: float
    source: str
    recompute_s: float = 0.0
    """Forward work done again in backward (activation recomputation), per microbatch."""
    shard_comm_s: float = 0.0
    """ZeRO-3 parameter all-gathers and gradient reduce-scatter per microbatch not hidden
    behind its compute (set per stage by the simulator, 0 in ``stage_time``)."""
    expert_comm_s: float = 0.0
    """Expert-parallel all-to-alls (dispatch, combine; forward and backward) per microbatch
    (set per replica by the simulator, 0 in ``stage_time``; ``moe.py``)."""
    context_comm_s: float = 0.0
    """Context-parallel KV exchange not hidden behind attention, per microbatch (set per
    replica by the simulator, 0 in ``stage_time``; ``context_parallel.py``)."""
    framework_s: float = 0.0
    """What the training framework adds to an analytic estimate's compute (launches, Python,
    synchronisation: ``analytic.framework_efficiency``); 0 for measured profiles."""

    @property
    def per_microbatch_s(self) -> float:
        """Everything one microbatch costs this replica (additive over layer ranges; the
        pipeline adds ``MICROBATCH_OVERHEAD_S`` once per stage)."""
        return (
            self.forward_s
            + self.backward_s
            + self.recompute_s
            + self.tp_comm_s
            + self.shard_comm_s
            + self.expert_comm_s
            + self.context_comm_s
            + self.framework_s
        )


class PipelineTime(NamedTuple):
    """One pipeline's 1F1B time, its named terms (summing to it) and its bottleneck stage."""

    total_s: float
    breakdown: dict[str, float]
    bottleneck_stage: int


class Bottleneck(NamedTuple):
    """What a pipeline's 1F1B time depends on: the bottleneck stage ``k`` (the first with the
    longest steady step), its ``step`` and ``compute`` per microbatch, the sum of every stage's
    compute per microbatch, and the sum of the boundaries' transfer seconds."""

    k: int
    step: float
    compute: float
    compute_sum: float
    p2p_sum: float


def stage_steps(
    per_microbatch: list[float], p2p: list[float], virtual: int = 1, full_duplex: bool = True
) -> list[float]:
    """Steady-state 1F1B step of every stage: its compute per microbatch plus its blocking
    transfers. Each step a stage sends and receives an activation and a gradient on each of its
    boundaries (Megatron's batched send_forward_recv_backward / send_backward_recv_forward).
    Links are full duplex (NVLink, InfiniBand, Ethernet NICs send and receive at line rate at
    once), so on one boundary the activation going down and the gradient coming up overlap:
    one transfer time per boundary, 1 for the end stages, 2 for middle ones (the NIC's egress
    carries one tensor to each neighbour); twice that for frameworks whose sends and receives
    block one after the other (``transfers_per_boundary``). With ``virtual`` model chunks per
    GPU (interleaved 1F1B) every transfer happens v times."""
    v2 = transfers_per_boundary(full_duplex) * virtual
    received = [0.0, *p2p]  # boundary before stage i (none before the first)
    sent = [*p2p, 0.0]  # boundary after stage i (none after the last)
    return [_step(c, a, b, v2) for c, a, b in zip(per_microbatch, received, sent, strict=True)]


def _step(compute: float, received: float, sent: float, v2: float) -> float:
    return compute + v2 * (received + sent)


def bottleneck(
    per_microbatch: list[float], p2p: list[float], virtual: int = 1, full_duplex: bool = True
) -> Bottleneck:
    """``stage_steps``' maximum and the sums the 1F1B total needs, in one pass without lists:
    this runs for every distinct pipeline of every plan the planner scores."""
    v2, last = transfers_per_boundary(full_duplex) * virtual, len(p2p)
    k, steady, own = 0, -1.0, 0.0
    received = total = sent_sum = 0.0
    for i, c in enumerate(per_microbatch):
        sent = p2p[i] if i < last else 0.0
        step = _step(c, received, sent, v2)
        if step > steady or i == 0:  # the first stage with the longest step
            k, steady, own = i, step, c
        total += c
        sent_sum += sent
        received = sent
    return Bottleneck(k, steady, own, total, sent_sum)


def pipeline_total(
    per_microbatch: list[float],
    p2p: list[float],
    num_microbatches: int,
    virtual: int = 1,
    full_duplex: bool = True,
) -> float:
    """1F1B seconds of one pipeline from its stages' per-microbatch seconds
    (``StageTime.per_microbatch_s + MICROBATCH_OVERHEAD_S``) and its boundaries' p2p seconds.
    ``pipeline_time`` names the terms of this same sum."""
    return sum(_pipeline_terms(bottleneck(per_microbatch, p2p, virtual, full_duplex),
                               num_microbatches, virtual))  # fmt: skip


def _pipeline_terms(b: Bottleneck, m: int, virtual: int) -> tuple[float, float, float]:
    """(the bottleneck's compute for M microbatches, the fill and drain of the other stages, the
    exposed transfers): M - 1 steady steps of the slowest stage plus its own compute once, every
    other stage once, divided by ``virtual`` chunks under interleaving (Narayanan et al. 2021
    Sec. 2.2.2), and every boundary both ways once."""
    return (
        m * b.compute,
        (b.compute_sum - b.compute) / virtual,
        (m - 1) * (b.step - b.compute) + 2.0 * b.p2p_sum,
    )


def pipeline_time(
    stage_times, p2p: list[float], num_microbatches: int, virtual: int = 1, full_duplex=True
) -> PipelineTime:
    """1F1B time of one pipeline (Narayanan et al. 2021, Sec. 2.2), as named terms.

    ``stage_times``: per stage a ``StageTime``; ``p2p``: per stage boundary, seconds to move one
    microbatch's activations (the gradient back costs the same); ``virtual``: model chunks per
    GPU (interleaved 1F1B). Same total as ``pipeline_total``; terms: compute, recompute,
    tp_comm and zero_comm = M x the bottleneck's share, pipeline_bubble = the other stages'
    fill/drain, p2p = the exposed transfers.
    """
    m = num_microbatches
    per = [t.per_microbatch_s + MICROBATCH_OVERHEAD_S for t in stage_times]
    neck = bottleneck(per, p2p, virtual, full_duplex)
    _, bubble, exposed = _pipeline_terms(neck, m, virtual)
    b = stage_times[neck.k]
    breakdown = {
        "compute": m * (b.forward_s + b.backward_s + MICROBATCH_OVERHEAD_S),
        "recompute": m * b.recompute_s,
        "framework": m * b.framework_s,
        "tp_comm": m * b.tp_comm_s,
        "zero_comm": m * b.shard_comm_s,
        "expert_comm": m * b.expert_comm_s,
        "context_comm": m * b.context_comm_s,
        "pipeline_bubble": bubble,
        "p2p": exposed,
    }
    return PipelineTime(sum(breakdown.values()), breakdown, neck.k)


def iteration_terms(
    pipeline: PipelineTime,
    dp_sync_s: list[float],
    optimizer_s: list[float],
    drain_s: list[float],
    step_sync_s: float,
) -> dict[str, float]:
    """Every named term of one iteration (their sum is the iteration time), as Calculon's
    ``get_total_time``: the critical pipeline's 1F1B terms, then the exposed part of the
    data-parallel gradient sync and of the optimizer step (``exposed_tail``), then the step
    sync (loss and gradient norm all-reduced over the world)."""
    tail, optimizer = exposed_tail(dp_sync_s, optimizer_s, drain_s)
    return {
        **pipeline.breakdown,
        "dp_sync": tail - optimizer,
        "optimizer": optimizer,
        "step_sync": step_sync_s,
    }


NICS_PER_NODE: dict[str, tuple[int | None, str]] = {
    # platform -> (inter-node NICs per node, None = one per GPU; source)
    "superchip": (None, "CSCS Clariden GH200 node: 4 Slingshot-11 NICs, one per GH200"),
    "sxm": (None, "DGX A100/H100 and cloud A3/P5: one 200-400 Gb/s NIC per GPU (GPUDirect RDMA)"),
    "pcie": (1, "PCIe servers and consumer-GPU nodes: one NIC shared by the node's GPUs"),
    "cpu": (1, "one host NIC"),
}
"""How many NICs a node's concurrent inter-node transfers divide (``nics_per_node``)."""


def nics_per_node(gpu) -> int:
    """Inter-node NICs of one node of ``gpu`` (a ``GPUType``): one per GPU on SXM and
    superchip nodes, one per node on PCIe and consumer nodes (``NICS_PER_NODE``)."""
    nics = NICS_PER_NODE.get(gpu.platform, NICS_PER_NODE["sxm"])[0]
    return gpu.gpus_per_node if nics is None else nics


def p2p_transfer_time(link: LinkCurve, nbytes: float, pairs: int, flows: int = 0) -> float:
    """A stage-boundary tensor of ``nbytes`` split over ``pairs`` TP rank pairs (Megatron's
    scatter/gather, Narayanan et al. 2021 Sec. 4.1: each pair moves nbytes / pairs); ``flows``
    (default ``pairs``) such pieces leave the node at once and share ``link``, the curve of the
    NICs they have between them (aggregate bandwidth)."""
    if nbytes <= 0:
        return 0.0
    per_pair = nbytes / pairs
    return link.latency_s + (flows or pairs) * per_pair / link.bandwidth(per_pair)


def allgather_time(link: LinkCurve, nbytes: float, ranks: int) -> float:
    """Ring all-gather of ``nbytes`` (the whole, after gathering) over ``ranks`` GPUs of one
    node: (n - 1) / n of it crosses every link, in n - 1 latency-bound steps."""
    if ranks < 2 or nbytes <= 0:
        return 0.0
    return (ranks - 1) / ranks * nbytes / link.bandwidth(nbytes / ranks) + (
        ranks - 1
    ) * link.latency_s


def allreduce_time(
    link: LinkCurve, nbytes: float, ranks: int, parallel_rings: int, efficiency: float
) -> float:
    """All-reduce of ``nbytes`` over ``ranks`` in Megatron-sized buckets (``comm.allreduce_s``
    per bucket: 2(n-1)/n of the data crosses every link; ring or tree latency, whichever is
    shorter). A link with a measured ring gives its bus bandwidth and step latency; a link of
    a known fabric its p2p curve at that fabric's bus efficiency; otherwise its p2p curve at
    ``efficiency`` (``comm``)."""

    if ranks < 2 or nbytes <= 0:
        return 0.0
    buckets = max(1, math.ceil(nbytes / parallel_rings / DP_BUCKET_BYTES))
    chunk = nbytes / parallel_rings / buckets / ranks
    bw = link.ring_bandwidth(chunk, efficiency)
    return buckets * allreduce_s(nbytes / buckets, ranks, bw, link.ring_latency_s)


STEP_SYNC_BYTES = 16
"""The per-step whole-world all-reduce: two float64 (loss and squared gradient norm)."""


def step_sync_time(link: LinkCurve, ranks: int) -> float:
    """The per-step all-reduce over every rank of the loss and the squared gradient norm
    (global-norm clipping: Megatron-LM's ``clip_grad_norm_fp32`` all-reduces the norm over the
    model-parallel world, our engine's ``world_sums`` over the whole world). Latency-bound:
    a ring of 2(n-1) steps (``allreduce_time``) over the plan's slowest-latency link."""
    return allreduce_time(link, STEP_SYNC_BYTES, ranks, 1, 1.0)  # latency-bound: no bytes


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
    (a cross-zone edge is slower): its measured ring, else its fabric's bus efficiency; an
    edge between zones leaves the GPU fabric for the provider's network (cloud Ethernet)."""
    link, pairs, efficiency = edge_curve(network, a, b)
    return allreduce_time(link, grad_bytes_unsharded, ranks, pairs, efficiency)


def edge_curve(network: NetworkModel, a: RingKind, b: RingKind) -> tuple[LinkCurve, int, float]:
    """(curve, parallel rings, bus efficiency) of the a -> b ring edge
    (``edge_allreduce_time``): all of it that does not depend on the ring's size or bytes,
    so a simulator can keep it per edge."""

    (za, ga, ta), (zb, gb, tb) = a, b
    pairs = min(ta, tb)
    link = network.link(Endpoint(za, ga, pairs), Endpoint(zb, gb, pairs))
    if za == zb:
        efficiency = bus_efficiency(ga, gb)
    else:
        efficiency = of_kind(CROSS_ZONE_KIND).value
    return link, pairs, efficiency


def hierarchical_allreduce_time(
    network: NetworkModel, kind: RingKind, replicas: int, grad_bytes_unsharded: float
) -> float:
    """All-reduce over ``replicas`` equal replicas (one ``kind``) that fill nodes, as NCCL
    runs it across nodes (and as Megatron / FSDP hybrid groups do): reduce-scatter inside each
    node over NVLink / PCIe (``GPUType.intra_node_bandwidth``), all-reduce of each GPU's shard
    across nodes through the node's NICs, all-gather inside the node. r = min(replicas,
    GPUs per node / tp) replicas share a node; the TP ranks of a replica reduce their own
    shards in parallel."""

    zone, gpu_type, tp = kind
    gpu = get_gpu(gpu_type)
    per_node = max(1, min(replicas, network.gpus_per_nvlink_domain(gpu) // tp))
    nodes = -(-replicas // per_node)
    intra = network.intra_node(gpu_type, per_node * tp)
    seconds = allreduce_time(
        intra, grad_bytes_unsharded / tp, per_node, 1, intra_bus_efficiency(gpu_type)
    )
    if nodes > 1:  # every GPU's 1 / (r tp) shard, all GPUs of a node at once through its NICs
        nics = min(per_node * tp, nics_per_node(gpu))
        link = network.link(Endpoint(zone, gpu_type, nics), Endpoint(zone, gpu_type, nics))
        eff = bus_efficiency(gpu_type)
        seconds += allreduce_time(link, grad_bytes_unsharded, nodes, per_node * tp, eff)
    return seconds


def edge_egress_usd(
    network: NetworkModel, a: RingKind, b: RingKind, ranks: int, grad_bytes_unsharded: float
) -> float:
    """$ of one all-reduce over the a -> b ring edge: 2(n-1)/n of the gradients cross it."""
    if a[0] == b[0] or ranks < 2:
        return 0.0
    rate = network.egress_per_gb(a[0], b[0])
    return 2.0 * (ranks - 1) / ranks * grad_bytes_unsharded / 1e9 * rate


def bus_efficiency(gpu_type_a: str, gpu_type_b: str | None = None) -> float:
    """Ring bus efficiency (``comm.BUS_EFFICIENCY``) of the default fabric between nodes of
    two GPU types (the lower one), for links that carry no fabric of their own."""

    def one(gpu_type: str) -> float:
        return of_kind(default_inter_node_kind(get_gpu(gpu_type))).value

    return min(one(gpu_type_a), one(gpu_type_b or gpu_type_a))


def intra_bus_efficiency(gpu_type: str) -> float:
    """Ring bus efficiency of the link between GPUs of one node (NVLink / PCIe)."""

    return of_kind(intra_node_kind(get_gpu(gpu_type))).value


def tp_comm_time(model, first, last, mbs, seq, dtype, link: LinkCurve, tp: int) -> float:
    """Megatron TP all-reduces per microbatch (Shoeybi et al. 2019, Sec. 3): per block two in
    forward and two in backward on the (b, s, h) activations (fewer in a parallel block:
    ``ModelSpec.tp_all_reduces_per_block``), one in the embedding forward and one in the head
    backward; OLMo-2's whole-projection q/k norms add two small ones per block.

    Not charged: the sum of the gradients each TP rank holds a part of (per-head q/k norm
    weights, and under sequence parallelism the norms and row-parallel biases). The runtime's
    zoo issues it once per optimizer step, one coalesced all-reduce per stage after the last
    microbatch (``sailor_profiler.zoo.sync_partial_grads``, as Megatron-LM's
    ``_allreduce_layernorm_grads``), not per microbatch: KB to a few MB per stage, by the
    ring formula tens of microseconds per step on NVLink (an estimate, not measured), below
    what this model resolves. The zoo's tests count
    what it issues per microbatch against ``tp_all_reduces_per_block`` and that one per step
    (test_zoo_block_variants)."""
    if tp < 2:
        return 0.0
    blocks = max(0, min(last, model.num_layers) - max(first, 1) + 1)
    calls = model.tp_all_reduces_per_block * blocks
    calls += (1 if first == 0 else 0) + (1 if last == model.head_layer_id else 0)
    nbytes = model.activation_out_bytes(0, mbs, seq, dtype)
    seconds = calls * _all_reduce_s(link, nbytes, tp)
    if model.qk_norm and model.qk_norm_kind == "full":
        # The q and k norms' per-token fp32 sums of squares in forward, and the per-token
        # sums their backward needs, each all-reduced across the ranks splitting the heads.
        stats = mbs * seq * 2 * 4
        seconds += 2 * blocks * _all_reduce_s(link, stats, tp)
    return seconds


def _all_reduce_s(link: LinkCurve, nbytes: float, tp: int) -> float:
    """Ring all-reduce of ``nbytes`` over ``tp`` ranks of one node."""
    return (
        2.0 * (tp - 1) / tp * nbytes / link.bandwidth(nbytes / tp) + 2 * (tp - 1) * link.latency_s
    )


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
    tail, opt, lead = dp_sync_s[0] + optimizer_s[0], optimizer_s[0], 0.0
    for sync, step, drained in zip(dp_sync_s[1:], optimizer_s[1:], drain_s, strict=False):
        lead += drained
        exposed = sync + step - lead
        if exposed > tail:
            tail, opt = exposed, step
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
    "StageTime",
    "allreduce_time",
    "bus_efficiency",
    "intra_bus_efficiency",
    "dp_egress_usd",
    "edge_allreduce_time",
    "edge_curve",
    "edge_egress_usd",
    "hierarchical_allreduce_time",
    "egress_usd",
    "exposed_tail",
    "kind_edges",
    "pipeline_total",
    "p2p_transfer_time",
    "allgather_time",
    "nics_per_node",
    "pipeline_time",
    "iteration_terms",
    "stage_steps",
    "transfers_per_boundary",
    "relationship",
    "ring_kinds",
    "step_sync_time",
    "tp_comm_time",
]
