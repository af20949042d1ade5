"""The communication model: full-duplex stage transfers, the framework's p2p rule as a CLI
option, bus efficiency per fabric (sourced), and the cluster given with --fabric."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sailor_sim import Job, Plan, Simulator, get_gpu
from sailor_sim.catalog.cluster import Cluster, load_cluster
from sailor_sim.cli.app import app
from sailor_sim.errors import SailorError
from sailor_sim.simulate import comm, timing
from sailor_sim.simulate.network import NetworkModel
from sailor_sim.spec.options import P2P_STYLES, ExecutionOptions

Z = "us-central1-a"
REPO = Path(__file__).resolve().parents[3]
runner = CliRunner()


def test_full_duplex_boundary_costs_one_transfer_per_step():
    """Three stages of 1 s, boundaries of 0.5 s: a middle stage's NIC sends one tensor to
    each neighbour while receiving the others (1 + 0.5 + 0.5); a framework whose sends and
    receives block in turn pays each boundary twice (1 + 2 x (0.5 + 0.5))."""
    assert timing.stage_steps([1.0, 1.0, 1.0], [0.5, 0.5]) == [1.5, 2.0, 1.5]
    blocking = timing.stage_steps([1.0, 1.0, 1.0], [0.5, 0.5], full_duplex=False)
    assert blocking == [2.0, 3.0, 2.0]
    m = 8  # the fast-path total is the same rule: (M - 1) steps of the slowest stage + fill
    total = timing.pipeline_total([1.0, 1.0, 1.0], [0.5, 0.5], m)
    assert total == pytest.approx(1.0 + 2.0 / 1 + 2 * 1.0 + (m - 1) * 2.0)


def test_p2p_style_is_a_cli_option_and_deepspeed_is_slower():
    """The original Sailor's rule (DeepSpeed's PipelineEngine: whole tensors from every TP
    rank, blocking) is reachable from the CLI, and costs more p2p than Megatron's."""
    args = ["simulate", "--model", "OPT-350", "--gbs", "64", "--seq", "2048", "--gpu"]
    args += ["A100-40", "--tp", "4", "--pp", "4", "--dp", "1", "--mbs", "2", "--json"]
    fast = runner.invoke(app, args)
    slow = runner.invoke(app, [*args, "--p2p", "deepspeed"])
    assert fast.exit_code == 0 and slow.exit_code == 0, fast.output + slow.output
    p2p = [json.loads(r.output)["breakdown"]["p2p"] for r in (fast, slow)]
    assert p2p[1] > 2 * p2p[0] > 0  # twice per boundary, and tp x the bytes
    bad = runner.invoke(app, [*args, "--p2p", "gloo"])
    assert bad.exit_code == 2 and "--p2p" in bad.output and "megatron" in bad.output
    assert ExecutionOptions(p2p_scatter_gather=P2P_STYLES["deepspeed"]).p2p_full_duplex is False


def test_every_fabric_kind_has_a_sourced_efficiency_and_no_flat_half():
    for kind, eff in comm.BUS_EFFICIENCY.items():
        assert 0 < eff.value <= 1 and len(eff.source) > 20, kind
    assert comm.bus_efficiency("InfiniBand NDR").value == pytest.approx(47 / 50, abs=0.01)
    assert comm.bus_efficiency("NVLink").value == pytest.approx(370 / 450, abs=0.01)
    with pytest.raises(SailorError, match="known: "):
        comm.bus_efficiency("token ring")


def _cluster(kind: str) -> Cluster:
    return Cluster(kind, 8, 200, 8, 8, "on-prem", 5e-6, "test")


def test_cross_node_allreduce_scales_with_the_fabric_bus_efficiency():
    """Two full A100 nodes, 200 Gb/s per GPU: the all-reduce across nodes moves the same
    bytes on RoCE (0.94 of line rate) and EFA (0.59), so its time scales as 0.94 / 0.59;
    inside the node both use NVLink. Physics bound: the NIC moves each GPU's 1/8 shard."""
    j = Job.create("GPT-1.7B", 64, 2048, "bf16")
    times = {}
    for kind in ("RoCE", "AWS EFA"):
        net = NetworkModel()
        net.set_cluster(_cluster(kind))
        sim = Simulator(network=net)
        plan = Plan.uniform(j, "A100-80", Z, pp=1, dp=16, tp=1, microbatch_size=1)
        times[kind] = sim.dp_sync_time(j, 0, j.model.head_layer_id, plan.stages[0].replicas)
        grad = sim.grad_bytes(j, 0, j.model.head_layer_id)
        shard_bound = 2 * (2 - 1) / 2 * grad / 8 / (25e9 * comm.bus_efficiency(kind).value)
        assert times[kind] >= shard_bound
    ratio = times["AWS EFA"] / times["RoCE"]
    assert 1.2 < ratio <= 0.94 / 0.59 + 1e-9


def test_cluster_nvlink_domain_bounds_the_intra_node_step():
    """With an NVLink domain of 2 (of 8 GPUs), four domains per node meet over the NICs:
    the all-reduce is slower than with the whole node in one domain."""
    j = Job.create("GPT-1.7B", 64, 2048, "bf16")
    plan = Plan.uniform(j, "A100-80", Z, pp=1, dp=16, tp=1, microbatch_size=1)
    out = []
    for domain in (8, 2):
        net = NetworkModel()
        net.set_cluster(Cluster("InfiniBand HDR", 8, 200, 8, domain, "on-prem", 5e-6, "test"))
        sim = Simulator(network=net)
        out.append(sim.dp_sync_time(j, 0, j.model.head_layer_id, plan.stages[0].replicas))
    assert out[1] > out[0]


def test_fabric_option_changes_the_network_and_prints_it(tmp_path):
    cluster = tmp_path / "cluster.json"
    cluster.write_text(
        json.dumps(
            {
                "format": "sailor-cluster/1",
                "fabric": "InfiniBand NDR",
                "nics_per_node": 8,
                "nic_gbps": 400,
                "gpus_per_node": 8,
                "nvlink_domain": 8,
                "deployment": "on-prem",
            }
        )
    )
    args = ["simulate", "--model", "GPT-1.7B", "--gbs", "64", "--seq", "2048", "--dtype"]
    args += ["bf16", "--gpu", "A100-80", "--dp", "32", "--json"]
    default = json.loads(runner.invoke(app, args).output)
    ib = runner.invoke(app, [*args, "--fabric", str(cluster)])
    assert ib.exit_code == 0, ib.output
    ib = json.loads(ib.output)
    assert "gcp-eth-100" in default["network"][0]  # the provider default, said so
    assert "InfiniBand NDR" in ib["network"][0] and "400 Gb/s per GPU" in ib["network"][0]
    assert ib["breakdown"]["dp_sync"] < default["breakdown"]["dp_sync"] / 5
    table = runner.invoke(app, [*args[:-1], "--fabric", "ib-hdr-8x200"])
    assert table.exit_code == 0 and "Network: A100-80" in table.output
    assert "InfiniBand HDR" in " ".join(table.output.split())


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ({"format": "sailor-cluster/1", "fabric": "IB"}, "known: "),
        ({"format": "x"}, "sailor-cluster/1"),
        (
            {"format": "sailor-cluster/1", "fabric": "RoCE", "nics_per_node": 0},
            "nics_per_node",
        ),
        (
            {
                "format": "sailor-cluster/1",
                "fabric": "RoCE",
                "nics_per_node": 2,
                "gpus_per_node": 8,
                "nic_gbps": -1,
            },
            "nic_gbps",
        ),
    ],
)
def test_bad_cluster_file_is_one_line_exit_2(tmp_path, content, named):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(content))
    with pytest.raises(SailorError, match=named):
        load_cluster(path)
    r = runner.invoke(app, ["simulate", "--model", "OPT-350", "--gbs", "8"] + [
        "--gpu", "A100-40", "--fabric", str(path),
    ])  # fmt: skip
    assert r.exit_code == 2 and r.output.count("\n") == 1 and named in r.output


def _zero3(cluster_kind: str = "InfiniBand HDR", dp: int = 16):
    j = Job.create("GPT-1.7B", 64, 2048, "bf16", "adamw", ExecutionOptions(zero="zero3"))
    net = NetworkModel()
    net.set_cluster(_cluster(cluster_kind))
    sim = Simulator(network=net)
    plan = Plan.uniform(j, "A100-80", Z, pp=1, dp=dp, tp=1, microbatch_size=1)
    stage, r = plan.stages[0], plan.stages[0].replicas[0]
    t = sim._replica_compute(j, stage, 0, 1, r, sim.cache.stage_id(stage))[0]
    return sim, j, stage, t


def test_zero3_gathers_overlap_layer_by_layer_and_the_first_is_exposed():
    """On a fast fabric the stage's whole ZeRO-3 traffic is shorter than its compute (the
    old whole-stage overlap hid all of it), yet FSDP cannot prefetch the first layer's
    parameters nor hide the last reduce-scatter: they stay exposed, every microbatch."""
    sim, j, stage, t = _zero3()
    first = stage.first_layer
    gather0 = sim._layer_collective_s(j, stage, first, "params")
    scatter0 = sim._layer_collective_s(j, stage, first, "grads")
    total = sum(
        2 * sim._layer_collective_s(j, stage, i, "params")
        + sim._layer_collective_s(j, stage, i, "grads")
        for i in stage.layer_ids
    )
    assert total < t.forward_s + t.backward_s  # the whole-stage rule: nothing exposed
    assert t.shard_comm_s >= gather0 + scatter0 > 0
    assert t.shard_comm_s < total


def test_zero3_exposed_traffic_grows_on_a_slower_fabric():
    """The same plan on EFA (0.59 bus efficiency) exposes more than on InfiniBand (0.94)."""
    assert _zero3("AWS EFA")[3].shard_comm_s > _zero3("InfiniBand HDR")[3].shard_comm_s


def test_collective_volumes_follow_nccl_tests_bus_bandwidth():
    """nccl-tests' bus bandwidth: all-reduce moves 2(n-1)/n of the buffer per rank, all-gather
    and reduce-scatter (n-1)/n, all-to-all (n-1)/n of each rank's buffer."""
    gb, bw = 1e9, 100e9
    assert comm.allreduce_s(gb, 8, bw, 0.0) == pytest.approx(2 * 7 / 8 * gb / bw)
    assert comm.allgather_s(gb, 8, bw, 0.0) == pytest.approx(comm.allreduce_s(gb, 8, bw, 0) / 2)
    assert comm.reduce_scatter_s(gb, 8, bw, 0.0) == comm.allgather_s(gb, 8, bw, 0.0)
    assert comm.alltoall_s(gb, 8, bw, 1e-5) == pytest.approx(7 / 8 * gb / bw + 1e-5)
    assert comm.allreduce_s(gb, 1, bw, 1.0) == 0.0


def test_large_groups_pay_tree_latency_not_a_rings():
    """A ring of n takes 2(n-1) steps; NCCL's double binary tree 2 log2(n): with 1024 ranks
    the latency term is 20 steps, not 2046 (the simulator's all-reduce of a tiny buffer)."""
    assert comm.latency_steps(4) == 4  # 2 (n - 1) = 6 > 2 log2 4 = 4
    assert comm.latency_steps(2) == 2
    assert comm.latency_steps(1024) == 20 and comm.latency_steps(1024, 1) == 10
    link_latency = 1e-5
    t = comm.allreduce_s(16, 1024, 1e9, link_latency)
    assert t == pytest.approx(20 * link_latency, rel=1e-3)


def test_sim_validation_uses_the_rule_the_cli_builds(bench):
    """One rule: the GH200 bench's job options are exactly what `--p2p deepspeed` builds."""
    from sailor_sim.cli.options import with_p2p

    bench = bench("sim_validation")

    class Rec:
        global_batch_size = 8

    assert bench.validation_job(Rec()).options == with_p2p(ExecutionOptions(), bench.P2P)
    assert bench.P2P in P2P_STYLES


def test_a_catalog_fabric_is_shared_by_the_gpu_types_own_node():
    """A catalog fabric is quoted per node: GH200 nodes hold 4 GPUs, so Slingshot's
    4 x 200 Gb/s give each GPU 200 Gb/s (not 800 / 8), the same as the catalog default."""
    from sailor_sim.catalog.cluster import from_catalog
    from sailor_sim.simulate.network import Endpoint

    net = NetworkModel()
    net.set_cluster(from_catalog("slingshot-4x200"))
    end = Endpoint(Z, "GH-96", 1)
    assert net.link(end, end).max_bandwidth == pytest.approx(200e9 / 8)
    assert net.link(end, end).max_bandwidth == NetworkModel().link(end, end).max_bandwidth
    assert net.gpus_per_nvlink_domain(get_gpu("GH-96")) == get_gpu("GH-96").gpus_per_node


def test_a_ring_edge_between_zones_runs_at_the_providers_ethernet_efficiency():
    """H200 nodes default to RoCE (0.94) inside a zone; a ring edge between two zones is on
    the provider's IP network: the cloud Ethernet figure (0.59), whatever the GPU's fabric."""
    from sailor_sim.simulate.network import Endpoint

    net = NetworkModel()
    a, b = (Z, "H200", 1), ("us-central1-b", "H200", 1)
    link = net.link(Endpoint(*a), Endpoint(*b))
    gb = 1e9
    t = timing.edge_allreduce_time(net, a, b, 2, gb)
    ethernet = comm.bus_efficiency("cloud Ethernet").value
    expected = timing.allreduce_time(link, gb, 2, 1, ethernet)
    assert t == pytest.approx(expected)
    assert t > timing.allreduce_time(link, gb, 2, 1, comm.bus_efficiency("RoCE").value)


def test_tp_stays_within_a_node_of_the_cluster_given(tmp_path):
    """A cluster file of 4 A100 per node (Perlmutter, JUWELS Booster, Leonardo): TP 8 spans
    two nodes, yet it was accepted and its all-reduces timed on one node's NVLink (only the
    catalog's 8-GPU node was checked). Refused like the catalog's node, naming tp's bound;
    TP 4 runs."""
    node4 = {"format": "sailor-cluster/1", "fabric": "InfiniBand HDR", "nics_per_node": 4,
             "nic_gbps": 200, "gpus_per_node": 4, "nvlink_domain": 4}  # fmt: skip
    cluster = tmp_path / "node4.json"
    cluster.write_text(json.dumps(node4))
    args = ["simulate", "--model", "LLaMA-3.1-70B", "--gbs", "16", "--seq", "4096", "--dtype"]
    args += ["bf16", "--gpu", "A100-80", "--dp", "2", "--fabric", str(cluster), "--tp"]
    wide = runner.invoke(app, [*args, "8"])
    assert wide.exit_code == 2 and wide.output.startswith("error: plan.stages[0]"), wide.output
    assert "TP 8 exceeds the 4 GPUs of a node" in wide.output and "tp <= 4" in wide.output
    assert runner.invoke(app, [*args, "4"]).exit_code == 0
    net = NetworkModel()
    net.set_cluster(load_cluster(cluster))
    j = Job.create("LLaMA-3.1-70B", 16, 4096, "bf16")
    plan = Plan.uniform(j, "A100-80", Z, pp=1, dp=2, tp=8, microbatch_size=1)
    with pytest.raises(SailorError, match="TP 8 exceeds"):
        Simulator(network=net).estimate(j, plan)


def test_cp_and_ep_groups_cross_the_nics_beyond_the_clusters_node():
    """A CP (or EP) group of 8 GPUs fits in a catalog A100 node, so its exchange ran on NVLink
    even under a cluster file of 4-GPU nodes, where it spans two nodes and crosses the NICs:
    the same NICs per GPU, so only the node size differs and the small nodes are slower."""

    def comm_s(per_node: int, options: dict, model: str) -> float:
        net = NetworkModel()
        net.set_cluster(Cluster("InfiniBand HDR", per_node, 200, per_node, per_node,
                                "on-prem", 5e-6, "test"))  # fmt: skip
        j = Job.create(model, 8, 8192, "bf16", options=ExecutionOptions(**options))
        plan = Plan.uniform(j, "A100-80", Z, pp=1, dp=8, tp=1, microbatch_size=1)
        terms = Simulator(network=net).estimate(j, plan).time_breakdown_s
        return terms["context_comm"] + terms["expert_comm"]

    cp = {"context_parallel": 8}
    assert comm_s(4, cp, "LLaMA-3.1-8B") > comm_s(8, cp, "LLaMA-3.1-8B") >= 0
    ep, mixtral = {"expert_parallel": 8}, str(REPO / "examples" / "configs" / "mixtral-8x7b")
    assert comm_s(4, ep, mixtral) > comm_s(8, ep, mixtral) >= 0
