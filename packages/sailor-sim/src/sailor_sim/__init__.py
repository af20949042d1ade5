"""sailor-sim: the torch-free core of Sailor.

Model accounting (ModelSpec), GPU / zone / price catalogs, jobs, inventories and plans, and the
simulator that predicts iteration time, memory and cost of any heterogeneous plan.
"""

from . import inputs, specs
from .capacity import (
    CapacityEstimate,
    estimate,
    gpus_for_tokens,
    largest_microbatch,
    largest_sequence,
)
from .dtypes import DTYPES, dtype_bytes
from .errors import (
    PlanError,
    ProfileError,
    SailorError,
    SailorSimError,
    UnknownNameError,
    ValidationError,
)
from .gpus import GPU_CATALOG, GPUType, get_gpu, register_gpu
from .instances import Fabric, Offer, fabric_for, offer_in
from .job import GpuPool, Inventory, Job
from .model import MODEL_CATALOG, ModelSpec, get_model, read_hf_config, register_model
from .network import Endpoint, LinkCurve, NetworkModel
from .options import ExecutionOptions
from .original import SailorPlanRecord, read_sailor_plan
from .plan import Plan, Replica, Stage, even_split
from .prices import EGRESS_PER_GB, price_entry, price_per_gpu_hour, set_price
from .profile_files import load_profile_dir, save_profile_dir
from .profiles import LayerProfile, ProfileEntry, ProfileKey, ProfileStore
from .result import Estimate, ReplicaMemory
from .runspec import RunSpec
from .simulator import Simulator, StageTime
from .user_catalog import load_catalog
from .zones import ZONE_CATALOG, Zone, default_zone, get_zone, register_zone, relationship

__version__ = "0.1.0"

__all__ = [
    "CapacityEstimate",
    "estimate",
    "gpus_for_tokens",
    "largest_microbatch",
    "largest_sequence",
    "DTYPES",
    "Endpoint",
    "Fabric",
    "Offer",
    "default_zone",
    "fabric_for",
    "offer_in",
    "price_entry",
    "read_hf_config",
    "register_model",
    "Estimate",
    "ExecutionOptions",
    "LayerProfile",
    "LinkCurve",
    "NetworkModel",
    "ProfileEntry",
    "ProfileKey",
    "ProfileStore",
    "ReplicaMemory",
    "RunSpec",
    "inputs",
    "Simulator",
    "load_catalog",
    "specs",
    "StageTime",
    "load_profile_dir",
    "save_profile_dir",
    "EGRESS_PER_GB",
    "GPU_CATALOG",
    "MODEL_CATALOG",
    "ZONE_CATALOG",
    "GPUType",
    "GpuPool",
    "Inventory",
    "Job",
    "ModelSpec",
    "Plan",
    "PlanError",
    "ProfileError",
    "Replica",
    "SailorPlanRecord",
    "SailorError",
    "SailorSimError",
    "Stage",
    "UnknownNameError",
    "ValidationError",
    "Zone",
    "dtype_bytes",
    "even_split",
    "get_gpu",
    "get_model",
    "get_zone",
    "price_per_gpu_hour",
    "read_sailor_plan",
    "register_gpu",
    "register_zone",
    "relationship",
    "set_price",
    "__version__",
]

# The package face beyond the names imported above, imported on first use.
_FACE = {
    "cost_by_provider": "metrics",
    "provenance": "metrics",
    "throughput": "metrics",
    "ContextParallel": "cli_options",
    "ExpertParallel": "cli_options",
    "Flash": "cli_options",
    "Fp8": "cli_options",
    "GRAD_BYTES": "memory",
    "GradDtype": "cli_options",
    "LRSchedule": "recipe",
    "OPTIMIZERS": "job",
    "OptimConfig": "recipe",
    "PRICE_CATALOG": "prices",
    "Recipe": "recipe",
    "Recompute": "cli_options",
    "SequenceParallel": "cli_options",
    "VirtualStages": "cli_options",
    "Zero": "cli_options",
    "options_from_proto": "job",
    "activation_factor": "options",
    "catalog_model": "model",
    "catalog_option": "cli_output",
    "check_dtype": "dtypes",
    "check_options_on": "options",
    "check_replica": "options",
    "execution_options": "cli_options",
    "exposed_tail": "timing",
    "framework_overhead": "memory",
    "in_flight": "memory",
    "link_to_dict": "network",
    "load_network_file": "network",
    "load_sailor_network": "original",
    "load_sailor_profiles": "original",
    "model_flops_per_token": "metrics",
    "peak_bytes": "memory",
    "pipeline_time": "timing",
    "plan_peak_flops": "metrics",
    "position_terms": "memory",
    "read_profile_file": "profile_files",
    "recompute_transient": "options",
    "resolve_cluster": "cluster",
    "run_app": "inputs",
    "sharding": "memory",
    "static_bytes": "memory",
    "transient_bytes": "memory",
    "usd_per_second": "prices",
    "uses_flash": "options",
    "version_option": "cli_output",
}
__all__ += list(_FACE)


def __getattr__(name: str):
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module 'sailor_sim' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)
