"""The worker agent: one per node. Registers with the controller, heartbeats, runs ranks.

The loop: register (retrying until the controller answers), then every heartbeat interval send
the rank states and new step metrics. A heartbeat answered `known=false` (the controller
declared this node failed, or restarted) makes the agent stop its ranks and register again; one
answered `shutdown=true` ends the agent. SIGTERM/SIGINT leave gracefully.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from pathlib import Path

import grpc

from ..errors import ControllerUnreachableError
from ..proto import controller_pb2, controller_pb2_grpc
from ..security import TlsFiles, call_metadata
from .cputypes import cpu_worker_type
from .gpus import NodeGpus
from .ranks import RankRunner
from .service import AgentServicer, create_agent_server, rank_statuses

log = logging.getLogger("sailor.agent")
_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
UNFINISHED_EXIT = 3
"""`sailor worker`'s exit status when the controller ended the run unfinished (it was stopped,
or the run failed): not 0, which SkyPilot and Slurm read as a job that succeeded."""


class WorkerAgent:
    def __init__(
        self,
        controller: str,
        gpus: NodeGpus,
        workdir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        advertise_host: str | None = None,
        token: str | None = None,
        tls: TlsFiles | None = None,
        worker_id: str | None = None,
        threads_per_rank: int = 1,
        first_core: int = 0,
        warm: bool = True,
        controller_timeout_s: float = 300.0,
    ) -> None:
        self.controller = controller
        self.gpus = gpus
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.token = token
        self.metadata = call_metadata(token)
        cpu_type = cpu_worker_type(gpus.gpu_type, first_core)
        if cpu_type is not None:  # the type decides the threads and the cores of a rank
            threads_per_rank = cpu_type.threads
        self.runner = RankRunner(
            workdir / self.worker_id,
            threads_per_rank,
            cpu_type.env() if cpu_type else {},
            warm=warm,
        )
        self.servicer = AgentServicer(self.worker_id, gpus, self.runner)
        self.servicer.controller_host = controller.rsplit(":", 1)[0].strip("[]")
        tls = tls or TlsFiles()
        self.server, self.port = create_agent_server(self.servicer, f"{host}:{port}", token, tls)
        self.address = f"{advertise_host or host}:{self.port}"
        """Where the controller dials this agent. A wildcard host (0.0.0.0) is replaced by the
        controller with the address it sees the registration come from."""
        self.controller_timeout_s = controller_timeout_s
        """Give up (stop the ranks, exit non-zero) after this long without the controller."""
        self.last_contact = time.monotonic()
        self.lost_controller = False
        self.unfinished = False
        """The controller ended the run before it finished (stopped, or failed)."""
        self._pending: list = []
        """Step metrics read from the ranks but not yet acknowledged by the controller."""
        self._send_lock = threading.RLock()
        """One heartbeat at a time: the loop's, or the last one of a leave."""
        self.interval_s = 1.0
        self.session = ""
        """RegisterResponse.session: proves heartbeats, leave and assignments are this node's."""
        self.done = threading.Event()
        self.leaving = threading.Event()
        self._channel = tls.channel(controller)
        self._stub = controller_pb2_grpc.ControllerServiceStub(self._channel)

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.server.start()
        if not self.runner.wait_warm():
            log.warning("zygote not ready; registering anyway (ranks start cold)")
        self.register()
        threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True).start()

    def register(self) -> None:
        """Register, retrying while the controller is unreachable (a worker may start before
        its controller), for up to ``controller_timeout_s``: the time without the controller
        the worker gives up after, at its start as later (``ControllerUnreachableError``);
        raises the gRPC error on a refusal."""
        request = controller_pb2.RegisterRequest(
            worker_id=self.worker_id,
            agent_address=self.address,
            gpus=self.gpus.to_proto(),
            hostname=socket.gethostname(),
            session=self.session,
        )
        wait_s = self.controller_timeout_s
        deadline = time.monotonic() + wait_s
        said_waiting = False
        while True:
            try:
                left = deadline - time.monotonic()
                reply = self._stub.Register(
                    request, timeout=max(0.1, min(5.0, left)), metadata=self.metadata
                )
                break
            except grpc.RpcError as exc:
                if exc.code() not in _UNREACHABLE:
                    raise
                if time.monotonic() >= deadline:
                    self.lost_controller = True
                    raise ControllerUnreachableError(
                        f"no controller at {self.controller} for {wait_s:.0f} s; start it "
                        "first, or check --controller and --controller-timeout",
                        field="--controller",
                    ) from exc
                if not said_waiting:  # else a worker started before its controller is silent
                    log.warning("waiting for the controller at %s (for up to %.0f s)...",
                                self.controller, wait_s)  # fmt: skip
                    said_waiting = True
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        self.worker_id = reply.worker_id
        self.session = reply.session
        self.servicer.session = reply.session
        self.interval_s = max(0.1, reply.heartbeat_interval_s or 1.0)
        log.info(
            "registered as %s (%s) at %s", self.worker_id, self.gpus.describe(), self.controller
        )

    def leave(self, reason: str = "leaving") -> None:
        self.leaving.set()  # from here on a `known=false` heartbeat must not re-register
        self.runner.stop(0, grace_s=1.0)
        self._drain_metrics()  # while the controller still knows this node
        try:
            self._stub.Leave(
                controller_pb2.LeaveRequest(
                    worker_id=self.worker_id, reason=reason, session=self.session
                ),
                timeout=5,
                metadata=self.metadata,
            )
        except grpc.RpcError as exc:
            log.warning("leave not acknowledged: %s", exc.details())
        self.done.set()

    def close(self) -> None:
        self.runner.shutdown()
        self.server.stop(grace=0.5)
        self._channel.close()

    # ---- heartbeats --------------------------------------------------------------------------
    def _metrics(self) -> list:
        out = []
        for proc, rec in self.runner.new_metrics():
            out.append(
                controller_pb2.StepMetrics(
                    generation=proc.generation,
                    rank=proc.rank,
                    step=int(rec.get("step", 0)),
                    loss=float(rec.get("loss", 0.0)),
                    iteration_time_s=float(rec.get("iteration_time_s", 0.0)),
                    samples_per_s=float(rec.get("samples_per_s", 0.0)),
                    consumed_samples=int(rec.get("consumed_samples", 0)),
                    raw_json=json.dumps(rec),
                )
            )
        return out

    def _send(self, pending: list):
        """One Heartbeat call with ``pending`` and the ranks' new metrics: (reply, metrics
        still unsent); the reply is None when the call failed (the metrics are kept)."""
        pending = pending + self._metrics()
        request = controller_pb2.HeartbeatRequest(
            worker_id=self.worker_id,
            generation=self.runner.current_generation(),
            ranks=rank_statuses(self.runner),
            metrics=pending,
            session=self.session,
        )
        try:
            return self._stub.Heartbeat(request, timeout=5, metadata=self.metadata), []
        except grpc.RpcError as exc:
            log.warning("heartbeat failed: %s %s", exc.code(), exc.details())
            return None, pending

    def _drain_metrics(self) -> None:
        """Send what the stopped ranks wrote since the last heartbeat: the steps up to the
        checkpoint they saved must reach metrics.jsonl, since a resumed run starts after it."""
        with self._send_lock:
            _, self._pending = self._send(self._pending)

    def heartbeat_once(self, pending: list) -> list:
        """Send one heartbeat; returns metrics still to send (kept when the call fails)."""
        with self._send_lock:
            reply, pending = self._send(pending)
            if reply is None:
                if time.monotonic() - self.last_contact > self.controller_timeout_s:
                    log.error("no controller for %.0f s; stopping", self.controller_timeout_s)
                    self._lost_controller()
                return pending
            self.last_contact = time.monotonic()
            if reply.shutdown:
                self._end_run(reply.unfinished)
            elif not reply.known and self.leaving.is_set():
                log.info("left the run; not registering again")
            elif not reply.known:
                log.warning(
                    "controller does not know %s; stopping ranks, registering again",
                    self.worker_id,
                )
                self.runner.stop(0, grace_s=1.0)
                try:
                    self.register()
                except ControllerUnreachableError:  # its whole grace period: one line, no trace
                    log.error(
                        "no controller at %s for %.0f s while registering again; stopping "
                        "(exit 1)", self.controller, self.controller_timeout_s,
                    )  # fmt: skip
                    self._lost_controller()
            return []

    def _lost_controller(self) -> None:
        """No controller for ``controller_timeout_s``: stop the ranks and end the agent (the
        `sailor worker` command then exits 1)."""
        self.runner.stop(0, grace_s=1.0)
        self.lost_controller = True
        self.done.set()

    def _end_run(self, unfinished: bool) -> None:
        """The controller ended the run: stop the ranks, send their last metrics, exit (with
        ``UNFINISHED_EXIT`` when the run did not finish: no launcher may count it a success)."""
        self.unfinished = unfinished
        if unfinished:
            log.error(
                "the controller ended the run before it finished (it was stopped, or the run "
                "failed: see its log); exiting with status %d", UNFINISHED_EXIT,
            )  # fmt: skip
        else:
            log.info("controller says the run is over")
        self.runner.stop(0, grace_s=5.0)
        self._drain_metrics()
        self.done.set()

    def _heartbeat_loop(self) -> None:
        """Every interval, and at once when a rank exits: a failed rank is the controller's
        first sign of a failed peer node, so reporting it early shortens every re-plan."""
        while not self.done.is_set():
            self.runner.rank_exited.wait(self.interval_s)
            self.runner.rank_exited.clear()
            if self.done.is_set():
                break
            try:
                with self._send_lock:
                    self._pending = self.heartbeat_once(self._pending)
            except Exception:  # noqa: BLE001 - the loop must survive anything
                log.exception("heartbeat loop error")
