"""Calls from the controller to the worker agents, fanned out in parallel."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc

from ..proto import agent_pb2, agent_pb2_grpc
from ..security import TlsFiles, call_metadata


class AgentClients:
    """One channel per agent address, reused across generations (and made afresh when an
    agent registers anew there: ``forget``)."""

    def __init__(self, token: str | None, tls: TlsFiles | None = None) -> None:
        self.metadata = call_metadata(token)
        self.tls = tls or TlsFiles()
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()
        """Channels are made by the fan-out threads and dropped by registrations."""
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="agent-call")

    def stub(self, address: str) -> agent_pb2_grpc.WorkerAgentServiceStub:
        with self._lock:
            if address not in self._channels:
                self._channels[address] = self.tls.channel(address)
            return agent_pb2_grpc.WorkerAgentServiceStub(self._channels[address])

    def forget(self, address: str) -> None:
        """Drop the channel to ``address``: an agent restarted there gets a fresh one. The old
        one may sit in gRPC's reconnect back-off after failing to reach the dead agent, and
        would fail calls to the new one at once ("Connection refused")."""
        with self._lock:
            channel = self._channels.pop(address, None)
        if channel is not None:
            channel.close()

    def fan_out(
        self, calls: dict[str, Callable[[agent_pb2_grpc.WorkerAgentServiceStub], object]]
    ) -> dict[str, object | grpc.RpcError]:
        """Run ``fn(stub)`` per address in parallel; the value is the reply or the RpcError."""

        def one(address, fn):
            try:
                return fn(self.stub(address))
            except grpc.RpcError as exc:
                return exc

        futures = {a: self._pool.submit(one, a, fn) for a, fn in calls.items()}
        return {a: f.result() for a, f in futures.items()}

    def stop_all(self, sessions: dict[str, str], generation: int, timeout_s: float = 10.0):
        """Stop ``generation`` (0 = any) on each agent address; ``sessions``: address -> the
        session the agent was issued (an agent refuses a Stop without it)."""

        def stop(session: str):
            request = agent_pb2.StopRequest(generation=generation, grace_s=1.0, session=session)
            return lambda s: s.Stop(request, timeout=timeout_s, metadata=self.metadata)

        return self.fan_out({a: stop(session) for a, session in sessions.items()})

    def status_all(self, addresses: list[str], timeout_s: float = 1.5):
        request = agent_pb2.AgentStatusRequest()
        return self.fan_out(
            {
                a: (lambda s: s.GetStatus(request, timeout=timeout_s, metadata=self.metadata))
                for a in addresses
            }
        )

    def assign_all(self, assignments: dict[str, object], timeout_s: float = 30.0):
        return self.fan_out(
            {
                a: (lambda s, m=msg: s.Assign(m, timeout=timeout_s, metadata=self.metadata))
                for a, msg in assignments.items()
            }
        )

    def close(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for ch in channels:
            ch.close()
        self._pool.shutdown(wait=False)
