"""`sailor run --local` as `make demo` runs it: a LLaMA-shaped model from a Hugging Face
config.json, bf16 mixed precision, full recomputation and ZeRO-1, on two really different CPU
worker types, a kill -9 of a rank mid-run, predicted vs measured memory per rank."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = Path(__file__).parents[3] / "examples" / "llama-demo" / "config.json"


@pytest.mark.timeout(600)
def test_demo_run_with_options_survives_a_rank_kill(tmp_path):
    out = tmp_path / "summary.json"
    cmd = [
        sys.executable, "-m", "sailor_runtime.cli", "run", "--local", "--workers", "2",
        "--gpu-types", "cpu-2t,cpu-1t", "--model", str(CONFIG), "--precision", "bf16",
        "--recompute", "full", "--zero", "zero1", "--global-batch-size", "8",
        "--seq-len", "32", "--steps", "10", "--checkpoint-every", "4",
        "--kill-rank-at-step", "6", "--run-dir", str(tmp_path / "run"), "--json", str(out),
        "--timeout", "500", "--heartbeat-timeout", "10",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=560)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = json.loads(out.read_text())
    assert s["state"] == "DONE" and s["steps"] == 10
    assert s["options"] == "bf16, recompute full, sdpa, ZeRO-1"
    # before training: the plan, why, and the predicted memory per rank
    assert "why (measured compute" in proc.stdout and "predicted iteration" in proc.stdout
    # after: every rank of the last generation measured its tensor memory
    assert s["rank_memory"] and all(m["measured_bytes"] for m in s["rank_memory"])
    assert all(m["predicted_bytes"] > 0 for m in s["rank_memory"])
    # the kill: a re-plan on the same nodes, the same plan, the re-run steps bit for bit
    assert any(e["event"].startswith("kill -9 rank") for e in s["events"])
    assert len(s["reconfigurations"]) >= 2
    assert s["reruns"], "the kill lands after the last checkpoint: some steps run again"
    if len({r["plan"] for r in s["reconfigurations"]}) == 1:
        assert all("bit-identical" in line for line in s["reruns"][1:]), s["reruns"]
    assert "T4" not in proc.stdout + proc.stderr


def test_demo_config_builds_a_llama_whose_params_equal_the_spec():
    """The demo's config.json: LLaMA-shaped (RMSNorm, RoPE, SwiGLU, GQA, no biases); every
    layer id of the zoo holds exactly what ModelSpec counts, at TP 1 and 2."""
    from sailor_profiler.zoo import build_stage
    from sailor_sim import get_model

    spec = get_model(str(CONFIG))
    assert (spec.norm, spec.mlp, spec.position, spec.bias) == ("rmsnorm", "swiglu", "rotary", False)
    assert spec.num_kv_heads < spec.num_heads
    for tp in (1, 2):
        stage = build_stage(spec, 0, spec.head_layer_id, tp_rank=0, tp_size=tp)
        assert sorted(map(int, stage.layers)) == list(range(spec.num_layer_ids))
        for lid in range(spec.num_layer_ids):
            got = sum(p.numel() for p in stage.layers[str(lid)].parameters())
            assert got == spec.params(lid, tp), (lid, tp)
