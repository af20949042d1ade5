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
    argv = container["command"] + container.get("args", [])
    return dict(a[2:].split("=", 1) for a in argv if a.startswith("--"))


def controller_container(docs: list[dict]) -> dict:
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "controller")


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
    service = next(
        d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "sailor-controller"
    )
    f = flags(controller_container(docs))
    assert f["host"] == "0.0.0.0" and f["advertise-host"] == service["metadata"]["name"]
    ports = {p["port"] for p in service["spec"]["ports"]}
    assert {int(f["port"]), int(f["store-port"])} <= ports
    assert (
        service["spec"]["selector"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )


def test_each_worker_statefulset_has_the_headless_service_it_names():
    docs = documents()
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    for sts in (d for d in docs if d["kind"] == "StatefulSet"):
        service = services.get(sts["spec"]["serviceName"])
        assert service is not None, f"no Service {sts['spec']['serviceName']}"
        assert service["spec"]["clusterIP"] == "None"  # headless: one DNS name per pod
        labels = sts["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()


def test_sailor_run_args_become_controller_flags(tmp_path):
    """The controller's command, run by a real sh with `sailor` standing in as a script that
    prints its arguments: SAILOR_RUN_ARGS (real text: --data, --eval-every) arrives as flags
    of their own after the manifest's."""
    import os
    import subprocess

    container = controller_container(documents())
    (tmp_path / "sailor").write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    (tmp_path / "sailor").chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}",
           "SAILOR_RUN_ARGS": "--data=/sailor-run/data --eval-every=100"}  # fmt: skip
    out = subprocess.run(container["command"] + container["args"], env=env, capture_output=True,
                         text=True, timeout=30, check=True).stdout.splitlines()  # fmt: skip
    assert out[0] == "controller" and out[-2:] == ["--data=/sailor-run/data", "--eval-every=100"]
    assert out[1:-2] == container["args"]
