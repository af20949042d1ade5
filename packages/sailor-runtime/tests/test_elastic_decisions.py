"""The controller's re-plan decisions (issue 19 item 5, issue 24 item 5): a real controller, a
real planner server and real gRPC agent endpoints on 127.0.0.1. The agents here only record
what the controller asks of them (no rank processes), so every decision is seen exactly."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from sailor_planner.service.server import create_server
from sailor_runtime.agent.gpus import NodeGpus
from sailor_runtime.agent.ranks import RankRunner
from sailor_runtime.agent.service import AgentServicer, create_agent_server
from sailor_runtime.controller.controller import Controller, ControllerConfig
from sailor_runtime.controller.service import create_controller_server
from sailor_runtime.controller.state import ControllerState
from sailor_runtime.proto import agent_pb2, agent_pb2_grpc, controller_pb2, controller_pb2_grpc
from sailor_runtime.security import TlsFiles, call_metadata
from sailor_sim import Job, Plan, SailorError
from sailor_testing import free_port

JOB = Job.create("tiny-gpt", 8, 32)


class RecordingAgent(agent_pb2_grpc.WorkerAgentServiceServicer):
    """An agent endpoint that records Assign/Stop and, at each Assign, what the controller
    shows at that moment (its generation and plan: what a status call or the printed plan
    would report while this generation starts)."""

    def __init__(self, controller: Controller | None, host: str = "127.0.0.1") -> None:
        self.controller = controller
        self.calls: list[tuple[str, int]] = []
        self.seen_at_assign: list[tuple[int, str, int, str]] = []
        self.stops: list[str] = []
        """The session each Stop carried."""
        self.assigned = threading.Event()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        agent_pb2_grpc.add_WorkerAgentServiceServicer_to_server(self, server)
        self.port = server.add_insecure_port(f"{host}:0")
        server.start()
        self.server = server

    def Assign(self, request, context):
        sent = Plan.from_proto(request.plan).to_json(indent=None)
        with self.controller._lock:  # the tests that plan give their controller
            c = self.controller
            shown = c.plan.to_json(indent=None) if c.plan else ""
            self.seen_at_assign.append((c.generation, shown, request.generation, sent))
        self.calls.append(("assign", request.generation))
        self.assigned.set()
        return agent_pb2.AssignResponse(generation=request.generation, ranks_started=1)

    def Stop(self, request, context):
        self.calls.append(("stop", request.generation))
        self.stops.append(request.session)
        return agent_pb2.StopResponse(ranks_stopped=0)

    def GetStatus(self, request, context):
        return agent_pb2.AgentStatus(worker_id="recording")


@pytest.fixture
def cluster(tmp_path):
    planner, planner_port = create_server("127.0.0.1:0")
    cfg = ControllerConfig.for_job(
        job=JOB, steps=50, checkpoint_every=5, run_dir=tmp_path / "run",
        planner_address=f"127.0.0.1:{planner_port}", min_workers=1, debounce_s=0.2,
        heartbeat_timeout_s=60.0,
    )  # fmt: skip
    c = Controller(cfg)
    server, port = create_controller_server(c, "127.0.0.1:0")
    server.start()
    c.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = controller_pb2_grpc.ControllerServiceStub(channel)
    agents: list[RecordingAgent] = []

    def join(wid: str, gpu: str = "CPU", session: str = "") -> tuple[RecordingAgent, str]:
        agent = RecordingAgent(c)
        agents.append(agent)
        reply = stub.Register(
            controller_pb2.RegisterRequest(
                worker_id=wid, agent_address=f"127.0.0.1:{agent.port}", session=session,
                gpus=agent_pb2.GpuInfo(gpu_type=gpu, count=1, zone="local"),
            ),
            timeout=5,
        )  # fmt: skip
        return agent, reply.session

    yield c, stub, join
    channel.close()
    c.close()
    server.stop(0)
    for a in agents:
        a.server.stop(0)
    planner.stop(0)


def wait_for(predicate, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_plan_shown_is_the_plan_that_runs(cluster):
    """While a generation is being assigned, the controller already shows its plan (the
    generation number was once bumped before the plan was updated: the printed plan was the
    previous one)."""
    c, _, join = cluster
    agent, _ = join("w1")
    assert agent.assigned.wait(60)
    shown_gen, shown_plan, sent_gen, sent_plan = agent.seen_at_assign[0]
    assert (shown_gen, shown_plan) == (sent_gen, sent_plan)


def test_a_join_that_changes_no_plan_does_not_restart_training(cluster):
    c, _, join = cluster
    first, _ = join("w1", "CPU")
    assert first.assigned.wait(60)
    wait_for(lambda: c.state == ControllerState.RUNNING)
    calls_before = list(first.calls)
    newcomer, _ = join("w2", "cpu-2t")  # slower than w1: the planner keeps PP1 DP1 on w1
    wait_for(lambda: getattr(c, "unchanged", None) or len(first.calls) > len(calls_before))
    assert first.calls == calls_before, "the running generation was stopped or reassigned"
    assert "w2 joined" in c.unchanged[0], c.unchanged
    assert not newcomer.calls and c.generation == 1 and c.state == ControllerState.RUNNING


def test_a_leave_is_final_for_its_session(cluster):
    c, stub, join = cluster
    stayer, _ = join("w1")
    leaver, session = join("w2")
    wait_for(lambda: c.state == ControllerState.RUNNING)
    stub.Leave(
        controller_pb2.LeaveRequest(worker_id="w2", reason="bye", session=session), timeout=5
    )
    with pytest.raises(grpc.RpcError) as err:  # what a racing heartbeat loop used to do
        stub.Register(
            controller_pb2.RegisterRequest(
                worker_id="w2", agent_address=f"127.0.0.1:{leaver.port}", session=session,
                gpus=agent_pb2.GpuInfo(gpu_type="CPU", count=1, zone="local"),
            ),
            timeout=5,
        )  # fmt: skip
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "final" in err.value.details()
    assigned_before = [call for call in leaver.calls if call[0] == "assign"]
    time.sleep(1.0)  # debounce + re-plan
    wait_for(lambda: c.state == ControllerState.RUNNING)
    assert c.membership.get("w2") is None
    assert [call for call in leaver.calls if call[0] == "assign"] == assigned_before


# ---- issue 24 item 5: the control plane trusts only what it must --------------------------------
def test_an_agent_takes_orders_only_from_the_controller_it_registered_with(tmp_path):
    runner = RankRunner(tmp_path / "agent")
    servicer = AgentServicer("w", NodeGpus("CPU", 1, 0, "local"), runner)
    server, port = create_agent_server(servicer, "127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = agent_pb2_grpc.WorkerAgentServiceStub(ch)
            for call in (
                lambda: stub.Stop(agent_pb2.StopRequest(grace_s=1), timeout=5),
                lambda: stub.Assign(agent_pb2.Assignment(generation=1), timeout=5),
            ):
                with pytest.raises(grpc.RpcError) as info:
                    call()  # before registration: nothing is accepted
                assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert "not registered" in info.value.details()
            servicer.session = "s" * 32  # registered
            for session in ("", "t" * 32):
                with pytest.raises(grpc.RpcError) as info:
                    stub.Stop(agent_pb2.StopRequest(grace_s=1, session=session), timeout=5)
                assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
            reply = stub.Stop(agent_pb2.StopRequest(grace_s=1, session="s" * 32), timeout=5)
            assert reply.ranks_stopped == 0
    finally:
        server.stop(0)
        runner.shutdown()


def test_unreachable_registrations_are_dropped_without_counting_as_failures(cluster):
    c, stub, join = cluster
    for i in range(6):  # a token holder registering agents nobody can dial
        stub.Register(
            controller_pb2.RegisterRequest(
                worker_id=f"ghost-{i}", agent_address=f"127.0.0.1:{free_port()}",
                gpus=agent_pb2.GpuInfo(gpu_type="CPU", count=1, zone="local"),
            ),
            timeout=5,
        )  # fmt: skip
    real, _ = join("w1")
    assert real.assigned.wait(60)
    wait_for(lambda: c.state == ControllerState.RUNNING)
    time.sleep(0.5)  # a failure re-plan would have been noted by now
    assert c.failures == 0 and not c._pending
    assert sorted(c.dropped) == [f"ghost-{i}" for i in range(6)]
    assert [w.worker_id for w in c.membership.alive()] == ["w1"]


def test_an_agent_on_a_wildcard_address_is_dialed_where_it_registered_from(cluster):
    c, stub, _ = cluster
    agent = RecordingAgent(c)
    stub.Register(
        controller_pb2.RegisterRequest(
            worker_id="w1", agent_address=f"0.0.0.0:{agent.port}",
            gpus=agent_pb2.GpuInfo(gpu_type="CPU", count=1, zone="local"),
        ),
        timeout=5,
    )  # fmt: skip
    assert c.membership.get("w1").agent_address == f"127.0.0.1:{agent.port}"
    assert agent.assigned.wait(60)
    agent.server.stop(0)


def test_controller_and_agent_speak_tls_with_a_token(tmp_path, make_certificate):
    made = make_certificate(tmp_path, "127.0.0.1")
    if made is None:
        pytest.skip("the openssl command is not installed (it makes the test certificate)")
    cert, key = made
    tls = TlsFiles(cert, key, cert)
    cfg = ControllerConfig.for_job(
        job=JOB, steps=4, checkpoint_every=2, run_dir=tmp_path / "run",
        planner_address="127.0.0.1:9", min_workers=5, token="tok", tls=tls,
    )  # fmt: skip
    c = Controller(cfg)
    server, port = create_controller_server(c, "127.0.0.1:0", "tok", tls)
    server.start()
    request = controller_pb2.RegisterRequest(
        worker_id="w1", agent_address="127.0.0.1:5000",
        gpus=agent_pb2.GpuInfo(gpu_type="CPU", count=1, zone="local"),
    )  # fmt: skip
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as plain:
            with pytest.raises(grpc.RpcError) as info:  # plain text is not spoken
                controller_pb2_grpc.ControllerServiceStub(plain).Register(request, timeout=3)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        with tls.channel(f"127.0.0.1:{port}") as secure:
            stub = controller_pb2_grpc.ControllerServiceStub(secure)
            with pytest.raises(grpc.RpcError) as info:  # TLS alone is not enough
                stub.Register(request, timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            reply = stub.Register(request, timeout=5, metadata=call_metadata("tok"))
            assert reply.session
    finally:
        c.close()
        server.stop(0)


def test_a_half_given_tls_pair_is_one_line():
    with pytest.raises(SailorError, match="both --tls-cert and --tls-key"):
        TlsFiles(cert=Path("cert.pem"))


def test_tls_server_name_checks_the_certificate_for_that_name(tmp_path, make_certificate):
    """Pods and cloud VMs are dialed at addresses no certificate names: --tls-server-name
    checks the peer's certificate for one fixed name instead (and a wrong name is refused)."""
    made = make_certificate(tmp_path)  # names: localhost only, not 127.0.0.1
    if made is None:
        pytest.skip("the openssl command is not installed (it makes the test certificate)")
    cert, key = made
    c = Controller(
        ControllerConfig.for_job(
            job=JOB,
            steps=4,
            checkpoint_every=2,
            run_dir=tmp_path / "run",
            planner_address="127.0.0.1:9",
            min_workers=5,
        )  # fmt: skip
    )
    server, port = create_controller_server(c, "127.0.0.1:0", None, TlsFiles(cert, key))
    server.start()
    request = controller_pb2.StatusRequest()
    try:
        for name, ok in (("localhost", True), (None, False), ("sailor.internal", False)):
            with TlsFiles(ca=cert, server_name=name).channel(f"127.0.0.1:{port}") as ch:
                stub = controller_pb2_grpc.ControllerServiceStub(ch)
                if ok:
                    assert stub.GetStatus(request, timeout=5).message
                else:
                    with pytest.raises(grpc.RpcError) as info:
                        stub.GetStatus(request, timeout=3)
                    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        c.close()
        server.stop(0)


def test_a_signalled_controller_stops_its_workers_ranks(tmp_path):
    """SIGTERM to `sailor controller` stops every registered node's ranks (a Stop with the
    node's session) and tells their heartbeats the run is over; before, the ranks trained on
    with no controller."""
    agent = RecordingAgent(controller=None)
    controller = subprocess.Popen(
        [sys.executable, "-m", "sailor_runtime.cli", "controller", "--planner", "127.0.0.1:9",
         "--run-dir", str(tmp_path / "run"), "--port-file", str(tmp_path / "port"),
         "--heartbeat-interval", "1", "--min-workers", "2", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(lambda: (tmp_path / "port").exists() and (tmp_path / "port").read_text(), 60)
        address = f"127.0.0.1:{(tmp_path / 'port').read_text()}"
        with grpc.insecure_channel(address) as ch:
            stub = controller_pb2_grpc.ControllerServiceStub(ch)
            session = stub.Register(
                controller_pb2.RegisterRequest(
                    worker_id="w1", agent_address=f"127.0.0.1:{agent.port}",
                    gpus=agent_pb2.GpuInfo(gpu_type="CPU", count=1, zone="local"),
                ),
                timeout=10,
            ).session  # fmt: skip
            controller.send_signal(signal.SIGTERM)
            wait_for(lambda: agent.stops, 10)
            beat = controller_pb2.HeartbeatRequest(worker_id="w1", session=session)
            reply = stub.Heartbeat(beat, timeout=5)
            assert reply.shutdown and reply.unfinished  # the worker must not exit 0
        assert agent.stops == [session]
        assert controller.wait(30) == 128 + signal.SIGTERM  # stopped, as `sailor run` by it
        assert b"stopped by a signal" in controller.communicate()[0]
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
        agent.server.stop(0)


@pytest.mark.timeout(300)
def test_end_to_end_a_useless_join_costs_no_restart_and_no_rerun_step(tmp_path):
    """`sailor run --local` with real agents and ranks: a cpu-2t node joins a CPU node's run;
    the best plan stays on the CPU node (issue 19: that join once cost 2.15 s and 14 re-run
    steps). Every step runs once, in one generation, and the summary says why."""
    from sailor_runtime.run.local import LocalRun, LocalRunConfig

    STEPS = 80  # noqa: N806 - enough steps that the run outlives the join
    cfg = LocalRunConfig.create(
        run_dir=tmp_path, workers=1, gpu_types=("CPU", "cpu-2t"), steps=STEPS,
        checkpoint_every=10, add_worker_at_step=3, global_batch_size=8, seq_len=32,
        profile=False, progress=False, timeout_s=280, debounce_s=0.3,
        warm=False,  # the joining agent registers at once (no torch import first)
    )  # fmt: skip
    run = LocalRun(cfg)
    try:
        s = run.run()
    finally:
        run.close()
    assert s.state == "DONE", s.message
    assert any(e["event"] == "join" for e in s.events), s.events
    assert run.controller.unchanged, [r["reason"] for r in s.reconfigurations]
    assert {m["generation"] for m in s.metrics} == {1}
    assert sorted(m["step"] for m in s.metrics) == list(range(1, STEPS + 1))
    assert any("training went on without a restart" in w for w in s.warnings), s.warnings


def test_bad_tls_files_are_one_line_naming_the_file(tmp_path, make_certificate):
    """Checked at start (issue 24 item 6): before, a garbage certificate surfaced as a bind
    failure and a key of another certificate as a hang in gRPC's secure server."""
    from typer.testing import CliRunner

    from sailor_runtime.cli import app

    first = make_certificate(tmp_path)
    if first is None:
        pytest.skip("the openssl command is not installed (it makes the test certificates)")
    other = tmp_path / "other"
    other.mkdir()
    _, other_key = make_certificate(other)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    cert, key = first
    for flags, named in (
        (["--tls-cert", garbage, "--tls-key", key], str(garbage)),
        (["--tls-cert", cert, "--tls-key", other_key], str(other_key)),
        (["--tls-ca", garbage], str(garbage)),
        (["--tls-cert", cert], "both --tls-cert and --tls-key"),
    ):
        args = ["worker", "--controller", "127.0.0.1:9", *map(str, flags)]
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 2, out.output
        lines = out.output.strip().splitlines()
        assert len(lines) == 1 and named in lines[0], out.output


def reaches(source: str, port: int) -> bool:
    """Can a TCP connection from ``source`` (a loopback address) open to 127.0.0.1:port?"""
    with socket.socket() as s:
        s.bind((source, 0))
        s.settimeout(1.0)
        try:
            s.connect(("127.0.0.1", port))
            return True
        except OSError:
            return False


def test_only_the_controller_and_assigned_nodes_reach_the_rendezvous_store(cluster):
    """Defence in depth beside the store's key (test_rendezvous_store.py): its listening
    socket takes connections only from loopback, the controller and the nodes it assigned (here
    127.0.0.2; 127.0.0.3 is anyone else)."""
    c, stub, _ = cluster
    port = c.store.port
    assert reaches("127.0.0.1", port)
    assert not reaches("127.0.0.2", port) and not reaches("127.0.0.3", port)
    agent = RecordingAgent(c, host="127.0.0.2")
    stub.Register(
        controller_pb2.RegisterRequest(
            worker_id="w1", agent_address=f"127.0.0.2:{agent.port}",
            gpus=agent_pb2.GpuInfo(gpu_type="CPU", count=1, zone="local"),
        ),
        timeout=5,
    )  # fmt: skip
    try:
        assert agent.assigned.wait(60)
        assert reaches("127.0.0.2", port) and not reaches("127.0.0.3", port)
    finally:
        agent.server.stop(0)


def controller_and_agent(tmp_path, steps: int):
    """A real controller (gRPC on 127.0.0.1, an ephemeral port; no planner behind it, and
    min_workers 5 so it never plans) and a real agent 'w1' on one CPU that knows it: the
    (controller, its server, the agent) a test closes."""
    from sailor_runtime.agent.agent import WorkerAgent

    c = Controller(
        ControllerConfig.for_job(
            job=JOB,
            steps=steps,
            checkpoint_every=2,
            run_dir=tmp_path / "run",
            planner_address="127.0.0.1:9",
            min_workers=5,
        )  # fmt: skip
    )
    server, port = create_controller_server(c, "127.0.0.1:0")
    server.start()
    agent = WorkerAgent(f"127.0.0.1:{port}", NodeGpus("CPU", 1, 0, "local"), tmp_path / "w",
                        worker_id="w1", warm=False)  # fmt: skip
    return c, server, agent


def test_an_agent_that_left_does_not_register_again(tmp_path):
    """The race seen in real runs: a heartbeat in flight while the agent leaves is answered
    `known=false`, and the agent used to register again 2 ms after its leave."""
    c, server, agent = controller_and_agent(tmp_path, steps=4)
    try:
        agent.server.start()
        agent.register()
        assert c.membership.get("w1") is not None
        agent.leave("bye")
        agent.heartbeat_once([])  # the in-flight heartbeat: known=false
        assert c.membership.get("w1") is None
    finally:
        agent.close()
        c.close()
        server.stop(0)


def test_a_leaving_agent_sends_the_metrics_its_ranks_wrote_since_the_last_heartbeat(tmp_path):
    """Steps trained after the last heartbeat (up to a checkpoint the resumed run starts
    after) must reach metrics.jsonl when the agent is stopped: its leave drains them, as do
    ranks a re-plan replaced. A real agent and controller; the ranks' metrics files are real
    files of two exited processes (a generation replaced, then the one stopped)."""
    import json

    from sailor_runtime.agent.ranks import RankProcess
    from sailor_runtime.controller.metricslog import read_metrics

    c, server, agent = controller_and_agent(tmp_path, steps=40)

    def exited_rank(generation: int, steps: range) -> RankProcess:
        path = tmp_path / f"gen-{generation}.metrics.jsonl"
        path.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in steps))
        done = subprocess.Popen([sys.executable, "-c", ""])
        done.wait()
        return RankProcess(generation, 0, done, tmp_path / "rank.log", path)

    try:
        agent.server.start()
        agent.register()
        agent.runner.procs.append(exited_rank(1, range(1, 5)))  # stopped at step 4
        agent.runner._spawn = lambda assignment: []  # the next generation's ranks: none here
        agent.runner.start(None)  # a re-plan: the exited ranks are dropped
        agent.runner.procs.append(exited_rank(2, range(3, 7)))  # resumed after step 2
        agent.leave("SIGTERM")  # no heartbeat was sent before
    finally:
        agent.close()
        c.close()
        server.stop(0)
    steps = [m["step"] for m in read_metrics(tmp_path / "run" / "metrics.jsonl")]
    assert steps == [1, 2, 3, 4, 3, 4, 5, 6], steps
