"""A worker whose controller is gone stops after its stated grace period (issue 24, item 5):
`sailor worker --controller-timeout S` (default 300 s) stops its ranks and exits 1 once its
heartbeats have gone unanswered for S seconds, and not before. A real `sailor worker` process
against a real controller server on 127.0.0.1, which is then stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from sailor_runtime.controller.controller import Controller, ControllerConfig
from sailor_runtime.controller.service import create_controller_server
from sailor_sim import Job
from sailor_testing import free_port

GRACE_S = 6.0
"""The worker's --controller-timeout here: long enough that a loaded machine's late heartbeat
is not read as the controller's absence, short enough for a test."""
SLACK_S = 20.0
"""Beyond the grace period: one heartbeat's own 5 s deadline, the ranks' stop, the process's
exit, on a loaded 2-core machine."""


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.timeout(180)
def test_a_worker_outliving_its_controller_stops_after_the_grace_period(tmp_path):
    # min_workers=5: it never plans, so the worker only heartbeats.
    controller = Controller(
        ControllerConfig.for_job(
            job=Job.create("tiny-gpt", 8, 32), steps=4, checkpoint_every=2,
            run_dir=tmp_path / "run", planner_address="127.0.0.1:9", min_workers=5,
            heartbeat_interval_s=0.2,
        )
    )  # fmt: skip
    server, port = create_controller_server(controller, "127.0.0.1:0")
    server.start()
    worker = subprocess.Popen(
        [sys.executable, "-m", "sailor_runtime.cli", "worker", "--controller",
         f"127.0.0.1:{port}", "--gpu-type", "CPU", "--worker-id", "w1", "--cold",
         "--workdir", str(tmp_path / "w"), "--controller-timeout", str(GRACE_S)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: controller.membership.get("w1") is not None, 120, "the registration")
        # Cut right after a heartbeat was answered: the worker's last contact is this recent,
        # so it may not give up before the grace period counted from here.
        seen = controller.membership.get("w1").last_heartbeat
        wait_for(lambda: controller.membership.get("w1").last_heartbeat > seen, 30, "a beat")
        server.stop(0)
        cut = time.monotonic()
        controller.close()
        code = worker.wait(timeout=GRACE_S + SLACK_S)
        took = time.monotonic() - cut  # a late look only lengthens it: no false "too early"
    finally:
        server.stop(0)
        if worker.poll() is None:
            worker.kill()
        out = worker.communicate()[0]
    assert code == 1, out[-2000:]
    assert f"no controller for {GRACE_S:.0f} s; stopping" in out, out[-2000:]
    assert took >= GRACE_S - 0.5, f"gave up after {took:.1f} s, before its grace period"


@pytest.mark.timeout(180)
def test_a_controller_stopped_by_a_signal_says_so_and_its_workers_do_not_exit_0(tmp_path):
    """SIGTERM to `sailor controller` (a real process) is a stop, not a failure: exit 143
    (128 + SIGTERM) and one line naming where the run resumes. Its worker (a real `sailor
    worker`) must not exit 0, which SkyPilot and Slurm would read as a run that succeeded."""
    port_file, log = tmp_path / "port", tmp_path / "controller.log"
    with open(log, "w") as out:  # min-workers 5: it never plans, so no planner is needed
        controller = subprocess.Popen(
            [sys.executable, "-m", "sailor_runtime.cli", "controller", "--planner",
             "127.0.0.1:9", "--run-dir", str(tmp_path / "run"), "--port-file", str(port_file),
             "--min-workers", "5", "--heartbeat-interval", "0.2"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
    worker = None
    try:
        wait_for(lambda: port_file.exists() and port_file.read_text().strip(), 120, "the port")
        worker = subprocess.Popen(
            [sys.executable, "-m", "sailor_runtime.cli", "worker", "--controller",
             f"127.0.0.1:{port_file.read_text().strip()}", "--gpu-type", "CPU", "--worker-id",
             "w1", "--cold", "--workdir", str(tmp_path / "w")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        wait_for(lambda: "registered w1" in log.read_text(), 120, "the registration")
        controller.send_signal(signal.SIGTERM)
        code = controller.wait(timeout=60)
        worker_code = worker.wait(timeout=60)
    finally:
        for p in (controller, worker):
            if p is not None and p.poll() is None:
                p.kill()
    said, worker_said = log.read_text(), worker.communicate()[0]
    assert code == 128 + signal.SIGTERM, said[-2000:]
    assert "stopped by a signal" in said.splitlines()[-1], said[-2000:]
    assert "FAILED" not in said and " ERROR " not in said, said[-2000:]
    assert worker_code == 3, worker_said[-2000:]
    assert "run ended unfinished" in worker_said, worker_said[-2000:]


@pytest.mark.timeout(120)
def test_a_worker_whose_controller_never_answers_exits_1_after_its_grace_period(tmp_path):
    """A worker may start before its controller and waits for it, but only for its
    --controller-timeout: a controller that never answers is the same absence as one that went
    silent (exit 1, one line naming the address), not a registration refused (exit 2), and
    not a fixed two minutes."""
    port = free_port()  # nothing listens there
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "sailor_runtime.cli", "worker", "--controller",
         f"127.0.0.1:{port}", "--gpu-type", "CPU", "--cold", "--quiet",
         "--workdir", str(tmp_path / "w"), "--controller-timeout", "3"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=100,
    )  # fmt: skip
    took = time.monotonic() - start
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"no controller at 127.0.0.1:{port} for 3 s" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert 3 <= took < 3 + SLACK_S + 10, took  # its grace period, not the old fixed 120 s


@pytest.mark.timeout(120)
def test_a_controller_gone_while_the_worker_registers_again_is_one_line(tmp_path):
    """A controller that forgot the worker (a heartbeat answered known=false, as after its
    restart) and is then gone: the worker's new registration finds no controller for its
    --controller-timeout. It logged a traceback for ControllerUnreachableError; it says so in
    one line and exits 1, as for a controller that went silent. The controller here is a
    stand-in gRPC server on 127.0.0.1 that answers exactly that and stops."""
    import threading
    from concurrent import futures

    import grpc

    from sailor_runtime.proto import controller_pb2, controller_pb2_grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    registered = threading.Event()

    class Forgetful(controller_pb2_grpc.ControllerServiceServicer):
        def Register(self, request, context):
            if registered.is_set():  # the second registration: the controller is going away
                threading.Timer(0.1, server.stop, (0,)).start()
                context.abort(grpc.StatusCode.UNAVAILABLE, "shutting down")
            registered.set()
            return controller_pb2.RegisterResponse(
                worker_id=request.worker_id, heartbeat_interval_s=0.2, session="s1"
            )

        def Heartbeat(self, request, context):
            return controller_pb2.HeartbeatResponse(known=False)  # "declared failed"

    controller_pb2_grpc.add_ControllerServiceServicer_to_server(Forgetful(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "sailor_runtime.cli", "worker", "--controller",
             f"127.0.0.1:{port}", "--gpu-type", "CPU", "--worker-id", "w1", "--cold",
             "--workdir", str(tmp_path / "w"), "--controller-timeout", "2"],
            capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=100,
        )  # fmt: skip
    finally:
        server.stop(0)
    said = done.stderr
    assert done.returncode == 1, said[-2000:]
    assert "registering again" in said, said[-2000:]  # it did get known=false
    assert f"no controller at 127.0.0.1:{port} for 2 s while registering again" in said, said
    assert "Traceback" not in said and "heartbeat loop error" not in said, said[-3000:]
