"""The communication model: full-duplex stage transfers, the framework's p2p rule as a CLI
option, bus efficiency per fabric (sourced), and the cluster given with --fabric."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sailor_sim import Job, Plan, Simulator, comm, timing
from sailor_sim.cli import app
from sailor_sim.cluster import Cluster, load_cluster
from sailor_sim.errors import SailorError
from sailor_sim.network import NetworkModel
from sailor_sim.options import P2P_STYLES, ExecutionOptions

Z = "us-central1-a"
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
    assert "InfiniBand HDR" in table.output


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
    t = sim._replica_compute(j, stage, 0, 1, r, stage._sig)[0]
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
