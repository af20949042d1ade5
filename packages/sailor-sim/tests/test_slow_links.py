"""Plans over 1 Gbit/s links: stage-boundary p2p split over TP ranks, a node's NIC shared by
its GPUs, hierarchical data-parallel all-reduce; every figure checked against physics."""

from __future__ import annotations

import pytest

from sailor_sim import Job, Plan, Simulator, get_gpu
from sailor_sim.simulate import timing
from sailor_sim.simulate.network import Endpoint, LinkCurve, NetworkModel

Z = "us-central1-a"
GPU = "RTX-3090"  # PCIe node of 8 GPUs, one NIC
NIC = 125e6  # 1 Gbit/s in bytes/s
LATENCY = 1e-4


def slow_network() -> NetworkModel:
    net = NetworkModel()
    one = Endpoint(Z, GPU, 1)
    net.add_link(one, one, LinkCurve(NIC, LATENCY, "test: measured 1 Gbit/s Ethernet"))
    return net


def job() -> Job:
    return Job.create("OPT-350M", 64, 2048, "fp32")


@pytest.mark.parametrize("pp", [2, 4])
def test_p2p_over_a_shared_1gbit_nic_scales_as_one_over_tp(pp):
    """Full nodes (dp = 8 / tp replicas per stage): every replica sends its activation at once
    through the node's one NIC, split over its TP ranks. Physics: the NIC moves
    dp * (b s h) bytes at <= 1 Gbit/s, so one transfer takes at least dp * bytes / NIC; with dp
    = 8 / tp that is 8 * bytes / (tp * NIC): 1 / tp. Upper bound: plus latency and the
    receiver's all-gather over PCIe."""
    sim, j = Simulator(network=slow_network()), job()
    nbytes = j.model.activation_out_bytes(1, 1, 2048, "fp32")
    pcie = get_gpu(GPU).intra_node_bandwidth
    scaled = []
    for tp in (2, 4, 8):
        dp = 8 // tp
        plan = Plan.uniform(j, GPU, Z, pp=pp, dp=dp, tp=tp, microbatch_size=1)
        r = plan.stages[0].replicas[0]
        t = sim.p2p_time(j, plan.stages[0].last_layer, r, r, dp)
        lower = dp * nbytes / NIC
        assert lower <= t <= lower + LATENCY + (tp - 1) / tp * nbytes / pcie * 1.5 + tp * 1e-4
        scaled.append(t * tp)
        e = sim.estimate(j, plan)
        assert e.iteration_time_s == sum(e.time_breakdown_s.values())
        m = r.num_microbatches
        # 1F1B, full duplex: the activation down and the gradient up cross a boundary at
        # once: >= 1 transfer per step, at most 2 per stage (middle), M + 1 steps
        assert e.time_breakdown_s["p2p"] <= 2 * 2 * (m + 1) * t
        assert e.time_breakdown_s["p2p"] >= (m - 1) * t
    assert max(scaled) / min(scaled) < 1.15  # p2p x tp is constant: 1 / tp


def test_tp_ranks_do_not_each_send_the_whole_activation():
    """One pipeline on one node (dp 1): its TP pieces share the NIC, so the transfer is one
    activation's worth of bytes, not tp of them (the old model's 7.7x over-prediction)."""
    sim, j = Simulator(network=slow_network()), job()
    nbytes = j.model.activation_out_bytes(1, 1, 2048, "fp32")
    for tp in (2, 4, 8):
        plan = Plan.uniform(j, GPU, Z, pp=2, dp=1, tp=tp, microbatch_size=1)
        r = plan.stages[0].replicas[0]
        t = sim.p2p_time(j, plan.stages[0].last_layer, r, r, 1)
        assert nbytes / NIC <= t < 1.2 * nbytes / NIC


def test_gpus_with_their_own_nics_split_the_transfer():
    """SXM nodes have a NIC per GPU: the tp pieces travel in parallel, 1 / tp of the time."""
    sim, j = Simulator(), job()
    nbytes = j.model.activation_out_bytes(1, 1, 2048, "fp32")
    nvlink = get_gpu("A100-40").intra_node_bandwidth
    times = []
    for tp in (1, 2, 4):
        plan = Plan.uniform(j, "A100-40", Z, pp=2, dp=1, tp=tp, microbatch_size=1)
        r = plan.stages[0].replicas[0]
        link = sim.network.link(Endpoint(Z, "A100-40", tp), Endpoint(Z, "A100-40", tp))
        gather = (tp - 1) / tp * nbytes / nvlink + (tp - 1) * 1e-5
        wire = sim.p2p_time(j, plan.stages[0].last_layer, r, r, 1) - link.latency_s - gather
        times.append(wire * tp)
    assert max(times) / min(times) < 1.05


def test_data_parallel_inside_one_node_uses_nvlink():
    """All replicas in one node: the all-reduce runs over NVLink, not the 1.45 GB/s
    inter-node default. Physics: 2 (n - 1) / n of the gradient bytes per GPU at the
    platform's bus efficiency of the intra-node link, plus per-bucket latency."""
    sim, j = Simulator(), job()
    gpu = get_gpu("A100-40")
    dp = gpu.gpus_per_node
    plan = Plan.uniform(j, "A100-40", Z, pp=1, dp=dp, tp=1, microbatch_size=1)
    grad = sim.grad_bytes(j, 0, j.model.head_layer_id)
    t = sim.dp_sync_time(j, 0, j.model.head_layer_id, plan.stages[0].replicas)
    eff = timing.intra_bus_efficiency("A100-40")
    ideal = 2 * (dp - 1) / dp * grad / (gpu.intra_node_bandwidth * eff)
    assert ideal <= t <= 1.2 * ideal + 0.01
    flat = 2 * (dp - 1) / dp * grad / 1.45e9  # the inter-node default
    assert t < flat / 10


def test_data_parallel_across_nodes_is_hierarchical():
    """Two full nodes of 1 Gbit/s: each GPU reduces 1 / 8 of the gradients across nodes,
    all eight through the node's one NIC; bounded below by the NIC moving the gradient once
    each way (2 (N - 1) / N of it, N = 2 nodes)."""
    sim, j = Simulator(network=slow_network()), job()
    plan = Plan.uniform(
        j,
        GPU,
        Z,
        pp=1,
        dp=16,
        tp=1,
        microbatch_size=1,
    )
    grad = sim.grad_bytes(j, 0, j.model.head_layer_id)
    t = sim.dp_sync_time(j, 0, j.model.head_layer_id, plan.stages[0].replicas)
    eff = timing.bus_efficiency(GPU)
    nic_bound = 2 * (2 - 1) / 2 * grad / (NIC * eff)
    assert nic_bound <= t <= 1.5 * nic_bound
    flat_ring = 2 * 15 / 16 * grad / (NIC * eff)  # 16 ranks in a ring over 1 Gbit/s
    assert t < 0.6 * flat_ring


def test_same_zone_links_default_to_the_instances_fabric():
    """Without a measured links.json, nodes of one zone talk over their instances' fabric
    (data/instances.json, with its source) per GPU, not the 1.45 GB/s seed default; CPU
    workers (no instance offer) keep the seed default; a measured curve still wins."""
    from sailor_sim import NetworkModel, fabric_for, get_gpu
    from sailor_sim.simulate.network import DEFAULT_LINKS, Endpoint, LinkCurve

    net = NetworkModel()
    h100 = Endpoint("us-central1-a", "H100-80", 1)
    fabric = fabric_for("H100-80", "gcp")
    curve = net.link(h100, h100)
    assert curve.max_bandwidth == pytest.approx(
        fabric.bandwidth_per_gpu(get_gpu("H100-80").gpus_per_node)
    )
    assert fabric.name in curve.source
    assert net.link(Endpoint("us-central1-a", "H100-80", 4), h100).max_bandwidth == pytest.approx(
        4 * curve.max_bandwidth
    )
    cpu = Endpoint("local", "cpu-1t", 1)
    assert net.link(cpu, cpu).max_bandwidth == pytest.approx(DEFAULT_LINKS["same-zone"][0])
    net.add_link(h100, h100, LinkCurve(1e9, 1e-4, "measured"))
    assert net.link(h100, h100).source == "measured"


ZONES_8 = tuple(f"us-central1-{c}" for c in "abcf") + tuple(
    f"{region}-{c}" for region, cs in (("us-east1", "bc"), ("us-west1", "ab")) for c in cs
)
"""Five zones with Sailor fits of their own; three (us-east1-b, -c, us-west1-a) share links."""


def test_zones_with_one_ring_signature_time_every_ring_inside_them_alike(sailor_sim_imported):
    """``zone_ring_signature``: the planner's bounds time one zone per signature, so zones
    that share one must give every ring inside them (one or two kinds, flat or hierarchical,
    any size and bytes) the same seconds; the Sailor fits tell some zones apart."""
    sim = sailor_sim_imported
    types = ("A100-40", "H100-80", "V100-16")
    classes: dict[tuple, list[str]] = {}
    for z in ZONES_8:
        classes.setdefault(sim.zone_ring_signature(z, types), []).append(z)
    assert 1 < len(classes) < len(ZONES_8)  # some zones share links, some do not
    rings = [(((g, tp), n),) for g in types for tp in (1, 4) for n in (2, 7, 64)] + [
        ((("A100-40", 2), 3), (("V100-16", 2), 5)),
        ((("H100-80", 8), 16), (("V100-16", 1), 2)),
    ]
    for zones in classes.values():
        for kinds in rings:
            for nbytes in (4e6, 1.3e9):
                seconds = {
                    sim.ring_time(None, 0, 0, tuple(((z, *k), n) for k, n in kinds), nbytes)
                    for z in zones
                }
                assert len(seconds) == 1, (zones, kinds, nbytes, seconds)
