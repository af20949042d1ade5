"""Tied input embedding and LM head: parameter counts equal the simulator's for every catalog
model, and a tied model split over pipeline stages with different TP degrees (two copies
whose gradients the engine adds; also with interleaved 1F1B, the copies in different chunks)
trains exactly as one process with one shared matrix."""

from __future__ import annotations

import json

import pytest
import torch

from sailor_profiler.zoo import build_stage
from sailor_runtime.engine import reference_run
from sailor_runtime.engine.launch import launch_local
from sailor_runtime.engine.options import ExecutionOptions
from sailor_sim import ExecutionOptions as SimOptions
from sailor_sim.model.spec import MODEL_CATALOG, get_model
from sailor_sim.spec.job import Job
from sailor_sim.spec.plan import Plan, Replica, Stage
from sailor_sim.spec.recipe import OptimConfig

TIED_GPT = {"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 64,
            "vocab_size": 256, "tie_word_embeddings": True}  # fmt: skip


@pytest.mark.parametrize("name", sorted(MODEL_CATALOG))
def test_engine_parameters_equal_the_simulator_count(name):
    """The whole model as one stage (on the meta device): its distinct parameters are the
    published count (``total_params``: a tied matrix once) plus the padding rows of the
    vocabulary the engine holds (in the embedding, and in the head when untied)."""
    spec = get_model(name)
    model = build_stage(spec, 0, spec.head_layer_id, device="meta", seed=None)
    held = sum(p.numel() for p in model.parameters())  # parameters() counts a shared one once
    padding = spec.vocab_padding * spec.hidden_size * (1 if spec.tie_word_embeddings else 2)
    assert held == spec.total_params() + padding


def test_gpt2_124m_config_builds_124m_parameters(tmp_path):
    path = tmp_path / "config.json"
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
            "n_positions": 1024, "vocab_size": 50257}  # fmt: skip
    path.write_text(json.dumps(gpt2))
    spec = get_model(str(path))
    model = build_stage(spec, 0, spec.head_layer_id, device="meta", seed=None)
    held = sum(p.numel() for p in model.parameters())
    assert round((held - spec.vocab_padding * 768) / 1e6, 1) == 124.4  # 124,439,808 published


def _cpu(tp: int, mbs: int, n: int) -> Replica:
    return Replica("CPU", "local", tp, mbs, n)


TIED_RUNS = {
    # Embedding with TP 2 on stage 0, the head's copy with TP 1 on stage 1; DP 2.
    "plain": (
        2,
        Plan(
            (
                Stage(0, 1, (_cpu(2, 2, 2), _cpu(1, 4, 1))),
                Stage(2, 3, (_cpu(1, 2, 2), _cpu(2, 4, 1))),
            )
        ),
        1,
    ),
    # Interleaved, 2 chunks per rank: the embedding in chunk 0 of stage 0, the head's copy in
    # chunk 1 of stage 1 (layer ids 0-1 and 4 on stage 0, 2-3 and 5 on stage 1).
    "interleaved": (
        4,
        Plan(
            (
                Stage(0, 2, (_cpu(2, 2, 2), _cpu(1, 2, 2))),
                Stage(3, 5, (_cpu(1, 2, 2), _cpu(2, 2, 2))),
            )
        ),
        2,
    ),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(TIED_RUNS))
def test_tied_model_over_stages_with_mixed_tp_equals_one_process(tmp_path, name):
    layers, plan, virtual = TIED_RUNS[name]
    path = tmp_path / "tied.json"
    path.write_text(json.dumps(dict(TIED_GPT, n_layer=layers)))
    job = Job.create(str(path), 8, 32, options=SimOptions(virtual_stages=virtual))
    optim = OptimConfig(no_decay=("norm", "bias", "embedding"))
    steps, metrics = 5, tmp_path / "m.jsonl"
    codes = launch_local(job, plan, steps=steps, checkpoint_dir=tmp_path / "ck",
                         metrics_path=metrics, dtype="fp64", log_dir=tmp_path, timeout_s=240,
                         training={"optim": optim.to_dict()},
                         options=ExecutionOptions(virtual_stages=virtual))  # fmt: skip
    assert codes == [0] * plan.num_gpus, (tmp_path / "rank0.log").read_text()[-2000:]
    got = [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]
    want, ref = reference_run(job, steps, optim=optim, lr=None, dtype=torch.float64)
    head = str(job.model.head_layer_id)
    assert ref.layers[head].lm_head.weight is ref.layers["0"].word.weight  # one matrix
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-10, atol=0)
