"""The recipe in the engine: a pipelined, tensor-parallel plan with a linear schedule and
weight decay only on the matrices trains exactly as torch's AdamW with per-group weight decay
in one process (fp64, real gloo ranks)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from sailor_profiler.zoo import build_stage
from sailor_runtime.engine import reference_run
from sailor_runtime.engine.examples import JOBS, PLANS
from sailor_runtime.engine.launch import launch_local
from sailor_runtime.engine.parallel.optim import decay_group
from sailor_sim.spec.recipe import LRSchedule, OptimConfig

STEPS = 6
LR = LRSchedule(max_lr=3e-3, min_lr=3e-4, warmup_steps=2, decay_steps=STEPS, kind="linear")
OPTIM = OptimConfig(betas=(0.8, 0.9), weight_decay=0.5, clip_norm=0.5,
                    no_decay=("norm", "bias", "embedding"))  # fmt: skip


def test_decay_groups_of_the_zoo_parameters():
    job = JOBS["gpt"]
    model = build_stage(job.model, 0, job.model.head_layer_id)
    groups = {name: decay_group(name) for name, _ in model.named_parameters()}
    assert groups["layers.0.word.weight"] == groups["layers.0.position"] == "embedding"
    assert groups["layers.1.norm1.weight"] == groups["layers.1.norm1.bias"] == "norm"
    assert groups["layers.1.attn.q.bias"] == "bias"
    assert groups["layers.1.attn.q.weight"] == groups["layers.1.mlp.down.weight"] == "matrix"
    head = [n for n in groups if n.startswith(f"layers.{job.model.head_layer_id}.")]
    assert {groups[n] for n in head} == {"norm", "matrix"}
    # norms are norms wherever they sit: after the embedding (BLOOM), on q and k (Qwen3)
    spec = dataclasses.replace(job.model, embedding_norm=True, qk_norm=True, norm="rmsnorm")
    named = dict(build_stage(spec, 0, 1).named_parameters())
    assert decay_group("layers.0.norm.weight") == "norm" and "layers.0.norm.weight" in named
    assert decay_group("layers.1.attn.norm_q.weight") == "norm"
    assert "layers.1.attn.norm_q.weight" in named


@pytest.mark.timeout(300)
def test_pipelined_tp_plan_with_the_recipe_equals_one_process(tmp_path):
    _, plan, _ = PLANS["pp2_uneven_tp2_tp1"]
    training = {"lr": LR.to_dict(), "optim": OPTIM.to_dict()}
    metrics = tmp_path / "m.jsonl"
    codes = launch_local(JOBS["gpt"], plan, steps=STEPS, checkpoint_dir=tmp_path / "ck",
                         metrics_path=metrics, dtype="fp64", training=training, log_dir=tmp_path,
                         timeout_s=240)  # fmt: skip
    assert codes == [0] * plan.num_gpus, (tmp_path / "rank0.log").read_text()[-2000:]
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    got = torch.tensor([m["loss"] for m in lines], dtype=torch.float64)
    assert [m["lr"] for m in lines] == [LR.lr(s) for s in range(STEPS)]
    want, _ = reference_run(JOBS["gpt"], steps=STEPS, lr=LR, optim=OPTIM, dtype="fp64")
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-10, atol=0)
    # The groups matter: decaying everything gives other losses.
    decay_all = OptimConfig(betas=OPTIM.betas, weight_decay=0.5, clip_norm=0.5)
    other, _ = reference_run(JOBS["gpt"], steps=STEPS, lr=LR, optim=decay_all, dtype="fp64")
    assert max(abs(a - b) for a, b in zip(other[2:], want[2:], strict=True)) > 1e-8
