"""SkyPilot (issue 19 item 4): deploy/skypilot validated by SkyPilot's own task schema
(``sky.Task.from_yaml``) and checked for what Sailor needs: one task per GPU pool, on spot
VMs with recovery, whose accelerator, zone and worker flags agree with Sailor's catalog; the
controller on an on-demand VM with its ports open."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sailor_sim import get_gpu
from sailor_sim.catalog.zones import get_zone

sky = pytest.importorskip("sky", reason="the skypilot package (a dev dependency) is absent")
SKY = Path(__file__).resolve().parents[3] / "deploy" / "skypilot"
POOLS = sorted(SKY.glob("workers-*.yaml"))


@pytest.mark.parametrize("path", sorted(SKY.glob("*.yaml")), ids=lambda p: p.name)
def test_every_task_passes_skypilots_schema(path):
    task = sky.Task.from_yaml(str(path))
    assert task.run and task.setup


def test_skypilots_schema_refuses_a_broken_task():
    """The check above can fail: a misspelt field and a wrong type are refused."""
    config = yaml.safe_load(POOLS[0].read_text())
    for key, breakage in (("resources", {"use_spott": True}), ("num_nodes", "two")):
        broken = dict(config)
        broken[key] = {**config[key], **breakage} if isinstance(breakage, dict) else breakage
        with pytest.raises(ValueError):
            sky.Task.from_yaml_config(broken)


def test_one_spot_task_per_gpu_pool_agrees_with_the_catalog():
    assert len(POOLS) >= 2
    pools = set()
    for path in POOLS:
        config = yaml.safe_load(path.read_text())
        resources, envs = config["resources"], config["envs"]
        accelerator, per_node = resources["accelerators"].split(":")
        assert get_gpu(accelerator.lower()).name == envs["SAILOR_GPU_TYPE"], path.name
        assert resources["zone"] == envs["SAILOR_ZONE"] == get_zone(envs["SAILOR_ZONE"]).name
        assert resources["use_spot"] is True and resources["job_recovery"]["strategy"]
        assert int(per_node) >= 1 and "--advertise-host" in config["run"]
        pools.add((envs["SAILOR_GPU_TYPE"], envs["SAILOR_ZONE"]))
    assert len(pools) == len(POOLS)


def test_the_controller_is_on_demand_with_its_ports_open():
    config = yaml.safe_load((SKY / "controller.yaml").read_text())
    assert config["resources"]["use_spot"] is False
    assert config["resources"]["ports"] == [29400, 29401]
    assert "--port 29400 --store-port 29401" in config["run"]


MANAGED_TASK_ID = "sky-managed-2026-11-26-17-05-12-123456_sailor-workers-a100-us-central1-a_1-0"
"""A managed job's SKYPILOT_TASK_ID (the same across its recoveries): 79 characters."""


def worker_id_of(path: Path, task_id: str, node_rank: int) -> str:
    """The --worker-id the task's run script builds, computed by bash from its own line."""
    import subprocess

    [line] = [x for x in yaml.safe_load(path.read_text())["run"].splitlines()
              if x.strip().startswith("worker_id=")]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "SKYPILOT_TASK_ID": task_id,
           "SKYPILOT_NODE_RANK": str(node_rank)}  # fmt: skip
    script = f'set -euo pipefail\n{line}\nprintf %s "$worker_id"'
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=30, check=True).stdout  # fmt: skip


@pytest.mark.parametrize("path", POOLS, ids=lambda p: p.name)
def test_a_managed_jobs_worker_ids_pass_sailor_workers_check(path):
    from sailor_sim import inputs

    assert len(MANAGED_TASK_ID) > 64
    ids = [worker_id_of(path, MANAGED_TASK_ID, rank) for rank in (0, 1)]
    for worker_id in ids:
        assert inputs.safe_id(worker_id, "--worker-id") == worker_id  # `sailor worker`'s check
    assert ids[0] != ids[1]  # one per node
    assert worker_id_of(path, MANAGED_TASK_ID, 0) == ids[0]  # the same after a recovery
    assert worker_id_of(path, MANAGED_TASK_ID.replace("_1-0", "_2-0"), 0) != ids[0]
    assert '--worker-id "$worker_id"' in yaml.safe_load(path.read_text())["run"]


def test_the_controller_passes_sailor_run_args_on():
    config = yaml.safe_load((SKY / "controller.yaml").read_text())
    assert "SAILOR_RUN_ARGS" in config["envs"] and "$SAILOR_RUN_ARGS" in config["run"]
    assert "SAILOR_TLS" not in (SKY / "controller.yaml").read_text()  # no promise of missing files
