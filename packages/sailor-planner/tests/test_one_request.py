"""One request, one default: the CLI, gRPC and PlannerClient give the same answer (issue 22)."""

import json

import grpc
import pytest

from sailor_planner.errors import RequestError
from sailor_planner.planrun import PlanArgs, run_plan
from sailor_planner.proto import planner_pb2, planner_pb2_grpc
from sailor_planner.service.client import PlannerClient
from sailor_planner.service.server import create_server
from sailor_sim import Inventory, Job

JOB = Job.create("OPT-350M", 256, 2048)
GPUS = ("A100-40@us-central1-a=16", "V100-16@us-central1-b=16")


@pytest.fixture(scope="module")
def address():
    server, port = create_server("127.0.0.1:0")
    yield f"127.0.0.1:{port}"
    server.stop(grace=None)


def _cli(capsys, **kwargs) -> dict:
    code = run_plan(PlanArgs("OPT-350M", 256, 2048, gpus=GPUS, as_json=True, **kwargs))
    assert code == 0
    return json.loads(capsys.readouterr().out)


def test_cli_grpc_and_client_agree_by_default(address, capsys) -> None:
    """The option search was on in the CLI and off over gRPC: one question, two answers (here
    ZeRO-3 makes the best plan ~8 % faster)."""
    cli = _cli(capsys)
    with PlannerClient(address, timeout_s=120) as client:
        via_client = client.plan(JOB, Inventory.parse(list(GPUS))).best
    stub = planner_pb2_grpc.PlannerServiceStub(grpc.insecure_channel(address))
    raw = planner_pb2.PlanRequest(
        job=JOB.to_proto(), inventory=Inventory.parse(list(GPUS)).to_proto()
    )
    via_wire = stub.Plan(raw, timeout=120).plans[0]
    thr = cli["estimate"]["throughput_iters_per_s"]
    assert via_client.estimate.throughput_iters_per_s == pytest.approx(thr, rel=1e-12)
    assert via_wire.estimate.throughput_iters_per_s == pytest.approx(thr, rel=1e-12)
    assert via_client.options is not None
    assert via_client.options.to_dict() == cli["plans"][0]["options"]


def test_fixed_options_travel_the_same_on_every_interface(address, capsys) -> None:
    cli = _cli(capsys, search_options=False)
    with PlannerClient(address, timeout_s=120) as client:
        got = client.plan(JOB, Inventory.parse(list(GPUS)), search_execution_options=False).best
    assert got.estimate.throughput_iters_per_s == pytest.approx(
        cli["estimate"]["throughput_iters_per_s"], rel=1e-12
    )
    assert got.options.to_dict() == JOB.options.to_dict()


def test_client_refuses_a_misspelled_objective() -> None:
    """'cots' went out as OBJECTIVE_UNSPECIFIED, i.e. throughput, silently."""
    with pytest.raises(RequestError, match="unknown objective 'cots'"):
        PlannerClient.request(JOB, Inventory.parse(list(GPUS)), objective="cots")


def test_the_wire_carries_what_the_cli_prints(address) -> None:
    """The wire estimate had no tokens/s, MFU, provenance or cost per provider."""
    import dataclasses

    from sailor_sim.simulate import metrics
    from sailor_sim.simulate.simulator import Simulator

    with PlannerClient(address, timeout_s=120) as client:
        best = client.plan(JOB, Inventory.parse(list(GPUS))).best
    job = dataclasses.replace(JOB, options=best.options)
    estimate = Simulator().estimate(job, best.plan)
    rate = metrics.throughput(job, best.plan, estimate)
    m = best.metrics
    assert m.tokens_per_s == pytest.approx(rate.tokens_per_s, rel=1e-12)
    assert m.mfu == pytest.approx(rate.mfu, rel=1e-12) and 0 < m.mfu < 1
    assert [p.source for p in m.provenance] == list(estimate.sources)
    providers = metrics.cost_by_provider(best.plan)
    assert [c.provider for c in m.cost_by_provider] == [c["provider"] for c in providers]
    assert any(c.usd_per_hour > 0 for c in m.cost_by_provider)
