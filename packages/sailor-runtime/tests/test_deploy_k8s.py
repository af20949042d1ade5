"""Kubernetes (issue 19 item 4): deploy/k8s validated against the Kubernetes OpenAPI schema
(kubernetes-validate, strict: unknown fields refused) and checked for what Sailor needs: one
worker StatefulSet per GPU pool with node selectors for the GPU type and the zone, flags that
agree with them, and a Service that exposes the ports the controller listens on."""

from __future__ import annotations

import copy
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from sailor_sim import get_gpu
from sailor_sim.catalog.zones import get_zone

K8S = Path(__file__).resolve().parents[3] / "deploy" / "k8s"
VERSION = "1.30.0"
ZONE_LABEL = "topology.kubernetes.io/zone"
GPU_LABEL = "cloud.google.com/gke-accelerator"


def documents() -> list[dict]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def flags(container: dict) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in container["command"] if a.startswith("--"))


@pytest.mark.parametrize("doc", documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_manifest_is_valid_kubernetes(doc):
    kubernetes_validate.validate(doc, VERSION, strict=True)


def test_the_validator_refuses_a_broken_manifest():
    """The check above can fail: a wrong type and an unknown field are both refused."""
    deployment = next(d for d in documents() if d["kind"] == "Deployment")
    for breakage in ({"replicas": "two"}, {"replica": 1}):
        broken = copy.deepcopy(deployment)
        broken["spec"].update(breakage)
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, VERSION, strict=True)


def test_one_worker_statefulset_per_gpu_pool_selects_its_gpu_type_and_zone():
    pools = [d for d in documents() if d["kind"] == "StatefulSet"]
    assert len(pools) >= 2
    seen = set()
    for sts in pools:
        pod = sts["spec"]["template"]["spec"]
        [worker] = pod["containers"]
        f = flags(worker)
        gpu, zone = get_gpu(f["gpu-type"]), get_zone(f["zone"])
        assert pod["nodeSelector"][ZONE_LABEL] == zone.name
        assert pod["nodeSelector"][GPU_LABEL]
        assert int(worker["resources"]["limits"]["nvidia.com/gpu"]) == int(f["gpus"])
        assert f["controller"] == "sailor-controller:29400"
        assert f["advertise-host"] == "$(POD_IP)"  # the agent is dialed at its pod address
        seen.add((gpu.name, zone.name))
    assert len(seen) == len(pools), "two StatefulSets for one pool"


def test_the_service_exposes_the_controller_and_store_ports():
    docs = documents()
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    service = next(d for d in docs if d["kind"] == "Service")
    controller = next(
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "controller"
    )
    f = flags(controller)
    assert f["host"] == "0.0.0.0" and f["advertise-host"] == service["metadata"]["name"]
    ports = {p["port"] for p in service["spec"]["ports"]}
    assert {int(f["port"]), int(f["store-port"])} <= ports
    assert (
        service["spec"]["selector"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )
