"""The planner's reported estimate is exactly what `sailor-sim simulate --json` says for its plan,
with the original Sailor artifacts as profiles (skipped when ../shared/reference is absent)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REFERENCE = Path(os.environ.get("SAILOR_REFERENCE", REPO.parent / "shared" / "reference"))
SAILOR_ROOT = REFERENCE / "sailor-artifacts"
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.skipif(
    not SAILOR_ROOT.is_dir(), reason=f"reference data not found at {SAILOR_ROOT}"
)


def _run(*args: str) -> dict:
    out = subprocess.run(args, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize(
    "extra",
    [
        ["--objective", "throughput"],
        ["--objective", "cost", "--min-throughput", "0.05"],
    ],
)
def test_planner_estimate_equals_sailor_sim_simulate(tmp_path, extra) -> None:
    planned = _run(
        str(BIN / "sailor-planner"),
        "plan",
        "--model",
        "OPT-350M",
        "--gbs",
        "1024",
        "--seq-len",
        "2048",
        "--dtype",
        "fp32",
        "--sailor-root",
        str(SAILOR_ROOT),
        "--gpus",
        "A100-40@us-central1-a=16",
        "--gpus",
        "V100-16@us-central1-a=32",
        "--gpus",
        "A100-40@us-central1-b=8",
        "--json",
        *extra,
    )
    # The job with the execution options the planner chose for this plan (it reports them).
    job = {"model": "OPT-350M", "global_batch_size": 1024, "sequence_length": 2048,
           "dtype": "fp32", "options": planned["options"]}  # fmt: skip
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"job": job, "plan": planned["plan"]}))
    simulated = _run(
        str(BIN / "sailor-sim"), "simulate", str(plan_file), "--sailor-root", str(SAILOR_ROOT),
        "--json",
    )  # fmt: skip
    # simulate --json is Estimate.to_dict() plus throughput, provenance, cost_by_provider, plan,
    # the network it assumed, the defaults it took and its notes (no price in a zone, a
    # sequence beyond the model's positions: the planner refuses unpriced pools)
    assert {k: simulated[k] for k in planned["estimate"]} == planned["estimate"]
    assert set(simulated) - set(planned["estimate"]) <= {
        "throughput", "provenance", "cost_by_provider", "plan", "job", "network", "assumed",
        "notes",
    }  # fmt: skip
    assert planned["estimate"]["fits"]
