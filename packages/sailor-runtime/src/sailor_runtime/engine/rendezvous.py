"""The ranks' side of the rendezvous store: ``RendezvousStore``, a ``torch.distributed.Store``.

It speaks ``storeserver``'s protocol: it authenticates with its namespace's key (sent to the
node in its Assignment, never the run secret itself) and then sees only that namespace. torch's
c10d calls it through its Python-store trampoline (set, get, add, compare_set, check, wait,
delete_key, num_keys, append, multi_get, multi_set, clone), for gloo and NCCL alike: gloo
exchanges its pairs' addresses through it, NCCL its unique id. ``get`` and ``wait`` block until
the keys exist or the store's timeout passes, then raise ``torch.distributed.DistStoreError``
as TCPStore does.

Lifetime: torch reaches a Python store through its Python object, so whoever passes one to
``init_process_group`` keeps it referenced until the group is destroyed (``rank.train`` does);
``clone`` keeps its clones referenced by the original for the same reason.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from datetime import timedelta

import torch.distributed as dist

from . import storeserver as proto
from .config import EngineError

ANSWER_SLACK_S = 30.0
"""How long past its timeout an answer may take before the store counts as gone."""


class StoreRefused(EngineError):
    """The rendezvous store refused this rank's key (another run's, or a forged one)."""


class RendezvousStore(dist.Store):
    """A client of ``StoreServer`` bound to one namespace. One connection, one request at a
    time (a lock), as TCPStore's client; ``clone`` opens another connection."""

    def __init__(
        self,
        host: str,
        port: int,
        namespace: str,
        key: bytes,
        timeout: timedelta = timedelta(seconds=300),
    ) -> None:
        super().__init__()
        self._where = (host, port, namespace, key)
        self.set_timeout(timeout)
        self._lock = threading.Lock()
        self._clones: list[RendezvousStore] = []
        self._channel = self._connect(timeout.total_seconds())

    def _connect(self, timeout_s: float) -> proto.Channel:
        host, port, namespace, key = self._where
        deadline = time.monotonic() + timeout_s
        while True:  # the server may not listen yet (a rank 0 that hosts it starts with us)
            try:
                sock = socket.create_connection((host, port), timeout=proto.HANDSHAKE_TIMEOUT_S)
                break
            except (ConnectionRefusedError, ConnectionResetError, TimeoutError):
                if time.monotonic() > deadline:
                    raise dist.DistStoreError(
                        f"the rendezvous store at {host}:{port} did not answer within "
                        f"{timeout_s:.0f} s"
                    ) from None
                time.sleep(0.1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            channel = proto.client_handshake(sock, namespace, key)
        except (OSError, proto.StoreProtocolError):
            sock.close()
            raise
        if channel is None:
            sock.close()
            raise StoreRefused(
                f"the rendezvous store at {host}:{port} refused the key of {namespace!r} (this "
                "rank's assignment is not from the store's run)",
                field="store_key",
            )
        sock.settimeout(None)
        return channel

    # ---- transport -----------------------------------------------------------------------------
    def _call(self, op: int, *fields: bytes, wait_ms: int | None = None) -> tuple[int, bytes]:
        """One request and its answer. The socket waits the store's timeout (a blocking op:
        its own, 0 = forever) plus ``ANSWER_SLACK_S``, so a store that vanished without a
        word (a partition) fails the call instead of hanging it."""
        ms = self._timeout_ms() if wait_ms is None else wait_ms
        with self._lock:
            try:
                self._channel.sock.settimeout(ms / 1000 + ANSWER_SLACK_S if ms > 0 else None)
                self._channel.send(bytes([op]) + proto.pack(*fields))
                answer = self._channel.recv()
            except (OSError, proto.StoreProtocolError) as exc:
                self._channel.sock.close()  # half a frame may be in flight: never reuse it
                host, port = self._where[:2]
                raise dist.DistNetworkError(
                    f"the rendezvous store at {host}:{port} is gone ({exc})"
                ) from None
        if answer[0] == proto.ERROR:
            raise dist.DistStoreError(proto.unpack(answer[1:])[0].decode())
        return answer[0], answer[1:]

    def _timeout_ms(self, timeout: timedelta | None = None) -> int:
        timeout = self.timeout if timeout is None else timeout
        return int(timeout.total_seconds() * 1000)

    def _blocking(self, op: int, keys: list[str], timeout: timedelta | None = None) -> bytes:
        ms = self._timeout_ms(timeout)
        fields = (k.encode() for k in keys)
        status, rest = self._call(op, struct.pack(">q", ms), *fields, wait_ms=ms)
        if status == proto.TIMEOUT:
            raise dist.DistStoreError(f"wait timeout after {ms}ms, keys: {keys}")
        return rest

    # ---- torch.distributed.Store ---------------------------------------------------------------
    def set(self, key: str, value) -> None:
        self._call(proto.SET, key.encode(), _bytes(value))

    def get(self, key: str) -> bytes:
        return proto.unpack(self._blocking(proto.GET, [key]))[0]

    def add(self, key: str, value: int) -> int:
        return struct.unpack(
            ">q", self._call(proto.ADD, key.encode(), struct.pack(">q", value))[1]
        )[0]

    def compare_set(self, key: str, expected_value, desired_value) -> bytes:
        rest = self._call(proto.CSET, key.encode(), _bytes(expected_value), _bytes(desired_value))
        return proto.unpack(rest[1])[0]

    def check(self, keys: list[str]) -> bool:
        return bool(self._call(proto.CHECK, *(k.encode() for k in keys))[1][0])

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        self._blocking(proto.WAIT, list(keys), timeout)

    def delete_key(self, key: str) -> bool:
        return bool(self._call(proto.DELETE, key.encode())[1][0])

    def num_keys(self) -> int:
        return struct.unpack(">q", self._call(proto.NUM)[1])[0]

    def append(self, key: str, value) -> None:
        self._call(proto.APPEND, key.encode(), _bytes(value))

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return proto.unpack(self._blocking(proto.MGET, list(keys)))

    def multi_set(self, keys: list[str], values) -> None:
        self._call(proto.MSET, *(k.encode() for k in keys), *(_bytes(v) for v in values))

    def clone(self) -> RendezvousStore:
        host, port, namespace, key = self._where
        clone = RendezvousStore(host, port, namespace, key, self.timeout)
        self._clones.append(clone)
        return clone

    def close(self) -> None:
        for clone in self._clones:
            clone.close()
        self._channel.sock.close()


def _bytes(value) -> bytes:
    if isinstance(value, str):
        return value.encode()
    return bytes(value)
