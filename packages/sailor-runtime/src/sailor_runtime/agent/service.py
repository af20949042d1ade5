"""WorkerAgentService: the gRPC face of one node (assign, stop, status)."""

from __future__ import annotations

import hmac
import logging
from concurrent import futures

import grpc

from ..errors import AssignmentError, SailorRuntimeError, grpc_status
from ..proto import agent_pb2, agent_pb2_grpc
from ..security import TlsFiles, interceptors, listen
from .assignment import validate_assignment
from .gpus import NodeGpus
from .ranks import FAILED, RUNNING, STOPPED, SUCCEEDED, RankRunner

log = logging.getLogger("sailor.agent")

_STATE = {
    RUNNING: agent_pb2.RANK_STATE_RUNNING,
    SUCCEEDED: agent_pb2.RANK_STATE_SUCCEEDED,
    FAILED: agent_pb2.RANK_STATE_FAILED,
    STOPPED: agent_pb2.RANK_STATE_STOPPED,
}


def rank_statuses(runner: RankRunner) -> list:
    out = []
    for proc, state, code in runner.statuses():
        out.append(
            agent_pb2.RankStatus(
                generation=proc.generation,
                rank=proc.rank,
                state=_STATE[state],
                exit_code=code,
                log_tail=proc.log_tail() if state == FAILED else "",
            )
        )
    return out


class AgentServicer(agent_pb2_grpc.WorkerAgentServiceServicer):
    def __init__(self, worker_id: str, gpus: NodeGpus, runner: RankRunner) -> None:
        self.worker_id = worker_id
        self.gpus = gpus
        self.runner = runner
        self.session = ""
        """The controller's session for this node once registered; Assign and Stop carry it."""
        self.controller_host = "127.0.0.1"
        """Host of the controller as this node dials it: where a wildcard store address
        (a controller listening on 0.0.0.0) is reached."""

    def _fail(self, context, method: str, exc: Exception):
        log.warning("%s refused: %s", method, exc)
        context.abort(grpc_status(exc), str(exc))

    def _check_session(self, sent: str, what: str) -> None:
        """Assign and Stop come from the controller this node registered with, or not at all."""
        if not self.session:
            raise AssignmentError(
                "this node has not registered with a controller yet; it takes orders only "
                "from the controller that registered it",
                field=f"{what}.session",
                code=grpc.StatusCode.FAILED_PRECONDITION,
            )
        if not hmac.compare_digest(sent.encode(), self.session.encode()):
            raise AssignmentError(
                f"does not match this node's registration: the {what} is not from the "
                "controller it registered with",
                field=f"{what}.session",
                code=grpc.StatusCode.PERMISSION_DENIED,
            )

    def Assign(self, request, context):
        try:
            self._check_session(request.session, "assignment")
            a = validate_assignment(
                request,
                gpu_type=self.gpus.gpu_type,
                zone=self.gpus.zone,
                num_devices=self.gpus.count,
                current_generation=self.runner.current_generation(),
                controller_host=self.controller_host,
            )
        except Exception as exc:  # noqa: BLE001 - any bad input becomes a clear status
            self._fail(context, "Assign", exc)
        started = self.runner.start(a)
        log.info("generation %d: started ranks %s", a.generation, [r for r, _ in a.ranks])
        return agent_pb2.AssignResponse(generation=a.generation, ranks_started=started)

    def Stop(self, request, context):
        try:
            self._check_session(request.session, "stop")
            if not 0 <= request.grace_s <= 600:  # NaN fails too
                raise SailorRuntimeError(
                    f"must be in 0..600 seconds, got {request.grace_s}", field="stop.grace_s"
                )
        except Exception as exc:  # noqa: BLE001 - any bad input becomes a clear status
            self._fail(context, "Stop", exc)
        n = self.runner.stop(request.generation, request.grace_s or 1.0)
        return agent_pb2.StopResponse(ranks_stopped=n)

    def GetStatus(self, request, context):
        return agent_pb2.AgentStatus(
            worker_id=self.worker_id,
            generation=self.runner.current_generation(),
            gpus=self.gpus.to_proto(),
            ranks=rank_statuses(self.runner),
        )


def create_agent_server(
    servicer: AgentServicer,
    address: str = "127.0.0.1:0",
    token: str | None = None,
    tls: TlsFiles | None = None,
) -> tuple[grpc.Server, int]:
    """A started-later server for ``servicer`` bound to ``address``; returns (server, port)."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4), interceptors=interceptors(token)
    )
    agent_pb2_grpc.add_WorkerAgentServiceServicer_to_server(servicer, server)
    return server, listen(server, address, token, tls or TlsFiles())
