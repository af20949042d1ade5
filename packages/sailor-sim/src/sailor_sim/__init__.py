"""sailor-sim: the torch-free core of Sailor.

Model accounting (ModelSpec), GPU / zone / price catalogs, jobs, inventories and plans, and the
simulator that predicts iteration time, memory and cost of any heterogeneous plan.
"""

from . import inputs
from .capacity import (
    CapacityEstimate,
    default_dtype,
    estimate,
    gpus_for_tokens,
    largest_microbatch,
    largest_sequence,
    make_job,
)
from .catalog.gpus import GPU_CATALOG, GPUType, get_gpu, register_gpu
from .catalog.instances import Fabric, Offer, fabric_for, offer_in
from .catalog.prices import EGRESS_PER_GB, price_entry, price_per_gpu_hour, set_price
from .catalog.user import load_catalog
from .catalog.zones import ZONE_CATALOG, Zone, default_zone, get_zone, register_zone, relationship
from .dtypes import DTYPES, dtype_bytes
from .errors import (
    PlanError,
    PriceUnavailableError,
    ProfileError,
    SailorError,
    SailorSimError,
    UnknownNameError,
    ValidationError,
)
from .model.spec import MODEL_CATALOG, ModelSpec, get_model, read_hf_config, register_model
from .original import SailorPlanRecord, read_sailor_plan
from .profiles.files import load_profile_dir, save_profile_dir
from .profiles.store import LayerProfile, ProfileEntry, ProfileKey, ProfileStore
from .simulate.network import Endpoint, LinkCurve, NetworkModel
from .simulate.result import Estimate, ReplicaMemory
from .simulate.simulator import Simulator, StageTime
from .spec import derive as specs
from .spec.job import MAX_POOL_GPUS, GpuPool, Inventory, Job
from .spec.options import ExecutionOptions
from .spec.plan import Plan, Replica, Stage, StageSlice, even_split
from .spec.run import RunSpec

__version__ = "0.1.0"

__all__ = [
    "CapacityEstimate",
    "default_dtype",
    "estimate",
    "gpus_for_tokens",
    "largest_microbatch",
    "largest_sequence",
    "make_job",
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
    "MAX_POOL_GPUS",
    "Job",
    "ModelSpec",
    "Plan",
    "PlanError",
    "PriceUnavailableError",
    "ProfileError",
    "Replica",
    "StageSlice",
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
    "FabricFlag": "cli.options",
    "cost_by_provider": "simulate.metrics",
    "provenance": "simulate.metrics",
    "throughput": "simulate.metrics",
    "GRAD_BYTES": "simulate.memory",
    "ZERO_PER_MICROBATCH": "spec.options",
    "LRSchedule": "spec.recipe",
    "OPTIMIZERS": "spec.job",
    "OptimConfig": "spec.recipe",
    "PRICE_CATALOG": "catalog.prices",
    "Recipe": "spec.recipe",
    "RopeScaling": "model.rope",
    "TRAINING_FIELDS": "spec.run",
    "options_from_proto": "spec.job",
    "activation_factor": "spec.options",
    "catalog_model": "model.spec",
    "rotary_frequencies": "model.rope",
    "catalog_option": "cli.output",
    "check_dtype": "dtypes",
    "check_options_on": "spec.options",
    "check_replica": "spec.options",
    "check_interleave": "spec.interleave",
    "chunk_layers": "spec.interleave",
    "interleave_problem": "spec.interleave",
    "microbatch_step": "spec.interleave",
    "stage_problem": "spec.interleave",
    "count_tied_ends": "simulate.compose",
    "exposed_tail": "simulate.timing",
    "framework_overhead": "simulate.memory",
    "gathered_weight_bytes": "simulate.memory",
    "held_layer_params": "model.moe",
    "in_flight": "simulate.memory",
    "link_to_dict": "simulate.network",
    "load_network_file": "simulate.network",
    "load_sailor_network": "original",
    "load_sailor_profiles": "original",
    "model_flops_per_token": "simulate.metrics",
    "peak_bytes": "simulate.memory",
    "pipeline_time": "simulate.timing",
    "plan_peak_flops": "simulate.metrics",
    "position_terms": "simulate.memory",
    "read_profile_file": "profiles.files",
    "empty_folder_warning": "profiles.files",
    "recompute_transient": "spec.options",
    "resolve_cluster": "catalog.cluster",
    "run_app": "inputs",
    "sharding": "simulate.memory",
    "sharding_problem": "simulate.features.sharding",
    "hybrid_group": "simulate.features.sharding",
    "hybrid_divides": "simulate.features.sharding",
    "static_bytes": "simulate.memory",
    "transient_bytes": "simulate.memory",
    "usd_per_second": "catalog.prices",
    "uses_flash": "spec.options",
    "version_option": "cli.output",
}
__all__ += list(_FACE)


def __getattr__(name: str):
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module 'sailor_sim' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)
