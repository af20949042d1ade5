"""Who is alive: worker registration, heartbeats, graceful leave, failure by silence."""

from __future__ import annotations

import hmac
import re
import threading
import time
from dataclasses import dataclass, field

from ..agent.gpus import NodeGpus
from ..errors import RegistrationError

_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_ADDR_RE = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]{1,253}):(\d{1,5})$")


@dataclass
class Worker:
    worker_id: str
    agent_address: str
    gpus: NodeGpus
    hostname: str
    joined_at: float
    last_heartbeat: float
    session: str = ""
    """Nonce issued at registration (RegisterResponse.session)."""
    seen_from: str = ""
    """The address its registration came from (the controller's view of the node)."""
    alive: bool = True
    ranks: dict[tuple[int, int], tuple[int, int, str]] = field(default_factory=dict)
    """(generation, rank) -> (state, exit code, log tail) as last reported."""


def check_registration(worker_id: str, agent_address: str, gpus_msg) -> NodeGpus:
    if worker_id and not _ID_RE.match(worker_id):
        raise RegistrationError(
            "must be 1-64 letters, digits, '.', '_' or '-'", field="register.worker_id"
        )
    m = _ADDR_RE.match(agent_address)
    if not m or not 0 < int(m.group(2)) < 65536:
        raise RegistrationError(
            f"{agent_address[:80]!r} is not HOST:PORT with a port in 1..65535",
            field="register.agent_address",
        )
    return NodeGpus.from_proto(gpus_msg)


def reachable_address(advertised: str, peer: str) -> str:
    """The agent address to dial: as advertised, except that a wildcard host (an agent
    listening on 0.0.0.0 or ::) becomes the address its registration came from
    (``context.peer()``: ``ipv4:10.0.0.2:41234`` or ``ipv6:[fd00::2]:41234``)."""
    host, sep, port = advertised.rpartition(":")
    if not sep or host not in ("0.0.0.0", "::", "[::]"):
        return advertised
    kind, _, rest = peer.partition(":")
    seen = rest.rpartition(":")[0]
    if kind == "ipv4" and seen:
        return f"{seen}:{port}"
    if kind == "ipv6" and seen:
        return f"{seen}:{port}" if seen.startswith("[") else f"[{seen}]:{port}"
    return advertised  # a Unix socket or unknown peer: the check below refuses nothing new


def peer_host(peer: str) -> str:
    """The host of a gRPC peer (``ipv4:10.0.0.2:41234`` -> ``10.0.0.2``); "" if none."""
    kind, _, rest = peer.partition(":")
    return rest.rpartition(":")[0].strip("[]") if kind in ("ipv4", "ipv6") else ""


def same_secret(a: str, b: str) -> bool:
    """Constant-time comparison of two strings of any characters."""
    return hmac.compare_digest(a.encode(), b.encode())


class Membership:
    """Thread-safe registry of workers; the controller polls `expire` for silent ones."""

    def __init__(self, heartbeat_timeout_s: float) -> None:
        self.timeout_s = heartbeat_timeout_s
        self.workers: dict[str, Worker] = {}
        self.lock = threading.RLock()
        self._counter = 0

    def join(
        self, worker_id: str, address: str, gpus: NodeGpus, hostname: str, session: str = ""
    ) -> Worker:
        now = time.monotonic()
        with self.lock:
            if not worker_id:
                self._counter += 1
                worker_id = f"worker-{self._counter}"
                while worker_id in self.workers:  # a node may have chosen this name itself
                    self._counter += 1
                    worker_id = f"worker-{self._counter}"
            w = Worker(worker_id, address, gpus, hostname[:64], now, now, session)
            self.workers[worker_id] = w
            return w

    def alive(self) -> list[Worker]:
        with self.lock:
            return sorted((w for w in self.workers.values() if w.alive), key=lambda w: w.joined_at)

    def get(self, worker_id: str, session: str | None = None) -> Worker | None:
        """The live worker ``worker_id``; with ``session``, only if it is that registration's."""
        with self.lock:
            w = self.workers.get(worker_id)
            if w is None or not w.alive:
                return None
            if session is not None and not same_secret(w.session, session):
                return None
            return w

    def mark_dead(self, worker_id: str) -> Worker | None:
        with self.lock:
            w = self.workers.get(worker_id)
            if w is None or not w.alive:
                return None
            w.alive = False
            return w

    def expire(self) -> list[Worker]:
        """Mark and return workers silent for longer than the heartbeat timeout."""
        now = time.monotonic()
        with self.lock:
            gone = [
                w for w in self.workers.values()
                if w.alive and now - w.last_heartbeat > self.timeout_s
            ]  # fmt: skip
            for w in gone:
                w.alive = False
            return gone
