"""Sailor planner: search over GPU allocations x parallelization plans; gRPC planner server.

Public API (imported lazily, so `sailor-planner plan` does not pay for gRPC):
``Planner``, ``SearchOptions``, ``Constraints``, ``PlanResult``, ``RankedPlan``, ``SearchStats``,
``SailorPlannerError`` / ``RequestError`` / ``NoFeasiblePlanError``, ``exhaustive_best``,
``best_single_type`` / ``uniform_all`` (baselines), ``PlannerClient``, ``create_server``, ``serve``.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "resolve_token": "access",
    "Access": "access",
    "AvailabilityTrace": "trace",
    "CallAbortedError": "errors",
    "EVERY_CHANGE": "policies",
    "ReconfigModel": "reconfig",
    "ReplayRequest": "replayrequest",
    "TOKEN_METADATA_KEY": "access",
    "TokenInterceptor": "access",
    "TraceState": "trace",
    "planner_for": "sources",
    "read_trace": "trace",
    "replay": "replay",
    "trusted_ca": "access",
    "Planner": "planner",
    "SearchOptions": "request",
    "Constraints": "request",
    "PlanResult": "result",
    "RankedPlan": "result",
    "SearchStats": "result",
    "SailorPlannerError": "errors",
    "RequestError": "errors",
    "NoFeasiblePlanError": "errors",
    "exhaustive_best": "exhaustive",
    "best_single_type": "baselines",
    "uniform_all": "baselines",
    "PlannerClient": "client",
    "create_server": "server",
    "serve": "server",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sailor_planner' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
