"""ControllerService: the gRPC face of the controller (register, heartbeat, leave, status).

Every handler validates its input and maps errors to a status code in one place
(errors.grpc_status); nothing a client sends can raise out of a handler or stop the run.
"""

from __future__ import annotations

import logging
import time
from concurrent import futures

import grpc

from ..errors import grpc_status
from ..proto import controller_pb2, controller_pb2_grpc
from ..security import TlsFiles, interceptors, listen
from .controller import Controller
from .membership import peer_host, reachable_address

log = logging.getLogger("sailor.controller")
MAX_METRICS_PER_HEARTBEAT = 10_000


class ControllerServicer(controller_pb2_grpc.ControllerServiceServicer):
    def __init__(self, controller: Controller) -> None:
        self.c = controller

    def _abort(self, context, method: str, exc: Exception):
        log.warning("%s refused: %s", method, exc)
        context.abort(grpc_status(exc), str(exc))

    def Register(self, request, context):
        try:
            w = self.c.register(
                request.worker_id,
                reachable_address(request.agent_address, context.peer()),
                request.gpus,
                request.hostname,
                request.session,
                peer_host(context.peer()),
            )
        except Exception as exc:  # noqa: BLE001 - bad input becomes a clear status
            self._abort(context, "Register", exc)
        log.info("registered %s (%s) at %s", w.worker_id, w.gpus.describe(), w.agent_address)
        return controller_pb2.RegisterResponse(
            worker_id=w.worker_id,
            heartbeat_interval_s=self.c.cfg.heartbeat_interval_s,
            heartbeat_timeout_s=self.c.cfg.heartbeat_timeout_s,
            session=w.session,
        )

    def Heartbeat(self, request, context):
        if len(request.metrics) > MAX_METRICS_PER_HEARTBEAT:
            self._abort(context, "Heartbeat", ValueError("too many metrics in one heartbeat"))
        try:
            known, generation, shutdown = self.c.heartbeat(
                request.worker_id, request.ranks, request.metrics, request.session
            )
        except Exception as exc:  # noqa: BLE001 - bad input becomes a clear status
            self._abort(context, "Heartbeat", exc)
        return controller_pb2.HeartbeatResponse(
            known=known, generation=generation, shutdown=shutdown,
            unfinished=shutdown and self.c.unfinished,
        )  # fmt: skip

    def Leave(self, request, context):
        try:
            self.c.leave(request.worker_id, request.reason, request.session)
        except Exception as exc:  # noqa: BLE001 - bad input becomes a clear status
            self._abort(context, "Leave", exc)
        return controller_pb2.LeaveResponse()

    def GetStatus(self, request, context):
        return status_proto(self.c)


def status_proto(c: Controller) -> controller_pb2.ControllerStatus:
    now = time.monotonic()
    with c._lock:
        workers = [
            controller_pb2.WorkerStatus(
                worker_id=w.worker_id,
                agent_address=w.agent_address,
                gpus=w.gpus.to_proto(),
                alive=w.alive,
                seconds_since_heartbeat=now - w.last_heartbeat,
            )
            for w in c.membership.workers.values()
        ]
        recs = [
            controller_pb2.Reconfiguration(
                generation=r.generation,
                reason=r.reason,
                phases=[controller_pb2.PhaseTime(phase=k, seconds=v) for k, v in r.phases.items()],
                total_s=r.total_s,
                resumed_from_step=r.resumed_from_step,
                plan_json=r.plan_json,
                inventory=r.inventory,
            )
            for r in c.reconfigurations
        ]
        return controller_pb2.ControllerStatus(
            state=int(c.state),
            generation=c.generation,
            plan_json=c.plan.to_json(indent=None) if c.plan else "",
            step=c.step,
            target_steps=c.cfg.steps,
            loss=c.last_loss,
            last_checkpoint_step=recs[-1].resumed_from_step if recs else 0,
            workers=workers,
            reconfigurations=recs,
            message=c.message,
        )


def create_controller_server(
    controller: Controller,
    address: str = "127.0.0.1:0",
    token: str | None = None,
    tls: TlsFiles | None = None,
) -> tuple[grpc.Server, int]:
    """A not-yet-started server for ``controller`` on ``address``; returns (server, port)."""

    def refused(method: str) -> None:
        controller.refused_calls += 1

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=16), interceptors=interceptors(token, refused)
    )
    controller_pb2_grpc.add_ControllerServiceServicer_to_server(
        ControllerServicer(controller), server
    )
    return server, listen(server, address, token, tls or TlsFiles())
