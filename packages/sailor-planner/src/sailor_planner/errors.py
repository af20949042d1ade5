"""The sailor-planner exception family.

Every error names the offending field (``field``) and says how to fix it. The CLI turns these
(and sailor-sim's ``SailorSimError``) into one line and exit status 2; the gRPC server maps them
to INVALID_ARGUMENT / FAILED_PRECONDITION in one place (``server._status_for``).
"""

from __future__ import annotations

from sailor_sim import SailorError


class SailorPlannerError(SailorError):
    """Base of every error sailor-planner raises on bad input."""


class RequestError(SailorPlannerError):
    """A planning request that is malformed or inconsistent (maps to INVALID_ARGUMENT)."""


class NoFeasiblePlanError(SailorPlannerError):
    """No plan of the search space fits the inventory under the constraints
    (maps to FAILED_PRECONDITION: the request is valid, the world cannot satisfy it)."""


class CallAbortedError(SailorPlannerError):
    """A client call given up by its caller (``abort``) while it waited for the planner."""


class RequestCancelledError(SailorPlannerError):
    """The caller cancelled the request or its deadline passed; the search stopped early
    (maps to CANCELLED / DEADLINE_EXCEEDED)."""


class WorkLimitError(SailorPlannerError):
    """A request asks for more work than the server allows (inventory size, candidates,
    queued searches); maps to RESOURCE_EXHAUSTED."""
