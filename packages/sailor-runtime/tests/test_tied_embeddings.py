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
from sailor_runtime.engine.launch import launch_many
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
    # The same TP per replica on both stages: each (replica, TP rank) pair sums its own rows.
    "pairs": (
        2,
        Plan(
            (
                Stage(0, 1, (_cpu(2, 2, 2), _cpu(1, 4, 1))),
                Stage(2, 3, (_cpu(2, 2, 2), _cpu(1, 4, 1))),
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


OPTIM = OptimConfig(no_decay=("norm", "bias", "embedding"))
STEPS = 5


def _job(root, name: str) -> Job:
    layers, _, virtual = TIED_RUNS[name]
    path = root / f"tied_{layers}.json"
    path.write_text(json.dumps(dict(TIED_GPT, n_layer=layers)))
    return Job.create(str(path), 8, 32, options=SimOptions(virtual_stages=virtual))


@pytest.fixture(scope="module")
def tied_runs(tmp_path_factory):
    """Both runs in one set of forked rank processes (``launch_many``)."""
    root = tmp_path_factory.mktemp("tied")
    runs = [
        {
            "job": _job(root, name).to_dict(),
            "plan": plan.to_dict(),
            "options": {"virtual_stages": virtual},
            "steps": STEPS,
            "dtype": "fp64",
            "optim": OPTIM.to_dict(),
            "metrics": str(root / f"{name}.jsonl"),
        }
        for name, (_, plan, virtual) in TIED_RUNS.items()
    ]
    if launch_many(runs, log_dir=root / "logs", timeout_s=280):
        pytest.fail(f"ranks failed:\n{(root / 'logs' / 'ranks.log').read_text()[-3000:]}")
    return root


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(TIED_RUNS))
def test_tied_model_over_stages_with_mixed_tp_equals_one_process(tied_runs, name):
    job = _job(tied_runs, name)
    metrics = tied_runs / f"{name}.jsonl"
    got = [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]
    want, ref = reference_run(job, steps=STEPS, optim=OPTIM, dtype="fp64")
    head = str(job.model.head_layer_id)
    assert ref.layers[head].lm_head.weight is ref.layers["0"].word.weight  # one matrix
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-10, atol=0)


def test_tied_copies_are_summed_by_the_ranks_that_hold_them():
    """Same TP per replica on the first and last stage: pairs of ranks with the same rows
    (Megatron's embedding group), no middle stage involved; mixed TP: one group of the two
    stages' ranks (full-vocabulary coordinates)."""
    from sailor_runtime.engine.parallel.topology import Topology, tied_group_ranks

    three = Plan(
        (
            Stage(0, 0, (_cpu(2, 2, 2), _cpu(1, 4, 1))),
            Stage(1, 2, (_cpu(1, 2, 2), _cpu(1, 4, 1))),
            Stage(3, 3, (_cpu(2, 2, 2), _cpu(1, 4, 1))),
        )
    )
    # ranks: stage 0 = 0,1 (replica 0, TP 2), 2; stage 1 = 3, 4; stage 2 = 5,6, 7
    assert tied_group_ranks(Topology(three)) == ([[0, 5], [1, 6], [2, 7]], True)
    groups, pairs = tied_group_ranks(Topology(TIED_RUNS["plain"][1]))
    assert not pairs and groups == [[0, 1, 2, 3, 4, 5]]
