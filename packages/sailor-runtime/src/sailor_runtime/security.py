"""Shared-token authentication for the controller and agent gRPC services.

Everything binds to 127.0.0.1 unless told otherwise. A service that listens on any other
address must have a token (``--token`` or ``SAILOR_TOKEN``); clients send it as the
``x-sailor-token`` metadata entry. A call with a missing or wrong token is refused with
UNAUTHENTICATED and logged with the method name; the server keeps serving.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
from collections.abc import Callable

import grpc

from .errors import SailorRuntimeError

TOKEN_METADATA_KEY = "x-sailor-token"
TOKEN_ENV = "SAILOR_TOKEN"
log = logging.getLogger("sailor.security")


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


def _deny(method: str) -> grpc.RpcMethodHandler:
    def abort(request, context):  # noqa: ARG001 - signature fixed by grpc
        context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            f"missing or wrong {TOKEN_METADATA_KEY} for {method}; use the shared token",
        )

    return grpc.unary_unary_rpc_method_handler(abort)


class TokenInterceptor(grpc.ServerInterceptor):
    """Refuses calls whose token differs from ``token`` (constant-time compare)."""

    def __init__(self, token: str, on_refused: Callable[[str], None] | None = None) -> None:
        self._token = token.encode()
        self._on_refused = on_refused

    def intercept_service(self, continuation, handler_call_details):
        sent = dict(handler_call_details.invocation_metadata or ()).get(TOKEN_METADATA_KEY, "")
        sent_bytes = sent.encode() if isinstance(sent, str) else bytes(sent)
        if hmac.compare_digest(sent_bytes, self._token):
            return continuation(handler_call_details)
        method = handler_call_details.method
        log.warning("refused %s: missing or wrong token", method)
        if self._on_refused:
            self._on_refused(method)
        return _deny(method)


def interceptors(token: str | None, on_refused=None) -> list[grpc.ServerInterceptor]:
    return [TokenInterceptor(token, on_refused)] if token else []
