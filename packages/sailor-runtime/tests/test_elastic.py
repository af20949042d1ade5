"""Elasticity end to end with real processes: kill -9 of a node, a node joining, a planner
server restart, and hostile input while training runs."""

from __future__ import annotations

import os
import signal
import socket
import time

import grpc
import pytest

from sailor_runtime.controller.checkpoints import latest_checkpoint_step
from sailor_runtime.controller.state import ControllerState
from sailor_runtime.proto import agent_pb2, agent_pb2_grpc, controller_pb2, controller_pb2_grpc
from sailor_runtime.run.local import LOCAL_RUN, LocalRun, LocalRunConfig
from sailor_runtime.run.profile import rank_pids

GBS = LOCAL_RUN.global_batch_size


def check_no_step_repeated_with_other_data(metrics, resumed_from: int, gbs: int):
    """Steps up to the checkpoint ran once; any later step that ran twice (lost work after the
    checkpoint) saw the same samples and gave the same loss; sample counts never jump."""
    by_step: dict[int, list[dict]] = {}
    for m in metrics:
        by_step.setdefault(m["step"], []).append(m)
    for step, runs in by_step.items():
        assert all(r["consumed_samples"] == step * gbs for r in runs), runs
        if step <= resumed_from:
            assert len(runs) == 1, f"step {step} before the checkpoint ran {len(runs)} times"
        losses = [r["loss"] for r in runs]
        assert max(losses) - min(losses) < 1e-3 * max(1.0, abs(losses[0])), (step, losses)


@pytest.mark.timeout(400)
def test_kill9_of_a_worker_replans_on_survivors_and_finishes(tmp_path):
    cfg = LocalRunConfig.create(
        run_dir=tmp_path, workers=3, gpu_types=("CPU",), steps=14, checkpoint_every=4,
        kill_worker_at_step=7, heartbeat_timeout_s=5.0, profile=False, progress=False,
        timeout_s=380,
    )  # fmt: skip
    run = LocalRun(cfg)
    try:
        s = run.run()
    finally:
        run.close()
    assert s.state == "DONE" and s.steps == 14, s.message
    kill = next(e for e in s.events if e["event"] == "kill -9")
    after = [r for r in s.reconfigurations if r["noticed_at"] >= kill["at"]]
    assert after, s.reconfigurations
    first = after[0]
    assert first["failure"]
    assert first["noticed_at"] - kill["at"] <= cfg.heartbeat_timeout_s + 1.0
    assert s.reconfigurations[-1]["inventory"] == "CPU@local=2"
    resumed = first["resumed_from_step"]
    assert resumed >= 4 and resumed % 4 == 0
    gens = sorted({m["generation"] for m in s.metrics})
    new = [m for m in s.metrics if m["generation"] == gens[-1]]
    assert new[0]["step"] == resumed + 1 and new[-1]["step"] == 14
    check_no_step_repeated_with_other_data(s.metrics, resumed, GBS)
    # The loss curve continues: the resumed run starts where the old one was, not from scratch.
    old = {m["step"]: m["loss"] for m in s.metrics if m["generation"] == gens[0]}
    assert new[0]["loss"] < old[1] - 0.2
    assert s.final_loss < old[1] - 0.3


def _hostile_input(run: LocalRun) -> list[str]:
    """Throw bad input at the live controller and a live agent; return what each said."""
    port = int(run.address.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"\x16\x03\x01garbage" * 100)
    said = []
    with grpc.insecure_channel(run.address) as ch:
        stub = controller_pb2_grpc.ControllerServiceStub(ch)
        status = stub.GetStatus(controller_pb2.StatusRequest(), timeout=5)  # served mid-run
        said.append(f"status: {status.state} step {status.step} gen {status.generation}")
        gpus = agent_pb2.GpuInfo(gpu_type="CPU", count=4096, zone="local")
        for req in (
            controller_pb2.RegisterRequest(worker_id="evil", agent_address="1.2.3.4:1", gpus=gpus),
            controller_pb2.RegisterRequest(worker_id="evil", agent_address="x", gpus=gpus),
        ):
            try:
                stub.Register(req, timeout=5)
            except grpc.RpcError as exc:
                said.append(f"{exc.code().name}: {exc.details()}")
    address = next(iter(run.controller.addresses.values()))
    with grpc.insecure_channel(address) as ch:
        stub = agent_pb2_grpc.WorkerAgentServiceStub(ch)
        bad = agent_pb2.Assignment(generation=10**6, world_size=3, master_port=99999)
        try:
            stub.Assign(bad, timeout=5)
        except grpc.RpcError as exc:
            said.append(f"{exc.code().name}: {exc.details()}")
    return said


def _pause_ranks(run: LocalRun, generation: int) -> list[int] | None:
    """SIGSTOP every rank of ``generation`` (None, nothing stopped, while any is not found):
    the generation stays unfinished, however fast this machine trains, until a re-plan
    stops it (the agents' SIGKILL ends a stopped process)."""
    alive = {w.pid for w in run.workers if w.popen.poll() is None}
    pids = rank_pids(alive, generation)
    world = sum(len(slots) for slots in run.controller.placement.values())
    if world == 0 or len(pids) != world:
        return None
    for pid in pids.values():
        os.kill(pid, signal.SIGSTOP)
    return sorted(pids.values())


@pytest.mark.timeout(400)
def test_join_planner_restart_and_hostile_input_during_a_run(tmp_path):
    from sailor_planner.service.server import create_server

    planner, planner_port = create_server("127.0.0.1:0")
    # The first generation's ranks are paused (SIGSTOP) once its first checkpoint is written,
    # so it is still unfinished when the joined node is re-planned however fast the steps are;
    # the re-plan stops them and the next generation resumes from that checkpoint. (Before,
    # 200 steps kept it training through the re-plan, and the run spent most of its time on
    # them.)
    steps = 20
    cfg = LocalRunConfig.create(
        run_dir=tmp_path, workers=2, gpu_types=("CPU",), steps=steps, checkpoint_every=5,
        global_batch_size=32, seq_len=128, heartbeat_timeout_s=5.0, profile=False,
        progress=False, timeout_s=380, planner_address=f"127.0.0.1:{planner_port}",
    )  # fmt: skip
    box: dict = {"planner": planner}

    def on_tick(run: LocalRun) -> None:
        c = run.controller
        if "first_gen" not in box and c.state == ControllerState.RUNNING:
            box["first_gen"] = c.generation
        if (
            "paused" not in box
            and c.state == ControllerState.RUNNING
            and c.generation == box.get("first_gen")
            and latest_checkpoint_step(c.cfg.checkpoint_dir) > 0
        ):
            pids = _pause_ranks(run, c.generation)
            if pids:
                box["paused"] = pids
                box["checkpoint_at_pause"] = latest_checkpoint_step(c.cfg.checkpoint_dir)
        if "paused" in box and c.unchanged and "continued" not in box:
            # The join kept the old plan (a failure of this test, asserted below): let the
            # paused ranks finish rather than wait for the timeout.
            for pid in box["paused"]:
                os.kill(pid, signal.SIGCONT)
            box["continued"] = True
        if "stopped_at" not in box and c.state == ControllerState.RUNNING and run.step >= 3:
            box["said"] = _hostile_input(run)
            box["planner"].stop(0).wait()  # the planner goes away ...
            box["stopped_at"] = time.monotonic()
            box["joined"] = run.add_worker()  # ... and a node joins while it is away
        joined = "stopped_at" in box and box["joined"].name in c.addresses
        if joined and "restarted" not in box:
            box.setdefault("registered_at", time.monotonic())
            if time.monotonic() - box["registered_at"] > 3.0:  # the re-plan is retrying by now
                box["planner"], _ = create_server(f"127.0.0.1:{planner_port}")
                box["restarted"] = time.monotonic()

    run = LocalRun(cfg)
    try:
        s = run.run(on_tick)
    finally:
        run.close()
        box["planner"].stop(0)
    assert s.state == "DONE" and s.steps == steps, s.message
    assert "restarted" in box and "paused" in box, box
    said = box["said"]
    assert said[0].startswith(f"status: {int(ControllerState.RUNNING)} step "), said
    assert any("gpus.count" in m and "INVALID_ARGUMENT" in m for m in said), said
    assert any("agent_address" in m for m in said), said
    # Without the node's session an assignment is refused before anything else is read.
    assert any("assignment.session" in m and "PERMISSION_DENIED" in m for m in said), said
    joined = [r for r in s.reconfigurations if box["joined"].name in r["reason"]]
    assert joined, [r["reason"] for r in s.reconfigurations]
    rec = joined[0]
    assert rec["inventory"] == "CPU@local=3"  # the new node is in the next re-plan
    # It was planned only once the planner was back (the calls in between were retried).
    planned_at = rec["noticed_at"] + rec["phases"]["debounce"] + rec["phases"]["plan"]
    assert planned_at >= box["restarted"] - 0.05, (planned_at, box)
    assert rec["resumed"], [(r["generation"], r["reason"][:80]) for r in s.reconfigurations]
    # The old generation was stopped unfinished, and the new one resumed after the newest
    # checkpoint the old one wrote (at least the one there when it was paused).
    old = [m["step"] for m in s.metrics if m["generation"] == box["first_gen"]]
    new = [m["step"] for m in s.metrics if m["generation"] == rec["generation"]]
    assert max(old) < steps, old
    resumed = rec["resumed_from_step"]
    assert box["checkpoint_at_pause"] <= resumed <= max(old) and resumed % 5 == 0, (resumed, old)
    assert new[0] == resumed + 1 and new[-1] == steps, new
    check_no_step_repeated_with_other_data(s.metrics, resumed, 32)
