"""Shared-token authentication for the controller and agent gRPC services.

Everything binds to 127.0.0.1 unless told otherwise. A service that listens on any other
address must have a token (``--token`` or ``SAILOR_TOKEN``); clients send it as the
``x-sailor-token`` metadata entry. A call with a missing or wrong token is refused with
UNAUTHENTICATED and logged with the method name; the server keeps serving. The check itself is
sailor-planner's ``access.TokenInterceptor`` (one for every Sailor service).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable

import grpc

from sailor_planner.access import TOKEN_METADATA_KEY, TokenInterceptor

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
