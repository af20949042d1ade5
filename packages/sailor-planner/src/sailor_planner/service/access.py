"""Who may talk to a Sailor gRPC service: loopback by default; beyond it a shared token, and TLS.

The one implementation for every Sailor service (the planner server here; the runtime's
controller and agents through ``sailor_runtime.security``):

- ``TokenInterceptor``: the server side of the shared token (``x-sailor-token`` metadata);
  Health stays open so probes work.
- ``server_credentials(cert, key)``: TLS credentials from PEM files, validated at start (a
  garbage file or a key that does not match its certificate is an error naming the file, not
  a bind failure or a hang inside gRPC).
- ``client_channel(target, token, ca)``: a channel that presents the token on every call and,
  with a CA file, speaks TLS and trusts that CA.

A planner server bound to any address other than loopback must have a token (``--token`` or
``SAILOR_PLANNER_TOKEN``).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from sailor_sim import inputs

from ..errors import RequestError

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
        sendable_token(self.token, "--token")

    def credentials(self) -> grpc.ServerCredentials | None:
        if self.tls_cert is None or self.tls_key is None:
            return None
        return server_credentials(self.tls_cert, self.tls_key)

    def interceptors(self) -> list[grpc.ServerInterceptor]:
        return [TokenInterceptor(self.token)] if self.token else []


def sendable_token(token: str | None, field: str) -> str | None:
    """``token`` if gRPC can carry it: metadata values are printable ASCII. A server started
    with 'é' or a token file's trailing newline answered every call INTERNAL 'Invalid metadata'
    (the client's C-core refuses to send it), so both ends refuse it at once; the message never
    echoes the secret."""
    if token is not None and not all(" " <= ch <= "~" for ch in token):
        raise RequestError(
            "must be printable ASCII (letters, digits, punctuation, spaces), which is all gRPC "
            "metadata carries; remove other characters (e.g. a trailing newline from a file)",
            field=field,
        )
    return token


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


# ---- TLS: files checked before gRPC sees them ---------------------------------------------------
MAX_PEM_BYTES = 1 << 20


def _pem(path: str | os.PathLike, field: str) -> bytes:
    text = inputs.read_text(path, field, max_bytes=MAX_PEM_BYTES, error=RequestError)
    if "-----BEGIN " not in text:
        raise RequestError(f"{path} is not a PEM file (no -----BEGIN line)", field=field)
    return text.encode()


def server_credentials(cert: str | os.PathLike, key: str | os.PathLike) -> grpc.ServerCredentials:
    """TLS server credentials from a PEM certificate chain and its private key. Both are
    loaded by OpenSSL first (Python's ``ssl``), so a garbage file, an encrypted key or a key of
    another certificate is a RequestError naming the file."""
    cert_pem, key_pem = _pem(cert, "--tls-cert"), _pem(key, "--tls-key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, keyfile=key, password=_no_password)
    except ssl.SSLError as exc:
        raise RequestError(_tls_problem(exc, cert, key), field="tls") from None
    except OSError as exc:
        raise RequestError(f"cannot read {cert} or {key} ({exc.strerror})", field="tls") from None
    return grpc.ssl_server_credentials([(key_pem, cert_pem)])


def _no_password() -> bytes:
    raise RequestError("is encrypted; give an unencrypted PEM key", field="--tls-key")


def _tls_problem(exc: ssl.SSLError, cert, key) -> str:
    reason = (exc.reason or str(exc)).upper()
    if "KEY_VALUES_MISMATCH" in reason or "X509_CHECK_PRIVATE_KEY" in reason:
        return f"the key {key} does not match the certificate {cert}"
    if "PEM" in reason or "X509" in reason or "CERT" in reason:
        return f"{cert} is not a valid PEM certificate ({exc.reason})"
    return f"{key} is not a valid PEM private key for {cert} ({exc.reason})"


def trusted_ca(ca: str | os.PathLike, field: str = "--ca") -> bytes:
    """The PEM bundle of the CA a client trusts, checked to hold certificates; errors name
    ``field`` (the flag the caller took the path from)."""
    pem = _pem(ca, field)
    try:
        ssl.create_default_context(cadata=pem.decode())
    except ssl.SSLError as exc:
        raise RequestError(
            f"{ca} holds no valid CA certificate ({exc.reason})", field=field
        ) from None
    return pem


# ---- the client side: token on every call, TLS with a CA ---------------------------------------
class _TokenClientInterceptor(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
):
    """Adds the ``x-sailor-token`` metadata entry to every call."""

    def __init__(self, token: str) -> None:
        self._entry = (TOKEN_METADATA_KEY, token)

    def _with_token(self, details):
        metadata = [*(details.metadata or ()), self._entry]
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._with_token(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._with_token(client_call_details), request)


def client_channel(
    target: str,
    token: str | None = None,
    ca: str | os.PathLike | None = None,
    options: Sequence[tuple[str, object]] = (),
) -> grpc.Channel:
    """A channel to ``target`` that sends ``token`` with every call and, with ``ca`` (a PEM
    file), speaks TLS trusting that CA; without ``ca``, plaintext (loopback)."""
    sendable_token(token, "token")
    if ca is None:
        channel = grpc.insecure_channel(target, options=list(options))
    else:
        credentials = grpc.ssl_channel_credentials(root_certificates=trusted_ca(ca))
        channel = grpc.secure_channel(target, credentials, options=list(options))
    if token:
        channel = grpc.intercept_channel(channel, _TokenClientInterceptor(token))
    return channel
