"""Sailor profiler: measure per-layer compute, memory and network bandwidth for sailor-sim."""

__version__ = "0.1.0"

# The package face beyond the names imported above, imported on first use.
_FACE = {
    "AdamW": "zoo.optim",
    "DeviceError": "errors",
    "TIED_EMBEDDING": "zoo.stage",
    "TIED_HEAD_NAME": "zoo.stage",
    "adamw_implementation": "zoo.optim",
    "adamw_one": "zoo.optim",
    "apply_update": "zoo.optim",
    "apply_execution": "zoo",
    "build_stage": "zoo",
    "catalog_gpu_type": "devices",
    "cpu_tp_limit": "devices",
    "enable_sequence_parallel": "zoo",
    "full_shape": "zoo",
    "get_split": "zoo",
    "grad_norm_sq": "zoo.optim",
    "grad_or_zero": "zoo.optim",
    "set_split": "zoo.tp",
    "sync_partial_grads": "zoo",
}
__all__ = ["__version__", *_FACE]


def __getattr__(name: str):
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module 'sailor_profiler' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)
