"""Network links between (zone, GPU type, GPU count) endpoints.

A ``LinkCurve`` gives bandwidth as a function of message size plus a latency. Measured curves
come as Sailor's fits (GB/s = c0*x^2 + c1*x + c2 with x = log2(bytes / 1e6), fitted on
64 KB-1 GB) or as measured (bytes, bytes/s) points from sailor-profiler. Both are evaluated only
inside their measured size range (message sizes outside it are clamped to its ends, never
extrapolated), then bounded to [MIN_FRACTION * max, max], so a curve never goes to zero or below.

``count`` is the number of concurrent sender/receiver GPU pairs (e.g. the TP degree of a replica
that sends its shards in parallel); defaults scale per-pair bandwidth linearly with it.

Lookup order for a link: a measured curve for exactly these endpoints; the measured curve for
the nearest GPU count of these endpoints, scaled by the count ratio; for same-zone links the
homogeneous fit of the GPU type; for same-zone links the inter-node fabric of the GPU type's
instances (``same_zone_fabric``: InfiniBand, EFA, GPUDirect-TCPX, cloud Ethernet; sourced in
data/instances.json); otherwise the default by zone relationship (``DEFAULT_LINKS``, seed
figures of the Sailor authors). Intra-node links (TP groups, p2p inside a node) use a
measured intra-node curve or ``GPUType.intra_node_bandwidth``.

File format (``links.json`` in a profile folder, written by sailor-profiler)::

    {"format": "sailor-network/1",
     "links": [{"src": {"zone": "us-central1-a", "gpu_type": "A100-40", "count": 1},
                "dst": {...}, "points": [[65536, 1.2e9], ...] | "coeffs_gbps": [c0, c1, c2],
                "max_bandwidth": 2.4e9, "latency_s": 5e-5, "source": "measured",
                "ring_bus_bandwidth": 1.1e9, "ring_hop_latency_s": 8e-5}],
     "intra_node": [{"gpu_type": "A100-40", "count": 2, "points": [...], ...}]}
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import inputs
from ..catalog.gpus import get_gpu
from ..catalog.prices import EGRESS_PER_GB
from ..catalog.zones import CROSS_CONTINENT, CROSS_REGION, SAME_REGION, SAME_ZONE, relationship
from ..errors import ProfileError

MIN_FRACTION = 0.02
"""Lower bound of any curve, as a fraction of its maximum (guards fits that dip at the ends)."""
FIT_RANGE_BYTES = (64e3, 1e9)
"""Message sizes the original Sailor fits were measured on."""
INTRA_NODE_LATENCY_S = 10e-6
"""NVLink / PCIe latency of one NCCL send-recv inside a node (NCCL tests, ~5-15 us)."""
_SEED = "seed figures of the Sailor authors (per link, GCP)"


@dataclass(frozen=True)
class Endpoint:
    zone: str
    gpu_type: str
    count: int = 1


@dataclass(frozen=True)
class LinkCurve:
    max_bandwidth: float
    """Bytes/s at large messages (upper bound of the curve)."""
    latency_s: float
    source: str
    coeffs_gbps: tuple[float, float, float] | None = None
    points: tuple[tuple[float, float], ...] | None = None
    """Measured (message bytes, bytes/s), sorted by size."""
    scale: float = 1.0
    ring_bus_bandwidth: float | None = None
    """Measured ring all-reduce over this link (sailor-profiler network): bus bandwidth in
    bytes/s (NCCL tests' definition, 2 (n - 1) / n * m / t) ..."""
    ring_hop_latency_s: float | None = None
    """... and latency per ring step. None: the ring is derived from the p2p curve at the
    fabric's bus efficiency (``bus_efficiency``, else the GPU types' default fabric's,
    ``comm``) and the p2p latency."""
    bus_efficiency: float | None = None
    """Ring bus bandwidth / p2p bandwidth of this link's fabric (``comm.BUS_EFFICIENCY``);
    None: not known from the link (measured p2p curves, seed defaults)."""

    def ring_bandwidth(self, chunk_bytes: float, default_efficiency: float) -> float:
        """Bus bytes/s of a ring all-reduce whose steps move ``chunk_bytes``."""
        if self.ring_bus_bandwidth is not None:
            return self.ring_bus_bandwidth * self.scale
        efficiency = default_efficiency if self.bus_efficiency is None else self.bus_efficiency
        return self.bandwidth(chunk_bytes) * efficiency

    @property
    def ring_latency_s(self) -> float:
        """Seconds per ring step on top of its bytes."""
        return self.latency_s if self.ring_hop_latency_s is None else self.ring_hop_latency_s

    def bandwidth(self, nbytes: float) -> float:
        """Bytes/s for one message of ``nbytes``."""
        if self.coeffs_gbps is not None:
            lo, hi = FIT_RANGE_BYTES
            x = math.log2(min(max(nbytes, lo), hi) / 1e6)
            c0, c1, c2 = self.coeffs_gbps
            bw = (c0 * x * x + c1 * x + c2) * 1e9
        elif self.points:
            bw = _interp_log(self.points, nbytes)
        else:
            bw = self.max_bandwidth
        bw = min(max(bw, MIN_FRACTION * self.max_bandwidth), self.max_bandwidth)
        return bw * self.scale

    def time(self, nbytes: float) -> float:
        """Seconds to move one message: latency + size / bandwidth(size)."""
        if nbytes <= 0:
            return 0.0
        return self.latency_s + nbytes / self.bandwidth(nbytes)


def _interp_log(points, nbytes: float) -> float:
    if nbytes <= points[0][0]:
        return points[0][1]
    if nbytes >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x0 <= nbytes <= x1:
            w = math.log2(nbytes / x0) / math.log2(x1 / x0)
            return y0 + (y1 - y0) * w
    return points[-1][1]


# relationship -> (bytes/s per GPU pair, latency s, source)
DEFAULT_LINKS: dict[str, tuple[float, float, str]] = {
    SAME_ZONE: (1.45e9, 0.5e-3, _SEED),
    SAME_REGION: (1.42e9, 0.9e-3, _SEED),
    CROSS_REGION: (0.63e9, 31e-3, _SEED),
    CROSS_CONTINENT: (0.18e9, 102e-3, _SEED),
}
DEFAULT_INTER_NODE_LATENCY_S = 20e-6
"""Latency of a measured same-zone curve (RDMA fabrics, NCCL tests: ~10-30 us)."""


class NetworkModel:
    """Link curves between endpoints; measured where given, defaults otherwise."""

    def __init__(self) -> None:
        self.links: dict[tuple[Endpoint, Endpoint], LinkCurve] = {}
        self.homogeneous: dict[tuple[str, int], LinkCurve] = {}
        """Same-zone inter-node fits per (GPU type, count), e.g. Sailor's network_coeffs."""
        self.intra: dict[tuple[str, int], LinkCurve] = {}
        self._cache: dict[tuple, LinkCurve] = {}
        self._by_pair: dict[tuple, list[tuple[int, LinkCurve]]] | None = None
        """``links`` by (zone, GPU type) of both ends: (count, curve) each (built on use)."""
        self.cluster = None
        """A ``cluster.Cluster`` (``--fabric``): the fabric between nodes of one zone, instead
        of the catalog default of the GPU type's instances; set with ``set_cluster``."""
        self.version = 0
        """Bumped on every change (the simulator drops its cached numbers then)."""

    def add_link(self, src: Endpoint, dst: Endpoint, curve: LinkCurve) -> None:
        self.links[(src, dst)] = curve
        self._by_pair = None
        self._cache.clear()
        self.version += 1

    def add_homogeneous(self, gpu_type: str, count: int, curve: LinkCurve) -> None:
        self.homogeneous[(gpu_type, count)] = curve
        self._cache.clear()
        self.version += 1

    def add_intra_node(self, gpu_type: str, count: int, curve: LinkCurve) -> None:
        self.intra[(gpu_type, count)] = curve
        self._cache.clear()
        self.version += 1

    def set_cluster(self, cluster) -> None:
        self.cluster = cluster
        self._cache.clear()
        self.version += 1

    def gpus_per_node(self, gpu) -> int:
        """GPUs of ``gpu`` one node holds: the catalog's, or fewer where the cluster given
        (``--fabric``) says its nodes are smaller (4 A100 per node on many HPC systems)."""
        if self.cluster is None or self.cluster.gpus_per_node is None:
            return gpu.gpus_per_node
        return max(1, min(gpu.gpus_per_node, self.cluster.gpus_per_node))

    def gpus_per_nvlink_domain(self, gpu) -> int:
        """GPUs of ``gpu`` one NVLink / PCIe domain joins: the node, or the cluster's domain."""
        if self.cluster is None or self.cluster.nvlink_domain is None:
            return gpu.gpus_per_node
        return max(1, min(gpu.gpus_per_node, self.cluster.nvlink_domain))

    def forget_resolved(self) -> None:
        """Drop resolved curves (defaults read GPU specs and zones): a catalog changed."""
        self._cache.clear()

    # ---- lookup ----------------------------------------------------------------------------
    def link(self, src: Endpoint, dst: Endpoint) -> LinkCurve:
        """The curve between two endpoints on different nodes (cached)."""
        key = (src, dst)
        curve = self._cache.get(key)
        if curve is None:
            curve = self._cache[key] = self._resolve(src, dst)
        return curve

    def _resolve(self, src: Endpoint, dst: Endpoint) -> LinkCurve:
        exact = self.links.get((src, dst))
        if exact is not None:
            return exact
        count = src.count
        pair = (src.zone, src.gpu_type, dst.zone, dst.gpu_type)
        near = [(abs(math.log2(n / count)), n, c) for n, c in self._measured(pair)]
        rel = relationship(src.zone, dst.zone)
        if not near and rel == SAME_ZONE and src.gpu_type == dst.gpu_type:
            near = [
                (abs(math.log2(c / count)), c, curve)
                for (g, c), curve in self.homogeneous.items()
                if g == src.gpu_type
            ]
        if near:
            _, measured_count, curve = min(near, key=lambda t: (t[0], t[1]))
            if measured_count == count:
                return curve
            return _scaled(curve, count / measured_count, f"count-scaled from {measured_count}")
        if rel == SAME_ZONE and self.cluster is not None:
            c = self.cluster
            return LinkCurve(
                c.bandwidth_per_gpu(get_gpu(src.gpu_type).gpus_per_node) * count,
                c.latency_s, c.describe(),
                bus_efficiency=c.bus_efficiency,
            )  # fmt: skip
        if rel == SAME_ZONE:
            fabric = same_zone_fabric(src, dst)
            if fabric is not None:
                return fabric
        bw, latency, source = DEFAULT_LINKS[rel]
        return LinkCurve(bw * count, latency, f"default {rel}: {source}")

    def _measured(self, pair: tuple) -> list[tuple[int, LinkCurve]]:
        """(source count, curve) of every measured link between the (zone, GPU type) ends of
        ``pair``, from an index of ``links`` (a scan of all of them per lookup was slow)."""
        if self._by_pair is None:
            index: dict[tuple, list[tuple[int, LinkCurve]]] = {}
            for (s, d), c in self.links.items():
                index.setdefault((s.zone, s.gpu_type, d.zone, d.gpu_type), []).append((s.count, c))
            self._by_pair = index
        return self._by_pair.get(pair, [])

    def intra_node(self, gpu_type: str, count: int) -> LinkCurve:
        """Curve between GPUs of one node; ``count`` = GPUs taking part (e.g. the TP degree)."""
        key = ("intra", gpu_type, count)
        curve = self._cache.get(key)
        if curve is None:
            curve = self.intra.get((gpu_type, count))
            if curve is None:
                others = [
                    (abs(math.log2(c / max(count, 1))), c) for g, c in self.intra if g == gpu_type
                ]
                if others:
                    curve = self.intra[(gpu_type, min(others)[1])]
                else:
                    gpu = get_gpu(gpu_type)
                    curve = LinkCurve(
                        gpu.intra_node_bandwidth, INTRA_NODE_LATENCY_S, f"GPUType {gpu.source}"
                    )
            self._cache[key] = curve
        return curve

    def transfer_time(self, src: Endpoint, dst: Endpoint, nbytes: float) -> float:
        return self.link(src, dst).time(nbytes)

    @staticmethod
    def egress_per_gb(zone_a: str, zone_b: str) -> float:
        return EGRESS_PER_GB[relationship(zone_a, zone_b)]


def same_zone_fabric(src: Endpoint, dst: Endpoint) -> LinkCurve | None:
    """The default link between nodes of one zone: the inter-node fabric of their instances
    (``instances.fabric_for``: InfiniBand, EFA, GPUDirect-TCPX, cloud Ethernet, with its
    source), per GPU pair = the node's bandwidth / its GPUs (every GPU of a node sends at once
    in a ring or a pipeline step), times ``count`` pairs. Nodes of two GPU types meet over
    the slower of their fabrics. None where no offer lists a fabric (CPU workers, custom GPU
    types): the seed defaults then."""
    from ..catalog.instances import fabric_for
    from ..catalog.zones import get_zone

    provider = get_zone(src.zone).provider
    from .comm import bus_efficiency

    per_gpu, latency, names, kinds = [], 0.0, [], []
    for end in (src, dst):
        fabric = fabric_for(end.gpu_type, provider)
        if fabric is None:
            return None
        per_gpu.append(fabric.bandwidth_per_gpu(get_gpu(end.gpu_type).gpus_per_node))
        latency = max(latency, fabric.latency_s)
        names.append(fabric.name)
        kinds.append(fabric.kind)
    label = " / ".join(dict.fromkeys(names))
    efficiency = min(bus_efficiency(k).value for k in kinds)
    return LinkCurve(
        min(per_gpu) * src.count, latency, f"default fabric {label}", bus_efficiency=efficiency
    )


def _scaled(curve: LinkCurve, factor: float, note: str) -> LinkCurve:
    return dataclasses.replace(curve, source=f"{curve.source}; {note}", scale=curve.scale * factor)


# ---- files -----------------------------------------------------------------------------------
def load_network_file(path: str | Path, network: NetworkModel | None = None) -> NetworkModel:
    """Read a ``sailor-network/1`` JSON file into a (new or given) model."""
    path = Path(path)
    data = inputs.load_json(path, "network", error=ProfileError)
    network = network or NetworkModel()
    if not isinstance(data, dict) or data.get("format") != "sailor-network/1":
        raise ProfileError("expected format 'sailor-network/1'", field=f"{path}.format")
    for i, link in enumerate(_objects(data, "links", path)):
        where = f"{path}.links[{i}]"
        src, dst = _endpoint(link, "src", where), _endpoint(link, "dst", where)
        network.add_link(src, dst, curve_from_dict(link, where))
    for i, intra in enumerate(_objects(data, "intra_node", path)):
        where = f"{path}.intra_node[{i}]"
        if "gpu_type" not in intra or "count" not in intra:
            raise ProfileError("needs gpu_type and count", field=where)
        end = _endpoint({"e": {"zone": "local", **intra}}, "e", where, strict=False)
        network.add_intra_node(end.gpu_type, end.count, curve_from_dict(intra, where))
    return network


def _objects(data: dict[str, Any], key: str, path) -> list[dict[str, Any]]:
    items = data.get(key, [])
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise ProfileError("must be a list of objects", field=f"{path}.{key}")
    return items


def _endpoint(link: dict[str, Any], key: str, where: str, strict: bool = True) -> Endpoint:
    """An Endpoint with a zone and GPU type name and a GPU count >= 1, or ProfileError."""
    end = link.get(key)
    if not isinstance(end, dict):
        raise ProfileError(f"bad endpoint: '{key}' must be an object", field=where)
    zone, gpu, count = end.get("zone"), end.get("gpu_type"), end.get("count", 1)
    unknown = set(end) - {"zone", "gpu_type", "count"} if strict else set()
    if (
        unknown
        or not isinstance(zone, str)
        or not isinstance(gpu, str)
        or isinstance(count, bool)
        or not isinstance(count, int)
        or count < 1
    ):
        raise ProfileError(
            f"bad endpoint {end!r:.80}: needs zone and gpu_type names and a count >= 1",
            field=f"{where}.{key}",
        )
    return Endpoint(zone, gpu, count)


def curve_from_dict(data: dict[str, Any], where: str) -> LinkCurve:
    try:
        max_bw = float(data["max_bandwidth"])
        latency = float(data.get("latency_s", DEFAULT_INTER_NODE_LATENCY_S))
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileError(f"needs max_bandwidth (bytes/s) ({exc!r})", field=where) from None
    if not (max_bw > 0 and math.isfinite(max_bw)) or latency < 0:
        raise ProfileError("max_bandwidth must be > 0 and latency_s >= 0", field=where)
    coeffs = data.get("coeffs_gbps")
    points = data.get("points")
    if points is not None:
        points = tuple(sorted((float(a), float(b)) for a, b in points))
        if not points or any(a <= 0 or b <= 0 for a, b in points):
            raise ProfileError(
                "points must be positive (bytes, bytes/s) pairs", field=f"{where}.points"
            )
    ring_bw, ring_latency = _ring_fields(data, where)
    return LinkCurve(
        max_bw,
        latency,
        str(data.get("source", "measured")),
        tuple(float(c) for c in coeffs) if coeffs is not None else None,
        points,
        ring_bus_bandwidth=ring_bw,
        ring_hop_latency_s=ring_latency,
    )


def _ring_fields(data: dict[str, Any], where: str) -> tuple[float | None, float | None]:
    """The optional measured ring (both fields or neither), validated."""
    bw, latency = data.get("ring_bus_bandwidth"), data.get("ring_hop_latency_s")
    if bw is None and latency is None:
        return None, None
    try:
        bw, latency = float(bw), float(latency)
    except (TypeError, ValueError):
        raise ProfileError(
            "ring_bus_bandwidth (bytes/s) and ring_hop_latency_s (s) come together, as numbers",
            field=f"{where}.ring_bus_bandwidth",
        ) from None
    if not (bw > 0 and math.isfinite(bw)) or not (latency >= 0 and math.isfinite(latency)):
        raise ProfileError(
            f"ring_bus_bandwidth must be > 0 and ring_hop_latency_s >= 0, not {bw}, {latency}",
            field=f"{where}.ring_bus_bandwidth",
        )
    return bw, latency


def link_to_dict(curve: LinkCurve) -> dict[str, Any]:
    out: dict[str, Any] = {
        "max_bandwidth": curve.max_bandwidth,
        "latency_s": curve.latency_s,
        "source": curve.source,
    }
    if curve.coeffs_gbps is not None:
        out["coeffs_gbps"] = list(curve.coeffs_gbps)
    if curve.points is not None:
        out["points"] = [list(p) for p in curve.points]
    if curve.ring_bus_bandwidth is not None:
        out["ring_bus_bandwidth"] = curve.ring_bus_bandwidth
        out["ring_hop_latency_s"] = curve.ring_hop_latency_s
    return out
