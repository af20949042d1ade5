"""Cloud GPU instance offers and inter-node fabrics (``data/instances.json``).

An ``Offer`` is what a provider rents: an instance type of ``gpus`` GPUs of one type, its
$/hour on demand (and spot) in some regions, and the fabric between such instances. Prices
(``prices.py``) and the default inter-node link of a GPU type on a provider (``fabric_for``)
both come from here, each with its source and date; a measured ``links.json`` overrides the
fabric in the simulator's network model.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UnknownNameError, ValidationError
from .readers import check_keys, read_data

Gbit = 1e9 / 8  # bytes/s in one Gbit/s


@dataclass(frozen=True)
class Fabric:
    """The network between instances of one type in one zone (per node, both directions)."""

    name: str
    kind: str
    """InfiniBand NDR/HDR, AWS EFA, GCP GPUDirect-TCPX/RDMA, cloud Ethernet, Slingshot."""
    bandwidth_per_node: float
    """Bytes/s per direction of all the node's NICs together."""
    latency_s: float
    source: str

    def bandwidth_per_gpu(self, gpus_per_node: int) -> float:
        """Bytes/s per direction a GPU gets when every GPU of the node sends at once."""
        return self.bandwidth_per_node / gpus_per_node


@dataclass(frozen=True)
class Offer:
    provider: str
    instance: str
    gpu_type: str
    gpus: int
    regions: tuple[str, ...]
    """Region names, or '*' for every region of the provider."""
    on_demand_usd_per_hour: float
    spot_usd_per_hour: float
    fabric: Fabric
    source: str
    date: str
    spot_source: str
    """'quoted' (the offer's own spot price) or how the spot price was derived."""
    note: str = ""
    url: str = ""
    """Where the price was read (a page or a dated price-list file)."""
    verified: bool = True
    """False where no published source was found: an estimate (the note says what was searched)."""

    def usd_per_gpu_hour(self, spot: bool = False) -> float:
        return (self.spot_usd_per_hour if spot else self.on_demand_usd_per_hour) / self.gpus


@dataclass(frozen=True)
class OtherPrice:
    """A GPU priced outside the three clouds (rental, or the original Sailor's figure)."""

    gpu_type: str
    usd_per_gpu_hour: float
    source: str
    date: str


def _fabric(name: str, entry: dict) -> Fabric:
    where = f"data/instances.json fabrics[{name!r}]"
    check_keys(entry, {"kind", "gbps_per_node", "latency_us", "source"}, set(), where)
    return Fabric(
        name, entry["kind"], entry["gbps_per_node"] * Gbit, entry["latency_us"] * 1e-6,
        entry["source"],
    )  # fmt: skip


_OFFER_KEYS = {
    "provider",
    "instance",
    "gpu_type",
    "gpus",
    "regions",
    "on_demand_usd_per_hour",
    "fabric",
    "source",
    "date",
}


def _load() -> tuple[dict[str, Fabric], list[Offer], dict[str, OtherPrice], dict]:
    from .gpus import get_gpu

    doc = read_data("instances.json", "sailor-instances/1")
    fabrics = {name: _fabric(name, e) for name, e in doc["fabrics"].items()}
    spot = doc["spot"]
    offers = []
    for i, e in enumerate(doc["offers"]):
        where = f"data/instances.json offers[{i}]"
        check_keys(e, _OFFER_KEYS, {"spot_usd_per_hour", "note", "url", "verified"}, where)
        if not isinstance(e.get("verified", True), bool):
            raise ValidationError(f"{where}: 'verified' must be true or false", field="verified")
        if e["fabric"] not in fabrics:
            raise UnknownNameError(f"{where}: unknown fabric {e['fabric']!r}", field="fabric")
        fraction = spot[e["provider"]]["fraction"]
        offers.append(
            Offer(
                e["provider"],
                e["instance"],
                get_gpu(e["gpu_type"]).name,
                int(e["gpus"]),
                tuple(e["regions"]),
                float(e["on_demand_usd_per_hour"]),
                float(e.get("spot_usd_per_hour", e["on_demand_usd_per_hour"] * fraction)),
                fabrics[e["fabric"]],
                e["source"],
                e["date"],
                "quoted" if "spot_usd_per_hour" in e else spot[e["provider"]]["source"],
                e.get("note", ""),
                e.get("url", ""),
                e.get("verified", True),
            )
        )
    other = {}
    for i, e in enumerate(doc["other"]):
        check_keys(
            e, {"gpu_type", "usd_per_gpu_hour", "source", "date"}, set(),
            f"data/instances.json other[{i}]",
        )  # fmt: skip
        name = get_gpu(e["gpu_type"]).name
        other[name] = OtherPrice(name, float(e["usd_per_gpu_hour"]), e["source"], e["date"])
    return fabrics, offers, other, spot


FABRICS, OFFERS, OTHER_PRICES, SPOT_FRACTIONS = _load()


def offers_for(gpu_type: str, provider: str | None = None) -> list[Offer]:
    from .gpus import get_gpu

    name = get_gpu(gpu_type).name
    return [o for o in OFFERS if o.gpu_type == name and provider in (None, o.provider)]


def offer_in(gpu_type: str, provider: str, region: str) -> Offer | None:
    """The offer of a GPU type in a provider's region (a region-specific one first)."""
    candidates = offers_for(gpu_type, provider)
    for offer in candidates:
        if region in offer.regions:
            return offer
    return next((o for o in candidates if "*" in o.regions), None)


def fabric_for(gpu_type: str, provider: str | None = None) -> Fabric | None:
    """The default inter-node fabric of a GPU type's instances (on ``provider`` if given, else
    the first offer); None when no offer lists one. GH-96 nodes: the CSCS Slingshot fabric."""
    from .gpus import get_gpu

    if get_gpu(gpu_type).name == "GH-96":
        return FABRICS["slingshot-4x200"]
    found = offers_for(gpu_type, provider)
    return found[0].fabric if found else None
