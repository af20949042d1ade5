"""Zones, regions and continents, and how two zones relate on the network.

Zone names follow the clouds' convention '<region>-<letter>' (GCP). The catalog lists the
zones Sailor knows; ``register_zone`` adds one of a cluster's own. 'local' is this machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import UnknownNameError


@dataclass(frozen=True)
class Zone:
    name: str
    region: str
    continent: str


SAME_ZONE, SAME_REGION, CROSS_REGION, CROSS_CONTINENT = (
    "same-zone",
    "same-region",
    "cross-region",
    "cross-continent",
)
RELATIONSHIPS = (SAME_ZONE, SAME_REGION, CROSS_REGION, CROSS_CONTINENT)

_REGIONS: dict[str, tuple[str, str]] = {
    # region: (continent, zone letters)
    "us-central1": ("north-america", "abcf"),
    "us-east1": ("north-america", "bcd"),
    "us-east4": ("north-america", "abc"),
    "us-east5": ("north-america", "abc"),
    "us-west1": ("north-america", "abc"),
    "us-west4": ("north-america", "abc"),
    "us-south1": ("north-america", "abc"),
    "europe-west1": ("europe", "bcd"),
    "europe-west4": ("europe", "abc"),
    "europe-west3": ("europe", "abc"),
    "asia-east1": ("asia", "abc"),
    "asia-northeast1": ("asia", "abc"),
    "asia-southeast1": ("asia", "abc"),
}

ZONE_CATALOG: dict[str, Zone] = {
    f"{region}-{letter}": Zone(f"{region}-{letter}", region, continent)
    for region, (continent, letters) in _REGIONS.items()
    for letter in letters
}
ZONE_CATALOG["local"] = Zone("local", "local", "local")


def get_zone(name: str) -> Zone:
    try:
        return ZONE_CATALOG[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown zone {name!r}; use a zone like 'us-central1-a' (regions: "
            f"{', '.join(_REGIONS)}) or 'local', or register it",
            field="zone",
        ) from None


def register_zone(name: str, region: str, continent: str) -> Zone:
    zone = Zone(name, region, continent)
    ZONE_CATALOG[name] = zone
    return zone


def relationship(zone_a: str, zone_b: str) -> str:
    """How two zones relate: same-zone, same-region, cross-region or cross-continent."""
    a, b = get_zone(zone_a), get_zone(zone_b)
    if a.name == b.name:
        return SAME_ZONE
    if a.region == b.region:
        return SAME_REGION
    return CROSS_REGION if a.continent == b.continent else CROSS_CONTINENT
