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


def test_the_client_takes_the_hundred_plans_the_cli_prints(address, capsys) -> None:
    """--top 100 printed 100 plans, but PlannerClient.plan(top_k=100) on the same 1024 GPUs
    failed RESOURCE_EXHAUSTED 'CLIENT: Received message larger than max (7205159 vs.
    4194304)' after the whole search: each ranked plan's estimate lists every replica's memory,
    and gRPC channels accept 4 MiB by default."""
    gpus = ("A100-40@us-central1-a=1024",)
    job = Job.create("OPT-350M", 1024, 2048)
    code = run_plan(
        PlanArgs("OPT-350M", 1024, 2048, gpus=gpus, top=100, search_options=False, as_json=True)
    )
    assert code == 0
    cli = json.loads(capsys.readouterr().out)
    with PlannerClient(address, timeout_s=300) as client:
        got = client.plan(
            job, Inventory.parse(list(gpus)), top_k=100, search_execution_options=False
        )
    assert len(got.plans) == len(cli["plans"]) == 100
    assert [p.estimate.iteration_time_s for p in got.plans] == pytest.approx(
        [p["estimate"]["iteration_time_s"] for p in cli["plans"]], rel=1e-12
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [("top_k", -1), ("top_k", 101), ("top_k", 2**33), ("top_k", 1.5), ("top_k", True),
     ("pareto_points", -1), ("pareto_points", 101)],
)  # fmt: skip
def test_client_refuses_out_of_range_counts_naming_the_field(field: str, value) -> None:
    """top_k=-1 raised protobuf's bare ValueError 'Value out of range: -1' (no field), 1.5 a
    TypeError; the client's errors are RequestError naming the field, as for the objective."""
    with pytest.raises(RequestError, match=f"^{field}: must be an integer from 0 to 100"):
        PlannerClient.request(JOB, Inventory.parse(list(GPUS)), **{field: value})


@pytest.mark.parametrize("timeout_s", [float("inf"), None])
def test_an_infinite_client_timeout_means_no_deadline(address, timeout_s) -> None:
    """timeout_s=float('inf') failed DEADLINE_EXCEEDED at once, without reaching the server."""
    with PlannerClient(address, timeout_s=timeout_s) as client:
        assert client.plan(JOB, Inventory.parse(list(GPUS)), search_execution_options=False).plans
    with PlannerClient(address) as client:  # per call too
        got = client.plan(
            JOB, Inventory.parse(list(GPUS)), search_execution_options=False, timeout_s=timeout_s
        )
        assert got.plans


@pytest.mark.parametrize("timeout_s", [0, -1.0, float("nan"), "60"])
def test_a_client_timeout_that_is_no_duration_is_refused(address, timeout_s) -> None:
    """NaN and -1 failed DEADLINE_EXCEEDED at once, and 0 silently meant the 60 s default."""
    with pytest.raises(RequestError, match="^timeout_s: must be a number of seconds > 0"):
        PlannerClient(address, timeout_s=timeout_s)
    with PlannerClient(address) as client, pytest.raises(RequestError, match="^timeout_s: "):
        client.plan(JOB, Inventory.parse(list(GPUS)), timeout_s=timeout_s)


def test_client_counts_left_unset_are_the_servers_defaults() -> None:
    for unset in (0, None):
        wire = PlannerClient.request(
            JOB, Inventory.parse(list(GPUS)), top_k=unset, pareto_points=unset
        )
        assert (wire.top_k, wire.pareto_points) == (0, 0)


@pytest.mark.parametrize(
    "address, needle",
    [
        ("127.0.0.1", "is not HOST:PORT"),  # gRPC dials port 443
        ("127.0.0.1:70000", "port 70000 is not in 1..65535"),
        ("not an address:::", "is not HOST:PORT"),
        ("::1:50051", "write an IPv6 address as [ADDR]:PORT"),
    ],
)
def test_a_client_address_that_is_no_host_and_port_is_refused_at_once(address, needle) -> None:
    """These were dialed as given: each call waited for a server until its deadline (60 s by
    default) and failed DEADLINE_EXCEEDED 'Deadline Exceeded', naming nothing."""
    with pytest.raises(RequestError, match="^address: ") as exc:
        PlannerClient(address, timeout_s=5)
    assert needle in str(exc.value)


def test_a_client_takes_grpc_uri_targets(address) -> None:
    port = address.rsplit(":", 1)[1]
    for target in (f"dns:///127.0.0.1:{port}", f"ipv4:127.0.0.1:{port}", f"localhost:{port}"):
        with PlannerClient(target, timeout_s=60) as client:
            got = client.plan(JOB, Inventory.parse(list(GPUS)), search_execution_options=False)
            assert got.plans
