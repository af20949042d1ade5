"""The sailor-runtime exception family (control plane side).

Each error names the offending field and how to fix it. The `sailor` CLI prints one line and
exits 2; the controller and agent services map them to gRPC status codes in one place
(`grpc_status`).
"""

from __future__ import annotations

import grpc

from sailor_sim import SailorError


class SailorRuntimeError(SailorError):
    """Base of every error the control plane raises on bad input or state."""

    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(
        self, message: str, *, field: str | None = None, code: grpc.StatusCode | None = None
    ) -> None:
        if code is not None:
            self.code = code
        super().__init__(message, field=field)


class RegistrationError(SailorRuntimeError):
    """A worker registration with impossible GPUs, a bad address or id."""


class ControllerUnreachableError(SailorRuntimeError):
    """A worker found no controller at its address for its whole ``--controller-timeout``
    (never reachable, as opposed to one that answered and refused): `sailor worker` exits 1,
    as it does when a controller it knew goes silent for that long."""

    code = grpc.StatusCode.UNAVAILABLE


class AssignmentError(SailorRuntimeError):
    """A malformed assignment: inconsistent ranks, devices, plan or rendezvous."""


class StaleGenerationError(SailorRuntimeError):
    """An assignment or stop for a generation older than the one running."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class PlacementError(SailorRuntimeError):
    """A plan that the live workers cannot host."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class PlannerUnavailableError(SailorRuntimeError):
    """The planner server could not be reached, or refused the request."""

    code = grpc.StatusCode.UNAVAILABLE


class NoPlanError(PlannerUnavailableError):
    """The planner answered, and no plan fits the live GPUs: wait for a change, not an error."""

    code = grpc.StatusCode.FAILED_PRECONDITION


def grpc_status(exc: BaseException) -> grpc.StatusCode:
    """The gRPC status code for an exception raised while serving a call."""
    if isinstance(exc, SailorRuntimeError):
        return exc.code
    if isinstance(exc, SailorError):
        return grpc.StatusCode.INVALID_ARGUMENT
    return grpc.StatusCode.INTERNAL
