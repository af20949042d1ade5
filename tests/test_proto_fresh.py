"""The committed generated protobuf code is fresh, imports, and registers each descriptor once."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GEN_PROTO = ROOT / "scripts" / "gen_proto.py"


def load_gen_proto():
    spec = importlib.util.spec_from_file_location("sailor_gen_proto", GEN_PROTO)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_fresh() -> None:
    result = subprocess.run(
        [sys.executable, str(GEN_PROTO), "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, f"run `make proto`:\n{result.stdout}{result.stderr}"


def test_every_proto_has_one_owner() -> None:
    gen = load_gen_proto()
    protos = [p.relative_to(gen.PROTO_ROOT).as_posix() for p in gen.PROTO_ROOT.rglob("*.proto")]
    assert sorted(protos) == sorted(gen.OWNERS)


# Runs in a fresh interpreter so that the check covers exactly "import every generated module
# in one process", independent of what other tests imported.
IMPORT_ALL = r"""
import importlib, json, sys
from google.protobuf import descriptor_pool

modules = json.loads(sys.argv[1])
files = {}
for name in modules:
    mod = importlib.import_module(name)
    if name.endswith("_pb2"):
        files.setdefault(mod.DESCRIPTOR.name, []).append(name)
        assert descriptor_pool.Default().FindFileByName(mod.DESCRIPTOR.name) is mod.DESCRIPTOR
assert not [m for m in sys.modules if m == "sailor" or m.startswith("sailor.")], "sailor.v1 leaked"
print(json.dumps(files))
"""


def test_all_generated_modules_import_in_one_process() -> None:
    modules = load_gen_proto().generated_modules()
    assert modules
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, json.dumps(modules)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    files = json.loads(result.stdout)
    duplicates = {f: mods for f, mods in files.items() if len(mods) > 1}
    assert not duplicates, f"descriptors registered by more than one module: {duplicates}"
    assert len(files) == len(load_gen_proto().OWNERS)


def test_cross_package_messages_are_shared() -> None:
    from sailor_planner.proto import planner_pb2, planner_pb2_grpc
    from sailor_sim.proto import estimate_pb2, job_pb2, plan_pb2

    request = planner_pb2.PlanRequest(
        job=job_pb2.Job(model="OPT-350M", global_batch_size=64),
        inventory=job_pb2.Inventory(pools=[job_pb2.GpuPool(gpu_type="A100-40", zone="z", count=8)]),
        objective=planner_pb2.OBJECTIVE_COST,
    )
    assert type(request.job) is job_pb2.Job
    replan = planner_pb2.ReplanRequest(
        request=request,
        previous_plan=plan_pb2.Plan(
            stages=[plan_pb2.Stage(first_layer=0, last_layer=25, replicas=[plan_pb2.Replica(tp=2)])]
        ),
    )
    decoded = planner_pb2.ReplanRequest.FromString(replan.SerializeToString())
    assert decoded == replan
    ranked = planner_pb2.RankedPlan(estimate=estimate_pb2.Estimate(fits=True))
    assert type(ranked.estimate) is estimate_pb2.Estimate
    service = planner_pb2.DESCRIPTOR.services_by_name["PlannerService"]
    assert [m.name for m in service.methods] == ["Plan", "Simulate", "Replan", "Replay"]
    assert hasattr(planner_pb2_grpc, "PlannerServiceStub")
    assert hasattr(planner_pb2_grpc, "add_PlannerServiceServicer_to_server")
