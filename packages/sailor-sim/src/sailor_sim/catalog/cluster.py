"""The cluster as input: the fabric between nodes, given instead of the provider's default.

``--fabric`` on ``sailor-sim simulate`` takes either the name of a catalog fabric
(``data/instances.json`` ``fabrics``, e.g. ``ib-ndr-8x400``) or a cluster file::

    {"format": "sailor-cluster/1",
     "fabric": "InfiniBand NDR",      # a kind of comm.BUS_EFFICIENCY
     "nics_per_node": 8, "nic_gbps": 400,
     "gpus_per_node": 8,              # GPUs sharing those NICs
     "nvlink_domain": 8,              # GPUs one NVLink/NVSwitch domain joins (<= a node's)
     "deployment": "on-prem",         # or "cloud"
     "latency_us": 5}                 # optional (default: the fabric kind's catalog value)

A ``Cluster`` given to ``NetworkModel.cluster`` replaces the catalog default for every link
between nodes of one zone (links measured for exact endpoints still win), and its NVLink
domain bounds the intra-node step of hierarchical all-reduces. ``describe_network`` is the
line every estimate prints: the network it assumed, where each figure came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .. import inputs
from ..errors import ValidationError
from ..simulate.comm import bus_efficiency

FORMAT = "sailor-cluster/1"
DEPLOYMENTS = ("on-prem", "cloud")
DEFAULT_LATENCY_US = {"InfiniBand NDR": 5, "InfiniBand HDR": 5, "RoCE": 10}
"""Fabric kind -> one-way latency (us) where the cluster file gives none (else 20 us)."""
_KEYS = {
    "format",
    "fabric",
    "nics_per_node",
    "nic_gbps",
    "gpus_per_node",
    "nvlink_domain",
    "deployment",
    "latency_us",
}


@dataclass(frozen=True)
class Cluster:
    """Nodes of ``gpus_per_node`` GPUs with ``nics_per_node`` NICs of ``nic_gbps`` each."""

    fabric: str
    nics_per_node: int
    nic_gbps: float
    gpus_per_node: int | None
    """None: as many as the GPU type's nodes hold (a catalog fabric is quoted per node)."""
    nvlink_domain: int | None
    """None: the whole node."""
    deployment: str
    latency_s: float
    source: str

    def bandwidth_per_gpu(self, gpus_of_type: int) -> float:
        """Bytes/s per direction each GPU gets when every GPU of a node sends at once; nodes of
        ``gpus_of_type`` GPUs where the cluster does not say."""
        gpus = self.gpus_per_node or gpus_of_type
        return self.nics_per_node * self.nic_gbps / 8 * 1e9 / gpus

    @property
    def bus_efficiency(self) -> float:
        return bus_efficiency(self.fabric).value

    def describe(self) -> str:
        node = f"{self.gpus_per_node}-GPU node" if self.gpus_per_node else "node"
        domain = f", NVLink domain {self.nvlink_domain}" if self.nvlink_domain else ""
        return (
            f"{self.fabric} {self.nics_per_node} x {self.nic_gbps:g} Gb/s per {node}{domain}, "
            f"{self.deployment} ({self.source})"
        )


def from_catalog(name: str) -> Cluster:
    """A cluster of a catalog fabric (``data/instances.json``, quoted per node: the GPU
    type's nodes share it)."""
    from .instances import FABRICS as fabrics

    if name not in fabrics:
        raise ValidationError(
            f"unknown fabric {name!r}: give a catalog fabric ({', '.join(sorted(fabrics))}) "
            "or a cluster file",
            field="--fabric",
        )
    f = fabrics[name]
    gbps = f.bandwidth_per_node * 8 / 1e9
    return Cluster(
        f.kind, 1, gbps, None, None, "cloud" if "cloud" in f.kind or "AWS" in f.kind else "on-prem",
        f.latency_s, f"catalog fabric {name}: {f.source}",
    )  # fmt: skip


def load_cluster(path: str | Path, field: str = "cluster") -> Cluster:
    """Read and check a ``sailor-cluster/1`` file (ValidationError naming the bad field;
    ``field``: what names the file when it cannot be read, e.g. the CLI's flag)."""
    data = inputs.load_json(Path(path), field, error=ValidationError)
    where = str(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValidationError(f"expected format {FORMAT!r}", field=f"{where}.format")
    unknown = set(data) - _KEYS
    if unknown:
        raise ValidationError(f"unknown keys {sorted(unknown)}", field=where)
    kind = data.get("fabric")
    if not isinstance(kind, str):
        raise ValidationError("needs a fabric kind, e.g. 'InfiniBand NDR'", field=f"{where}.fabric")
    bus_efficiency(kind)  # an unknown kind: UnknownNameError naming the known ones
    counts = {k: data.get(k) for k in ("nics_per_node", "gpus_per_node")}
    for key, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValidationError(f"must be an integer >= 1, got {value!r}", field=f"{where}.{key}")
    domain = data.get("nvlink_domain", counts["gpus_per_node"])
    if isinstance(domain, bool) or not isinstance(domain, int) or domain < 1:
        raise ValidationError(
            f"must be an integer >= 1, got {domain!r}", field=f"{where}.nvlink_domain"
        )
    gbps = _positive(data.get("nic_gbps"), f"{where}.nic_gbps")
    latency_us = _positive(
        data.get("latency_us", DEFAULT_LATENCY_US.get(kind, 20)), f"{where}.latency_us"
    )
    deployment = data.get("deployment", "on-prem")
    if deployment not in DEPLOYMENTS:
        raise ValidationError(f"must be one of {DEPLOYMENTS}", field=f"{where}.deployment")
    return Cluster(
        kind, counts["nics_per_node"], gbps, counts["gpus_per_node"],
        min(domain, counts["gpus_per_node"]), deployment, latency_us * 1e-6,
        f"cluster file {Path(path).name}",
    )  # fmt: skip


def _positive(value, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"must be a number > 0, got {value!r}", field=field)
    if not (value > 0 and math.isfinite(value)):
        raise ValidationError(f"must be a number > 0, got {value!r}", field=field)
    return float(value)


def resolve_cluster(spec: str, field: str = "--fabric") -> Cluster:
    """``--fabric``: a cluster file if ``spec`` names a file, else a catalog fabric name."""
    if Path(spec).is_file() or spec.endswith(".json"):
        return load_cluster(spec, field)
    return from_catalog(spec)


def describe_network(network, plan) -> list[str]:
    """One line per GPU type of ``plan``: the links between its GPUs inside a node and across
    nodes that the estimate assumed, with their sources."""
    from ..simulate.comm import intra_node_kind
    from ..simulate.network import Endpoint
    from ..simulate.timing import bus_efficiency as default_efficiency
    from .gpus import get_gpu

    lines = []
    kinds = sorted({(r.zone, r.gpu_type) for s in plan.stages for r in s.replicas})
    for zone, gpu_type in kinds:
        gpu = get_gpu(gpu_type)
        intra = network.intra_node(gpu_type, gpu.gpus_per_node)
        inter = network.link(Endpoint(zone, gpu_type, 1), Endpoint(zone, gpu_type, 1))
        eff = inter.bus_efficiency
        eff = default_efficiency(gpu_type) if eff is None else eff
        lines.append(
            f"{gpu_type} in {zone}: {intra_node_kind(gpu)} {intra.max_bandwidth / 1e9:.0f} GB/s "
            f"inside a node; between nodes {inter.max_bandwidth * 8 / 1e9:.0f} Gb/s per GPU, "
            f"ring bus efficiency {eff:.2f} ({inter.source})"
        )
    return lines
