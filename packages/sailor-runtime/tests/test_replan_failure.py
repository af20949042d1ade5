"""A failed re-plan is an event (issue 24, item 3): the controller retries it with back-off,
then ends FAILED naming the reason, instead of waiting silently until --timeout. A real
controller (gRPC on 127.0.0.1:0) and a real planner server; a node registers over the wire."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from sailor_planner.service.access import Access
from sailor_planner.service.server import create_server
from sailor_runtime.controller import controller as controller_module
from sailor_runtime.controller.controller import Controller, ControllerConfig
from sailor_runtime.controller.service import create_controller_server
from sailor_runtime.controller.state import ControllerState
from sailor_runtime.proto import agent_pb2, controller_pb2, controller_pb2_grpc
from sailor_sim import Job

JOB = Job.create("tiny-gpt", 8, 32)
RETRIES_TAKE_S = sum(
    controller_module.REPLAN_BACKOFF_S * 2**i for i in range(controller_module.REPLAN_RETRIES)
)


def run_controller(run_dir: Path, planner_port: int):
    cfg = ControllerConfig.for_job(
        job=JOB, steps=4, checkpoint_every=2, run_dir=run_dir, debounce_s=0.1,
        heartbeat_timeout_s=120,  # the registered node never beats; it must stay alive
        planner_address=f"127.0.0.1:{planner_port}", planner_wait_s=5,
    )  # fmt: skip
    c = Controller(cfg)
    server, port = create_controller_server(c, "127.0.0.1:0")
    server.start()
    c.start()
    return c, server, port


def register(port: int, agent_address: str) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        gpus = agent_pb2.GpuInfo(gpu_type="CPU", count=1, zone="local")
        stub.Register(
            controller_pb2.RegisterRequest(worker_id="w1", agent_address=agent_address, gpus=gpus),
            timeout=5,
        )


def answering_address():
    """A gRPC server that answers (UNIMPLEMENTED): the controller drops newcomers whose agent
    does not answer at all, and this node must stay to be planned onto."""
    server = grpc.server(ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def wait_finished(c: Controller, within_s: float) -> float:
    start = time.monotonic()
    while not c.finished:
        assert time.monotonic() - start < within_s, (c.state, c.message)
        time.sleep(0.05)
    return time.monotonic() - start


@pytest.mark.parametrize("fault", ["planner refuses", "run folder unwritable"])
def test_a_failing_replan_is_retried_then_fails_with_the_reason(tmp_path, fault):
    access = Access(token="not-the-controllers") if fault == "planner refuses" else None
    planner, planner_port = create_server("127.0.0.1:0", access=access)
    run_dir = tmp_path / "run"
    c, server, port = run_controller(run_dir, planner_port)
    if fault == "run folder unwritable":
        (run_dir / ".generation.tmp").mkdir()  # the generation record cannot be written
    agent, agent_address = answering_address()
    try:
        register(port, agent_address)
        took = wait_finished(c, within_s=RETRIES_TAKE_S + 40)
        assert c.state == ControllerState.FAILED
        assert "re-plan failed" in c.message
        needle = "UNAUTHENTICATED" if fault == "planner refuses" else ".generation.tmp"
        assert needle in c.message or "token" in c.message, c.message
        assert took >= RETRIES_TAKE_S  # it retried with back-off before giving up
    finally:
        c.close()
        server.stop(0)
        planner.stop(None)
        agent.stop(None)
