"""On-demand $/GPU-hour per GPU type, by region where known, and egress $/GB by relationship."""

from __future__ import annotations

from .errors import UnknownNameError
from .gpus import get_gpu
from .zones import CROSS_CONTINENT, CROSS_REGION, SAME_REGION, SAME_ZONE, get_zone

_SAILOR = "original Sailor evaluation prices (GCP on-demand incl. VM share)"
_GCP = "GCP on-demand list price per GPU incl. VM share, us-central1, 2025"
_RENTAL = "community-cloud rental, approximate"

# gpu type -> region ('*' = any region) -> (price $/GPU-hour, source)
PRICE_CATALOG: dict[str, dict[str, tuple[float, str]]] = {
    "A100-40": {"*": (3.673, _SAILOR)},
    "V100-16": {"*": (2.86, _SAILOR)},
    "GH-96": {"*": (11.06, _SAILOR)},
    "H100-80": {"*": (11.06, _GCP)},
    "H200": {"*": (10.85, _GCP)},
    "A100-80": {"*": (5.07, _GCP)},
    "L4": {"*": (0.71, _GCP)},
    "T4": {"*": (0.55, _GCP)},
    "RTX-3090": {"*": (0.22, _RENTAL)},
    "RTX-2080": {"*": (0.12, _RENTAL)},
    "Titan-RTX": {"*": (0.20, _RENTAL)},
    "CPU": {"*": (0.05, "2 vCPU on-demand, approximate")},
    "cpu-1t": {"*": (0.025, "1 vCPU on-demand, approximate (half of CPU's 2 vCPU)")},
    "cpu-2t": {"*": (0.05, "2 vCPU on-demand, approximate")},
}

# Egress $/GB between zones: original Sailor gcp/communication_cost.json (0 / 0.01 / 0.02);
# cross-continent from the Sailor authors' seed figures (0.05).
EGRESS_PER_GB: dict[str, float] = {
    SAME_ZONE: 0.0,
    SAME_REGION: 0.01,
    CROSS_REGION: 0.02,
    CROSS_CONTINENT: 0.05,
}


def price_per_gpu_hour(gpu_type: str, zone: str) -> float:
    """$/GPU-hour of a GPU type in a zone; raises if no price is known."""
    gpu = get_gpu(gpu_type)
    region = get_zone(zone).region
    by_region = PRICE_CATALOG.get(gpu.name, {})
    entry = by_region.get(region) or by_region.get("*")
    if entry is None:
        raise UnknownNameError(
            f"no price for {gpu.name} in {zone}; add one with set_price()", field="gpu_type"
        )
    return entry[0]


def usd_per_second(gpu_type: str, zone: str, gpus: int = 1) -> float:
    """$/s of ``gpus`` GPUs of a type in a zone (what a replica of TP ``gpus`` bills)."""
    return gpus * price_per_gpu_hour(gpu_type, zone) / 3600.0


def set_price(gpu_type: str, price: float, region: str = "*", source: str = "user") -> None:
    PRICE_CATALOG.setdefault(get_gpu(gpu_type).name, {})[region] = (float(price), source)
