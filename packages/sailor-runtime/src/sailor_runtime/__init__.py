"""Sailor runtime: heterogeneous training on torch.distributed, controller, agents, elasticity.

Public API (imported lazily: the agent and the CLI must not pay for torch before they need it):
``Controller`` / ``ControllerConfig``, ``WorkerAgent``, ``TrainConfig``, ``LocalRunConfig`` /
``run_local`` (what ``sailor run --local`` runs), and the error family ``SailorRuntimeError``.
"""

import importlib

__version__ = "0.1.0"

_FACE = {
    "Controller": "controller.controller",
    "ControllerConfig": "controller.controller",
    "WorkerAgent": "agent.agent",
    "TrainConfig": "engine.config",
    "LocalRunConfig": "run.local",
    "run_local": "run.local",
    "SailorRuntimeError": "errors",
}
__all__ = ["__version__", *_FACE]


def __getattr__(name: str):
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module 'sailor_runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
