"""Who may connect to the rendezvous store: the controller and the nodes it assigned.

The store itself (``engine.storeserver``) answers only clients that prove they hold their
generation's key, so this filter no longer guards the keys; it is kept as defence in depth: a
host that was never assigned cannot even open a connection, so it cannot hold the store's
handshake slots (``MAX_HANDSHAKES``) or reach its parser. The controller attaches a classic BPF
socket filter to the store's listening socket that drops connection attempts (SYNs) from every
IPv4 source but loopback, the controller's own address and the addresses its assigned nodes
registered from and advertise; it is replaced at every assignment. Established connections are
untouched. IPv6 sources are not filtered (logged once), nor is a store past ``MAX_SOURCES``
nodes: there the key alone guards the store, as it does against a process on an allowed host.
"""

from __future__ import annotations

import ctypes
import ipaddress
import logging
import os
import socket
import struct
from collections.abc import Iterable

log = logging.getLogger("sailor.controller")

SO_ATTACH_FILTER = 26
SKF_NET_OFF = -0x100000
"""Classic BPF: offsets from here address the IP header (the filter runs at the TCP layer)."""
IPV4_SOURCE = 12
MAX_SOURCES = 250
"""A jump offset is one byte: past this many sources the filter is not replaced (logged)."""
_LD_W_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06
UNFILTERED = (
    "the rendezvous store is not filtered by address (IPv6, or more than %d nodes); its key "
    "alone guards it"
)


def _program(sources: list[int]) -> bytes:
    """Accept a packet whose IPv4 source is one of ``sources``, drop any other."""
    n = len(sources)
    code = [struct.pack("HBBI", _LD_W_ABS, 0, 0, (SKF_NET_OFF + IPV4_SOURCE) & 0xFFFFFFFF)]
    code += [struct.pack("HBBI", _JEQ_K, n - i, 0, ip) for i, ip in enumerate(sources)]
    code += [struct.pack("HBBI", _RET_K, 0, 0, 0), struct.pack("HBBI", _RET_K, 0, 0, 0xFFFFFFFF)]
    return b"".join(code)


def ipv4_sources(hosts: Iterable[str]) -> set[str] | None:
    """The IPv4 addresses of ``hosts`` (names resolved); None when one is IPv6 only."""
    out = set()
    for host in hosts:
        host = host.strip("[]")
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            try:
                addr = ipaddress.ip_address(socket.gethostbyname(host))
            except OSError:
                continue  # an unresolvable name cannot connect under it either
        if addr.version == 6:
            return None
        out.add(str(addr))
    return out


class StoreGuard:
    """The allow-list filter of one listening socket (a duplicate of its fd, owned here)."""

    def __init__(self, listening_fd: int, own_host: str, ipv4: bool = True) -> None:
        self._fd = os.dup(listening_fd)
        self._ipv4 = ipv4
        """An IPv6 listener is not filtered (IPv6 packets have their source elsewhere)."""
        self._always = {"127.0.0.1"} | (ipv4_sources([own_host]) or set()) - {"0.0.0.0"}
        self._warned = False

    def allow(self, hosts: Iterable[str]) -> None:
        """Let only ``hosts`` (and loopback, the controller) open connections from now on."""
        sources = ipv4_sources(hosts)
        if not self._ipv4 or sources is None or len(sources | self._always) > MAX_SOURCES:
            if not self._warned:
                log.warning(UNFILTERED, MAX_SOURCES)
                self._warned = True
            return
        ips = sorted(int(ipaddress.IPv4Address(a)) for a in sources | self._always)
        program = _program(ips)
        buffer = ctypes.create_string_buffer(program)
        fprog = struct.pack("HL", len(program) // 8, ctypes.addressof(buffer))
        with socket.socket(fileno=os.dup(self._fd)) as sock:
            sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
