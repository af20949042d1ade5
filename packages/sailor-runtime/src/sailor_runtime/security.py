"""Token and TLS for the controller and agent gRPC services (both directions).

Everything binds to 127.0.0.1 unless told otherwise. A service that listens on any other
address must have a token (``--token`` or ``SAILOR_TOKEN``); clients send it as the
``x-sailor-token`` metadata entry. A call with a missing or wrong token is refused with
UNAUTHENTICATED and logged with the method name; the server keeps serving. The token check and
the server's TLS credentials are sailor-planner's ``access`` (``TokenInterceptor``,
``Access.credentials``): one implementation for every Sailor service. With ``TlsFiles`` a
controller or agent serves TLS (cert + key) and dials its peers over TLS trusting ``ca``.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from sailor_planner import TOKEN_METADATA_KEY, Access, TokenInterceptor
from sailor_sim import inputs

from .errors import SailorRuntimeError

TOKEN_ENV = "SAILOR_TOKEN"


def resolve_token(token: str | None) -> str | None:
    """The token given, else $SAILOR_TOKEN, else None (no authentication)."""
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    return token or None


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None, what: str) -> None:
    """Refuse to listen beyond loopback without a token."""
    if not is_loopback(host) and not token:
        raise SailorRuntimeError(
            f"{what} would listen on {host!r} without authentication; pass --token "
            f"(or set {TOKEN_ENV}) or bind 127.0.0.1",
            field="host",
        )


def call_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """Metadata to attach to every client call."""
    return ((TOKEN_METADATA_KEY, token),) if token else ()


def interceptors(
    token: str | None, on_refused: Callable[[str], None] | None = None
) -> list[grpc.ServerInterceptor]:
    """The planner's token check (one for every Sailor service; Health stays open)."""
    return [TokenInterceptor(token, on_refused)] if token else []


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of one controller or agent; all None = plain text (loopback or a VPN)."""

    cert: Path | None = None
    """This service's certificate chain; with ``key`` it serves TLS."""
    key: Path | None = None
    ca: Path | None = None
    """Trust peers (controller, agents) whose certificates this CA signed; dial them over TLS."""
    server_name: str | None = None
    """Check every peer's certificate for this name instead of the address dialed (pods and
    cloud VMs whose addresses are not known when the certificate is made)."""

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise SailorRuntimeError("give both --tls-cert and --tls-key, or neither", field="tls")

    def check(self) -> TlsFiles:
        """Refuse now, naming the file, what gRPC would report later as a bind failure or a
        hang: a certificate or CA that is not PEM, a key that does not match its certificate."""
        if self.cert is not None and self.key is not None:
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(self.cert, self.key)
            except (ssl.SSLError, OSError) as exc:
                raise SailorRuntimeError(
                    f"{self.cert} and {self.key} are not a PEM certificate chain and its "
                    f"private key ({_reason(exc)}); give the pair the certificate was made with",
                    field="--tls-cert",
                ) from None
        if self.ca is not None:
            try:
                ssl.create_default_context(cafile=str(self.ca))
            except (ssl.SSLError, OSError) as exc:
                raise SailorRuntimeError(
                    f"{self.ca} is not a PEM CA certificate ({_reason(exc)})", field="--tls-ca"
                ) from None
        return self

    def channel(self, address: str) -> grpc.Channel:
        """A channel to a peer: TLS trusting ``ca`` when given, else plain text."""
        if self.ca is None:
            return grpc.insecure_channel(address)
        ca = inputs.read_text(self.ca, "--tls-ca", max_bytes=1 << 20).encode()
        options = [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []
        credentials = grpc.ssl_channel_credentials(root_certificates=ca)
        return grpc.secure_channel(address, credentials, options=options)


def _reason(exc: Exception) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)


def listen(server: grpc.Server, address: str, token: str | None, tls: TlsFiles) -> int:
    """Bind ``server`` to ``address`` (TLS when ``tls`` has a cert and key); the bound port."""
    credentials = Access(token, tls.check().cert, tls.key).credentials()
    inputs.listenable(address, "--port")
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError:  # grpc raises instead of returning 0 on some versions
        port = 0
    if port == 0:
        raise SailorRuntimeError(
            f"cannot listen on {address}: the port is taken or the address is not this "
            "machine's; pick another --port or --host",
            field="host",
        )
    return port
