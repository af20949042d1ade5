"""$/GPU-hour per GPU type by provider and region (on demand and spot), and egress $/GB.

Built from the instance offers in ``data/instances.json`` (each with its source and date):
``PRICE_CATALOG[gpu][region] = ($/GPU-hour, source)`` for every region of every provider that
offers the GPU, plus ``'*'``, the price in zones outside the three clouds ('local', a cluster's
own): GCP's where GCP offers the GPU (the original Sailor prices), else the first offer or the
'other' (rental) price. A zone of a cloud provider that does not offer the GPU has no price
(``PriceUnavailableError`` naming the providers that do) unless an 'other' price or ``set_price``
gives one. 'Other' prices are on demand only: rentals quote no spot price.

A GPU type whose only price is the catch-all (``outside_only``: an 'other' rental price, or a
user's ``set_price(region='*')``) is priced in cloud zones by that catch-all, so a plan placed
there still has a cost; the per-provider comparison (``metrics.cost_by_provider``) asks with
``catch_all=False`` instead, so such a price is not shown as if every cloud offered it.
"""

from __future__ import annotations

from .. import revision
from ..errors import PriceUnavailableError, UnknownNameError
from ..inputs import positive_number
from .gpus import get_gpu
from .instances import OFFERS, OTHER_PRICES, offers_for
from .zones import (
    CROSS_CONTINENT,
    CROSS_REGION,
    DEFAULT_REGIONS,
    REGION_PROVIDER,
    SAME_REGION,
    SAME_ZONE,
    ZONE_CATALOG,
    get_zone,
)

PriceTable = dict[str, dict[str, tuple[float, str]]]


def _build(spot: bool) -> PriceTable:
    table: PriceTable = {}
    for offer in OFFERS:
        regions = offer.regions
        if "*" in regions:
            regions = tuple(r for r, p in REGION_PROVIDER.items() if p == offer.provider)
        source = f"{offer.provider} {offer.instance}: {offer.source}, {offer.date}"
        if spot:
            source += f"; spot: {offer.spot_source}"
        price = offer.usd_per_gpu_hour(spot)
        by_region = table.setdefault(offer.gpu_type, {})
        for region in regions:
            by_region.setdefault(region, (price, source))
        if "*" not in by_region or offer.provider == "gcp":
            by_region["*"] = (price, source)
    if spot:
        return table  # 'other' prices are rentals on demand: no spot quote
    for other in OTHER_PRICES.values():
        table.setdefault(other.gpu_type, {}).setdefault(
            "*", (other.usd_per_gpu_hour, f"{other.source}, {other.date}")
        )
    return table


# gpu type -> region ('*' = zones outside the clouds) -> (price $/GPU-hour, source)
PRICE_CATALOG: PriceTable = _build(spot=False)
SPOT_PRICE_CATALOG: PriceTable = _build(spot=True)

# Egress $/GB between zones: original Sailor gcp/communication_cost.json (0 / 0.01 / 0.02);
# cross-continent from the Sailor authors' seed figures (0.05).
EGRESS_PER_GB: dict[str, float] = {
    SAME_ZONE: 0.0,
    SAME_REGION: 0.01,
    CROSS_REGION: 0.02,
    CROSS_CONTINENT: 0.05,
}


def price_entry(
    gpu_type: str, zone: str, spot: bool = False, *, catch_all: bool = True
) -> tuple[float, str]:
    """($/GPU-hour, source) of a GPU type in a zone; raises if no price is known. With
    ``catch_all=False`` a cloud zone takes only its provider's own price (an offer, or a price
    set for its region), never a GPU's catch-all one (``outside_only``)."""
    gpu = get_gpu(gpu_type)
    z = get_zone(zone)
    by_region = (SPOT_PRICE_CATALOG if spot else PRICE_CATALOG).get(gpu.name, {})
    entry = by_region.get(z.region)
    outside = z.provider not in DEFAULT_REGIONS
    if entry is None and (outside or (catch_all and outside_only(gpu.name, spot))):
        entry = by_region.get("*")
    if entry is None:
        sellers = sorted({o.provider for o in offers_for(gpu.name)})
        where = f"on {', '.join(sellers)}" if sellers else "nowhere in the catalog"
        place = "place it in a zone of one of those, or " if sellers else ""
        raise PriceUnavailableError(
            f"no price for {gpu.name} in {zone} ({z.provider}); it is offered {where}; {place}"
            "give a price with set_price() (sailor-sim --catalog FILE)",
            gpu_type=gpu.name,
            zone=z.name,
            provider=z.provider,
            offered_on=sellers,
        )
    return entry


def prices_set() -> list[tuple[str, str, float, str, bool]]:
    """(GPU type, region ('*': every region without its own), $/GPU-hour, source, spot) of
    each price ``set_price`` (``--catalog``) put in place of the built-in catalog's or beside
    it: the live tables' entries that the data files do not give."""
    out = []
    for spot, table in ((False, PRICE_CATALOG), (True, SPOT_PRICE_CATALOG)):
        built = _build(spot)
        for gpu, by_region in table.items():
            for region, (price, source) in by_region.items():
                if built.get(gpu, {}).get(region) != (price, source):
                    out.append((gpu, region, price, source, spot))
    return out


def outside_only(gpu_type: str, spot: bool = False) -> bool:
    """Whether a GPU type's only price is the catch-all '*' one: an 'other' (rental) price, or
    one a user set with ``set_price(region='*')`` (``--catalog``), not a cloud's offer."""
    by_region = (SPOT_PRICE_CATALOG if spot else PRICE_CATALOG).get(get_gpu(gpu_type).name, {})
    return set(by_region) == {"*"}


def price_per_gpu_hour(gpu_type: str, zone: str, spot: bool = False) -> float:
    """$/GPU-hour of a GPU type in a zone; raises if no price is known."""
    return price_entry(gpu_type, zone, spot)[0]


def zones_offering(gpu_types, spot: bool = False) -> list[str]:
    """Sorted catalog zones where every one of ``gpu_types`` has a price (for building
    inventories that the cost model can score)."""

    def priced(zone: str) -> bool:
        try:
            return all(price_entry(g, zone, spot)[0] > 0 for g in gpu_types)
        except (UnknownNameError, PriceUnavailableError):
            return False

    return sorted(z for z in ZONE_CATALOG if priced(z))


def usd_per_second(gpu_type: str, zone: str, gpus: int = 1) -> float:
    """$/s of ``gpus`` GPUs of a type in a zone (what a replica of TP ``gpus`` bills)."""
    return gpus * price_per_gpu_hour(gpu_type, zone) / 3600.0


def set_price(
    gpu_type: str, price: float, region: str = "*", source: str = "user", spot: bool = False
) -> None:
    """Set the $/GPU-hour of a GPU type in a region ('*': every region without its own price,
    and zones outside the clouds)."""
    price = positive_number(price, "price", allow_zero=True)  # -1, NaN, "2" were stored
    regions = {z.region for z in ZONE_CATALOG.values()}
    if region != "*" and region not in regions:
        raise UnknownNameError(
            f"unknown region {region!r}; use '*' (every region) or one of "
            f"{', '.join(sorted(regions))} (register_zone adds one)",
            field="region",
        )
    table = SPOT_PRICE_CATALOG if spot else PRICE_CATALOG
    by_region = table.setdefault(get_gpu(gpu_type).name, {})
    if region == "*":  # a catch-all set by hand replaces the catalog's per-region prices
        by_region.clear()
    by_region[region] = (float(price), source)
    revision.bump()  # a live Simulator drops the prices it cached
