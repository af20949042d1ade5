"""From measured network points to the simulator's network profile (``sailor-network/1``).

Files written into the output folder:

* ``links.json`` (read by ``sailor_sim.simulate.network.load_network_file``): each curve is the
fitted
  alpha-beta model, ``latency_s`` = alpha and ``max_bandwidth`` = 1 / beta, without points, so
  the simulator's ``time(m) = latency_s + m / max_bandwidth`` is exactly the fit at every size.
  - ``links``: the p2p fit between endpoint (zone, GPU type, count = concurrent pairs) and
    (peer zone, GPU type, count), with the measured ring all-reduce over it (``ring_fields``):
    ``ring_bus_bandwidth`` and ``ring_hop_latency_s`` from the all-reduce fit, in the same
    bus terms as ``intra_node`` below. The simulator prices data-parallel rings with them
    instead of p2p x a per-platform efficiency constant (gloo on CPU reaches 0.2-0.4 of its
    p2p bandwidth: the reduction and copies are CPU work that a ping-pong does not do).
  - ``intra_node`` (only when every rank is on one machine): the all-reduce fit over ``count`` =
    world size GPUs as a *bus* bandwidth and a per-hop latency: a ring all-reduce of m bytes
    takes ``2 (count - 1) * latency_s + 2 (count - 1) / count * m / max_bandwidth`` (NCCL
    tests' bus bandwidth; the ring's 2 (count - 1) steps, as ``sailor_sim.simulate.timing``
    ``tp_comm_time`` evaluates it), which equals the measured fit alpha + m / bandwidth.
  A folder's earlier curves are kept; a curve measured again is replaced
  (``keeping_other_curves``).
* ``profiler/network.json``: every fit with its range, error and provenance (for people/tools).
* ``profiler/network.parquet`` / ``.csv``: the measured points; ``profiler/network.png``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..plots import plot_bandwidth
from ..profiles.store import NETWORK_FILE, NETWORK_TABLES, network_key, read_network
from ..tables import network_frame, write_table
from .fit import LinkFit, fit_latency_bandwidth
from .measure import NetPoint

NETWORK_FORMAT = "sailor-network/1"


@dataclass(frozen=True)
class LinkPlace:
    """Where a measurement ran, as the profile files it: the GPU type, the zone of this rank
    group and of its peers, and whether every rank was on one machine (``intra_node``)."""

    gpu_type: str
    zone: str
    peer_zone: str
    intra_node: bool


def fit_ops(points: list[NetPoint]) -> dict[str, LinkFit]:
    fits = {}
    for op in sorted({p.op for p in points}):
        pts = [p for p in points if p.op == op]
        fits[op] = fit_latency_bandwidth([p.message_bytes for p in pts], [p.median_s for p in pts])
    return fits


def _bus_factor(world: int) -> float:
    return 2 * (world - 1) / world if world > 1 else 1.0


def ring_fields(fits: dict[str, LinkFit], world: int) -> dict[str, float]:
    """The all-reduce fit alpha + m / beta over ``world`` ranks as a ring's bus bandwidth and
    per-step latency: 2 (W - 1) / W * m / bus + 2 (W - 1) * hop equals the fit."""
    if world < 2 or "allreduce" not in fits:
        return {}
    fit, steps = fits["allreduce"], 2 * (world - 1)
    return {
        "ring_bus_bandwidth": fit.bandwidth_Bps * _bus_factor(world),
        "ring_hop_latency_s": fit.latency_s / steps,
    }


def network_document(
    points: list[NetPoint], fits: dict[str, LinkFit], place: LinkPlace, provenance: dict
) -> dict:
    gpu_type, zone, peer_zone = place.gpu_type, place.zone, place.peer_zone
    world = points[0].world_size
    pairs = max(1, world // 2)
    where = f"{provenance.get('host', '?')} {provenance.get('date', '')}".strip()
    if provenance.get("busy_ms"):
        where += f"; {provenance['busy_ms']:g} ms of compute before each repetition"
    doc: dict = {"format": NETWORK_FORMAT, "links": [], "intra_node": []}
    ring = ring_fields(fits, world)
    if "p2p" in fits:
        fit = fits["p2p"]
        link = {
            "src": {"zone": zone, "gpu_type": gpu_type, "count": pairs},
            "dst": {"zone": peer_zone, "gpu_type": gpu_type, "count": pairs},
            "max_bandwidth": fit.bandwidth_Bps,
            "latency_s": fit.latency_s,
            "source": f"measured: p2p ping-pong, {world} ranks, alpha-beta fit ({where})",
        }
        if ring:
            link.update(ring)
            link["source"] += f"; ring from the {world}-rank all-reduce"
        doc["links"].append(link)
    if place.intra_node and "allreduce" in fits:
        fit = fits["allreduce"]
        doc["intra_node"].append(
            {
                "gpu_type": gpu_type,
                "count": world,
                "max_bandwidth": ring.get("ring_bus_bandwidth", fit.bandwidth_Bps),
                "latency_s": ring.get("ring_hop_latency_s", fit.latency_s),
                "source": f"measured: all-reduce bus bandwidth, {world} ranks, alpha-beta fit "
                f"({where})",
            }
        )
    return doc


def keeping_other_curves(earlier: dict | None, measured: dict) -> dict:
    """``measured``'s curves added to the ``earlier`` links.json of the folder: a curve measured
    again (same endpoints, or same intra-node group) replaces its old one, the others stay, so
    measuring a second zone pair into a folder keeps the first."""
    if earlier is None:
        return measured
    doc = dict(measured)
    for name, fields in NETWORK_TABLES:
        new = {network_key(item, fields) for item in measured[name]}
        kept = [item for item in earlier.get(name, []) if network_key(item, fields) not in new]
        doc[name] = kept + measured[name]
    return doc


def write_network_profile(
    points: list[NetPoint], out: str | Path, place: LinkPlace, provenance: dict
) -> list[Path]:
    out = Path(out)
    side = out / "profiler"
    side.mkdir(parents=True, exist_ok=True)
    fits = fit_ops(points)
    links = out / NETWORK_FILE
    doc = keeping_other_curves(
        read_network(links), network_document(points, fits, place, provenance)
    )
    _write_json(links, doc)
    sizes = sorted({p.message_bytes for p in points})
    details = {
        "format": "sailor-profiler-network/1",
        "model": "t(m) = latency_s + m / bandwidth_Bps (alpha-beta, relative least squares)",
        "world_size": points[0].world_size,
        "measured_bytes": [sizes[0], sizes[-1]],
        "fits": {op: asdict(f) for op, f in fits.items()},
        "provenance": provenance,
    }
    detail_file = side / "network.json"
    _write_json(detail_file, details)
    frame = network_frame(points)
    tables = write_table(frame, side / "network")
    plot = plot_bandwidth(frame, fits, side / "network.png")
    return [links, detail_file, *tables, plot]


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(path)
