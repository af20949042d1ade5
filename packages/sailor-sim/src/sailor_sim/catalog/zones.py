"""Zones, regions, continents and providers, and how two zones relate on the network.

The catalog (``data/regions.json``) lists each provider's regions with their continent and zone
names (GCP '<region>-<letter>', AWS '<region><letter>', Azure '<region>-<n>'); ``register_zone``
adds one of a cluster's own. 'local' is this machine. Zones of different providers are never in
the same region, so they relate as cross-region or cross-continent.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import revision
from ..errors import UnknownNameError
from .readers import read_data


@dataclass(frozen=True)
class Zone:
    name: str
    region: str
    continent: str
    provider: str = "gcp"
    """'gcp', 'aws', 'azure', 'local' or a cluster's own name."""


SAME_ZONE, SAME_REGION, CROSS_REGION, CROSS_CONTINENT = (
    "same-zone",
    "same-region",
    "cross-region",
    "cross-continent",
)
RELATIONSHIPS = (SAME_ZONE, SAME_REGION, CROSS_REGION, CROSS_CONTINENT)

ZONE_CATALOG: dict[str, Zone] = {}
REGION_PROVIDER: dict[str, str] = {}
"""Region name -> provider (region names do not collide across providers)."""
DEFAULT_REGIONS: dict[str, str] = {}
"""Provider -> the region a provider-only request means (e.g. aws -> us-east-1)."""


def _load_catalog() -> None:
    doc = read_data("regions.json", "sailor-regions/1")
    DEFAULT_REGIONS.update(doc["default_regions"])
    for provider, regions in doc["providers"].items():
        for region, (continent, *zones) in regions.items():
            REGION_PROVIDER[region] = provider
            for zone in zones:
                ZONE_CATALOG[zone] = Zone(zone, region, continent, provider)
    ZONE_CATALOG["local"] = Zone("local", "local", "local", "local")
    REGION_PROVIDER["local"] = "local"


_load_catalog()


def get_zone(name: str) -> Zone:
    if not isinstance(name, str):
        raise UnknownNameError(f"must be a zone name, got {name!r:.60}", field="zone")
    try:
        return ZONE_CATALOG[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown zone {name!r}; use a zone like 'us-central1-a' (GCP), 'us-east-1a' (AWS) "
            f"or 'eastus-1' (Azure) (regions: {', '.join(REGION_PROVIDER)}) or 'local', or "
            "register it",
            field="zone",
        ) from None


def register_zone(name: str, region: str, continent: str, provider: str = "gcp") -> Zone:
    zone = Zone(name, region, continent, provider)
    ZONE_CATALOG[name] = zone
    REGION_PROVIDER.setdefault(region, provider)
    revision.bump()  # a live Simulator drops links and prices it cached for the old zone
    return zone


def providers() -> list[str]:
    return list(DEFAULT_REGIONS)


def default_zone(provider: str | None = None, region: str | None = None) -> str:
    """The first zone of ``region`` (or of the provider's default region)."""
    if region is None:
        if provider not in DEFAULT_REGIONS:
            raise UnknownNameError(
                f"unknown provider {provider!r}; use one of {', '.join(DEFAULT_REGIONS)}",
                field="provider",
            )
        region = DEFAULT_REGIONS[provider]
    if provider is not None and REGION_PROVIDER.get(region) not in (provider, None):
        raise UnknownNameError(
            f"region {region!r} belongs to {REGION_PROVIDER[region]}, not {provider}",
            field="region",
        )
    for zone in ZONE_CATALOG.values():
        if zone.region == region:
            return zone.name
    raise UnknownNameError(
        f"unknown region {region!r}; known regions: {', '.join(REGION_PROVIDER)}",
        field="region",
    )


def relationship(zone_a: str, zone_b: str) -> str:
    """How two zones relate: same-zone, same-region, cross-region or cross-continent."""
    a, b = get_zone(zone_a), get_zone(zone_b)
    if a.name == b.name:
        return SAME_ZONE
    if a.region == b.region:
        return SAME_REGION
    return CROSS_REGION if a.continent == b.continent else CROSS_CONTINENT
