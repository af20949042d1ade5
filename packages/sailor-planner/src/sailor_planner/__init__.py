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
    "resolve_token": "service.access",
    "Access": "service.access",
    "AvailabilityTrace": "replay.trace",
    "CallAbortedError": "errors",
    "EVERY_CHANGE": "replay.policies",
    "ReconfigModel": "replay.reconfig",
    "ReplayRequest": "replay.request",
    "TOKEN_METADATA_KEY": "service.access",
    "TokenInterceptor": "service.access",
    "TraceState": "replay.trace",
    "planner_for": "sources",
    "read_trace": "replay.trace",
    "replay_trace": "replay.run",
    "trusted_ca": "service.access",
    "Planner": "planner",
    "SearchOptions": "request",
    "Constraints": "request",
    "PlanResult": "result",
    "RankedPlan": "result",
    "SearchStats": "result",
    "SailorPlannerError": "errors",
    "RequestError": "errors",
    "NoFeasiblePlanError": "errors",
    "exhaustive_best": "search.exhaustive",
    "best_single_type": "search.baselines",
    "uniform_all": "search.baselines",
    "PlannerClient": "service.client",
    "create_server": "service.server",
    "serve": "service.server",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sailor_planner' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
