"""The rendezvous store: a key-value server that answers only clients holding the run's key.

torch's TCPStore has no authentication: whoever reaches its port may list its keys and write
under any prefix. This store replaces it for every rendezvous (the controller's, ``launch_local``
and ``launch_many``'s, a rank 0 that hosts its own). It is torch-free; the ranks' client is
``engine.rendezvous.RendezvousStore``, a ``torch.distributed.Store``.

Keys live in *namespaces* (one per generation, ``gen-N``, or per local run). A namespace's key
is ``namespace_key(secret, namespace)`` = HMAC-SHA256(run secret, namespace): the controller
holds the run secret and sends each assigned node only the key of its generation, so a node (or
a straggler rank of an older generation) can touch that generation's keys and no other.

Wire protocol (one TCP connection per client, requests answered in order):

- handshake: the server sends ``MAGIC`` + a 32-byte nonce; the client sends its namespace
  (2-byte length + bytes), its own nonce and HMAC(ns key, "client" | both nonces | namespace).
  A wrong MAC gets one refusal byte and the connection closed: nothing was read, listed or
  written. Otherwise the server answers an accept byte and HMAC(ns key, "server" | ...), which
  proves to the client that the server holds the key too. The secret never crosses the wire.
- frames: 4-byte length, a 32-byte MAC, the body. The MAC is HMAC(session key, direction |
  sequence number | body) with a session key derived from both nonces, so a frame cannot be
  forged, replayed or reordered by anyone on the path (values are not encrypted; the values
  are rendezvous addresses and NCCL's unique id).
- bodies: an op byte and length-prefixed fields; answers a status byte and fields.

There is no ``list_keys`` op: a client names the keys it wants, inside its namespace only.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable

from .config import EngineError

log = logging.getLogger("sailor.store")

MAGIC = b"SAILOR-STORE-1\n"
NONCE = 32
MAC = 32
MAX_NAMESPACE = 256
MAX_FRAME = 64 << 20
"""A request or answer larger than this ends the connection (rendezvous values are bytes to
kilobytes; gloo and NCCL exchange addresses and a 128-byte unique id)."""
HANDSHAKE_TIMEOUT_S = 10.0
MAX_HANDSHAKES = 64
"""Connections still in their handshake at once; more are closed at once (a flood of silent
connections cannot pin a thread each)."""
ACCEPT, REFUSE = b"\x01", b"\x00"
OK, TIMEOUT, ERROR = 0, 1, 2
SET, GET, ADD, CSET, CHECK, WAIT, DELETE, NUM, APPEND, MGET, MSET = range(1, 12)
C2S, S2C = b"c", b"s"


class StoreProtocolError(EngineError):
    """The peer broke the protocol (a bad MAC, an oversize frame, a closed connection)."""


def namespace_key(secret: bytes | str, namespace: str) -> bytes:
    """The key of one namespace, derived from the run secret."""
    if isinstance(secret, str):
        secret = secret.encode()
    return hmac.new(secret, b"sailor-store/" + namespace.encode(), hashlib.sha256).digest()


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"|".join(parts), hashlib.sha256).digest()


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise StoreProtocolError("the connection closed")
        buf += chunk
    return bytes(buf)


def pack(*fields: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(f)) + f for f in fields)


def unpack(data: bytes) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        if i + 4 > len(data):
            raise StoreProtocolError("a truncated field")
        (n,) = struct.unpack_from(">I", data, i)
        i += 4
        if i + n > len(data):
            raise StoreProtocolError("a truncated field")
        out.append(data[i : i + n])
        i += n
    return out


class Channel:
    """One authenticated connection: MAC'd, numbered frames each way."""

    def __init__(self, sock: socket.socket, session: bytes, send_dir: bytes) -> None:
        self.sock = sock
        self._key = session
        self._send_dir, self._recv_dir = send_dir, (S2C if send_dir == C2S else C2S)
        self._sent = self._received = 0

    def send(self, body: bytes) -> None:
        seq = struct.pack(">Q", self._sent)
        self._sent += 1
        mac = _mac(self._key, self._send_dir, seq, body)
        self.sock.sendall(struct.pack(">I", len(body)) + mac + body)

    def recv(self) -> bytes:
        (n,) = struct.unpack(">I", recv_exact(self.sock, 4))
        if n > MAX_FRAME:
            raise StoreProtocolError(f"a frame of {n} bytes (at most {MAX_FRAME})")
        mac = recv_exact(self.sock, MAC)
        body = recv_exact(self.sock, n)
        seq = struct.pack(">Q", self._received)
        self._received += 1
        if not hmac.compare_digest(mac, _mac(self._key, self._recv_dir, seq, body)):
            raise StoreProtocolError("a frame with a wrong MAC")
        return body


def client_handshake(sock: socket.socket, namespace: str, key: bytes) -> Channel | None:
    """Authenticate to the server; None when it refused the key."""
    hello = recv_exact(sock, len(MAGIC) + NONCE)
    if not hello.startswith(MAGIC):
        raise StoreProtocolError("not a Sailor rendezvous store")
    server_nonce, nonce = hello[len(MAGIC) :], os.urandom(NONCE)
    ns = namespace.encode()
    proof = _mac(key, b"client", server_nonce, nonce, ns)
    sock.sendall(struct.pack(">H", len(ns)) + ns + nonce + proof)
    answer = sock.recv(1)
    if answer != ACCEPT:
        return None
    server_proof = recv_exact(sock, MAC)
    if not hmac.compare_digest(server_proof, _mac(key, b"server", server_nonce, nonce, ns)):
        raise StoreProtocolError("the server does not hold this namespace's key")
    return Channel(sock, _mac(key, b"session", server_nonce, nonce, ns), C2S)


class _Namespace:
    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}


class StoreServer:
    """The store, listening on ``listener`` (a bound, listening socket it takes over).

    ``keys(namespace)``: the namespace's key, or None to refuse it (``secret_keys(secret)`` for
    a run secret). One thread accepts; one thread serves each authenticated client."""

    def __init__(self, listener: socket.socket, keys: Callable[[str], bytes | None]) -> None:
        self._listener = listener
        self._keys = keys
        self._namespaces: dict[str, _Namespace] = {}
        self._cond = threading.Condition()
        self._handshaking = threading.BoundedSemaphore(MAX_HANDSHAKES)
        self._clients: set[socket.socket] = set()
        self._closed = False
        self.refused = 0
        """Handshakes refused (a wrong key or namespace, or garbage)."""
        self.port: int = listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="store-accept", daemon=True)
        self._thread.start()

    @classmethod
    def listen(cls, host: str, port: int, keys: Callable[[str], bytes | None]) -> StoreServer:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address[:2])
        except OSError:
            sock.close()
            raise
        sock.listen(512)
        return cls(sock, keys)

    def fileno(self) -> int:
        """The listening socket's fd (for a socket filter)."""
        return self._listener.fileno()

    # ---- connections ---------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            if not self._handshaking.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _handshake(self, conn: socket.socket) -> tuple[Channel, _Namespace] | None:
        try:
            conn.settimeout(HANDSHAKE_TIMEOUT_S)
            nonce = os.urandom(NONCE)
            conn.sendall(MAGIC + nonce)
            (n,) = struct.unpack(">H", recv_exact(conn, 2))
            if n > MAX_NAMESPACE:
                return None
            ns_bytes = recv_exact(conn, n)
            rest = recv_exact(conn, NONCE + MAC)
            client_nonce, proof = rest[:NONCE], rest[NONCE:]
            try:
                namespace = ns_bytes.decode()
            except UnicodeDecodeError:
                return None
            key = self._keys(namespace) if namespace else None
            expected = _mac(key or b"\0" * 32, b"client", nonce, client_nonce, ns_bytes)
            if key is None or not hmac.compare_digest(proof, expected):
                conn.sendall(REFUSE)
                return None
            conn.sendall(ACCEPT + _mac(key, b"server", nonce, client_nonce, ns_bytes))
            conn.settimeout(None)
            session = _mac(key, b"session", nonce, client_nonce, ns_bytes)
            with self._cond:
                space = self._namespaces.setdefault(namespace, _Namespace())
            return Channel(conn, session, S2C), space
        except (OSError, struct.error, StoreProtocolError):
            return None
        finally:
            self._handshaking.release()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        authed = self._handshake(conn)
        if authed is None:
            with self._cond:
                self.refused += 1
                count = self.refused
            if count & (count - 1) == 0:  # 1, 2, 4, 8, ...: a flood does not flood the log
                log.warning("rendezvous store: refused a client without its key (%d so far)", count)
            conn.close()
            return
        channel, space = authed
        with self._cond:
            if self._closed:
                conn.close()
                return
            self._clients.add(conn)
        try:
            while True:
                body = channel.recv()
                channel.send(self._answer(space, body))
        except (OSError, StoreProtocolError, struct.error, IndexError, ValueError):
            pass
        finally:
            with self._cond:
                self._clients.discard(conn)
            conn.close()

    # ---- operations ----------------------------------------------------------------------------
    def _wait_for(self, space: _Namespace, keys: list[bytes], timeout_ms: int) -> bool:
        """Under the condition: wait until every key exists (False: the timeout passed)."""
        deadline = time.monotonic() + timeout_ms / 1000 if timeout_ms > 0 else None
        while not all(k in space.data for k in keys):
            if self._closed:
                return False
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._cond.wait(left)
        return True

    def _answer(self, space: _Namespace, body: bytes) -> bytes:
        op, args = body[0], unpack(body[1:])
        data = space.data
        with self._cond:
            if op == SET:
                data[args[0]] = args[1]
                self._cond.notify_all()
                return bytes([OK])
            if op in (GET, MGET, WAIT):
                timeout_ms = struct.unpack(">q", args[0])[0]
                keys = args[1:]
                if not self._wait_for(space, keys, timeout_ms):
                    return bytes([TIMEOUT])
                if op == WAIT:
                    return bytes([OK])
                return bytes([OK]) + pack(*(data[k] for k in keys))
            if op == ADD:
                value = int(data.get(args[0], b"0")) + struct.unpack(">q", args[1])[0]
                data[args[0]] = str(value).encode()
                self._cond.notify_all()
                return bytes([OK]) + struct.pack(">q", value)
            if op == CSET:
                key, expected, desired = args
                current = data.get(key)
                if (current is None and expected == b"") or current == expected:
                    data[key] = desired
                    self._cond.notify_all()
                    return bytes([OK]) + pack(desired)
                return bytes([OK]) + pack(expected if current is None else current)
            if op == CHECK:
                return bytes([OK, all(k in data for k in args)])
            if op == DELETE:
                return bytes([OK, data.pop(args[0], None) is not None])
            if op == NUM:
                return bytes([OK]) + struct.pack(">q", len(data))
            if op == APPEND:
                data[args[0]] = data.get(args[0], b"") + args[1]
                self._cond.notify_all()
                return bytes([OK])
            if op == MSET:
                half = len(args) // 2
                data.update(zip(args[:half], args[half:], strict=True))
                self._cond.notify_all()
                return bytes([OK])
        return bytes([ERROR]) + pack(f"unknown op {op}".encode())

    def drop(self, namespace: str) -> None:
        """Forget a namespace's keys (a generation that ended)."""
        with self._cond:
            self._namespaces.pop(namespace, None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            clients = list(self._clients)
            self._cond.notify_all()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        for conn in clients:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def secret_keys(secret: bytes | str) -> Callable[[str], bytes]:
    """Accept every namespace whose key derives from ``secret``."""
    return lambda namespace: namespace_key(secret, namespace)


def one_key(namespace: str, key: bytes) -> Callable[[str], bytes | None]:
    """Accept one namespace with its key (a rank 0 that hosts its own rendezvous)."""
    return lambda ns: key if ns == namespace else None
