"""Who may talk to the planner server: loopback by default; beyond it a shared token, and TLS.

A server bound to any address other than loopback must have a token (``--token`` or
``SAILOR_PLANNER_TOKEN``); clients send it as the ``x-sailor-token`` metadata entry (the same
entry the runtime's controller and agents use). Health checks stay open so probes work. TLS is
on when a certificate and key file are given.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from sailor_sim import inputs

from .errors import RequestError

TOKEN_METADATA_KEY = "x-sailor-token"
TOKEN_ENV = "SAILOR_PLANNER_TOKEN"
OPEN_METHODS = ("/grpc.health.v1.Health/",)
log = logging.getLogger("sailor.planner.access")


@dataclass(frozen=True)
class Access:
    """How the server authenticates callers."""

    token: str | None = None
    """Shared secret every call but Health must carry; None = loopback only, no token."""
    tls_cert: Path | None = None
    """PEM certificate chain; with ``tls_key``, the server speaks TLS."""
    tls_key: Path | None = None
    """PEM private key of ``tls_cert``."""

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise RequestError("give both --tls-cert and --tls-key, or neither", field="tls")

    def credentials(self) -> grpc.ServerCredentials | None:
        if self.tls_cert is None or self.tls_key is None:
            return None
        cert = inputs.read_text(self.tls_cert, "tls_cert", max_bytes=1 << 20).encode()
        key = inputs.read_text(self.tls_key, "tls_key", max_bytes=1 << 20).encode()
        return grpc.ssl_server_credentials([(key, cert)])

    def interceptors(self) -> list[grpc.ServerInterceptor]:
        return [TokenInterceptor(self.token)] if self.token else []


def resolve_token(token: str | None) -> str | None:
    """The token given, else $SAILOR_PLANNER_TOKEN, else None."""
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    return token or None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, access: Access) -> None:
    """Refuse to listen beyond loopback without a token."""
    if not is_loopback(host) and not access.token:
        raise RequestError(
            f"listening on {host!r} would let anyone plan on this server; pass --token "
            f"(or set {TOKEN_ENV}), and --tls-cert/--tls-key, or bind 127.0.0.1",
            field="host",
        )


def _deny(method: str) -> grpc.RpcMethodHandler:
    def abort(request, context):  # noqa: ARG001 - signature fixed by grpc
        context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            f"missing or wrong {TOKEN_METADATA_KEY} for {method}; send the server's token",
        )

    return grpc.unary_unary_rpc_method_handler(abort)


class TokenInterceptor(grpc.ServerInterceptor):
    """Refuses calls whose token differs from ``token`` (constant-time compare), except the
    ``OPEN_METHODS`` (Health). The one token check of every Sailor service: the runtime's
    controller and agents use it too, with ``on_refused(method)`` to count refusals."""

    def __init__(self, token: str, on_refused: Callable[[str], None] | None = None) -> None:
        self._token = token.encode()
        self._on_refused = on_refused

    def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        if method.startswith(OPEN_METHODS):
            return continuation(handler_call_details)
        sent = dict(handler_call_details.invocation_metadata or ()).get(TOKEN_METADATA_KEY, "")
        sent_bytes = sent.encode() if isinstance(sent, str) else bytes(sent)
        if hmac.compare_digest(sent_bytes, self._token):
            return continuation(handler_call_details)
        log.warning("refused %s: missing or wrong token", method)
        if self._on_refused:
            self._on_refused(method)
        return _deny(method)
