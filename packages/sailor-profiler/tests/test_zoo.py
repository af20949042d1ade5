"""Model zoo: parameter counts equal ModelSpec accounting, TP shards equal the full model."""

from __future__ import annotations

import textwrap

import pytest
import torch

from sailor_profiler.zoo import (
    build_stage,
    example_input,
    full_shape,
    get_split,
    layer_forward_backward,
)
from sailor_sim import MODEL_CATALOG, get_model
from sailor_testing import run_ranks


@pytest.mark.parametrize("name", list(MODEL_CATALOG))
def test_param_counts_equal_spec_for_every_tp(name):
    spec = get_model(name)
    small = spec.hidden_size <= 256
    for tp in spec.tp_degrees(8):
        device = "cpu" if small else "meta"
        stage = build_stage(
            spec,
            0,
            spec.head_layer_id,
            tp_rank=tp - 1,
            tp_size=tp,
            device=device,
            seed=0 if small else None,
        )
        for lid in range(spec.num_layer_ids):
            got = sum(p.numel() for p in stage.layers[str(lid)].parameters())
            assert got == spec.params(lid, tp), (lid, tp)


def test_split_metadata_and_stable_names():
    stage = build_stage("tiny-llama", 2, 7, tp_rank=1, tp_size=2)
    names = {n for n, _ in stage.named_parameters()}
    assert "layers.2.attn.q.weight" in names and "layers.7.lm_head.weight" in names
    assert "layers.1.attn.q.weight" not in names
    splits = {n: get_split(p) for n, p in stage.named_parameters()}
    assert splits["layers.2.attn.q.weight"] == (0, 2)
    assert splits["layers.2.attn.o.weight"] == (1, 2)
    assert splits["layers.2.norm1.weight"] is None
    assert splits["layers.7.lm_head.weight"] == (0, 2)
    assert full_shape(stage.layers["7"].lm_head.weight) == (256, 64)


def test_init_is_plan_independent():
    full = build_stage("tiny-gpt", 0, 7)
    for rank in range(4):
        part = build_stage("tiny-gpt", 3, 5, tp_rank=rank, tp_size=4)
        for name, p in part.named_parameters():
            ref = dict(full.named_parameters())[name]
            split = get_split(p)
            want = ref if split is None else ref.chunk(split[1], split[0])[rank]
            assert torch.equal(p, want), name


def test_rejects_bad_tp_and_layer_range():
    with pytest.raises(ValueError, match="num_heads"):
        build_stage("tiny-gpt", 0, 1, tp_size=3, tp_rank=0)
    with pytest.raises(ValueError, match="layer id 9"):
        build_stage("tiny-gpt", 0, 9)


@pytest.mark.parametrize("lid", [0, 3, 7])
def test_example_input_runs_one_layer_forward_backward(lid):
    stage = build_stage("tiny-llama", lid, lid)
    inputs = stage.example_input(lid, 2, 16)
    out = layer_forward_backward(stage.layers[str(lid)], inputs)
    assert out.shape == (() if lid == 7 else (2, 16, 64))
    assert all(p.grad is not None for p in stage.parameters())
    assert len(example_input("tiny-gpt", 7, 1, 8)) == 2


_TP_SCRIPT = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    from sailor_profiler.zoo import build_stage
    from sailor_testing import join, leave, step_grads
    rank, world, (out,) = join()
    groups = {2: dist.new_group([0, 1]), 4: dist.new_group([0, 1, 2, 3])}
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    labels = torch.roll(tokens, -1, 1)
    result = {}
    for name in ("tiny-gpt", "tiny-llama"):
        for tp in (2, 4):
            if rank >= tp:
                continue
            m = build_stage(name, 0, 7, tp_rank=rank, tp_size=tp, tp_group=groups[tp],
                            dtype=torch.float64)
            loss = m(tokens, labels)
            loss.backward()
            result[(name, tp)] = (loss.detach(), step_grads(m, groups[tp]))
    if rank == 0:
        torch.save(result, out)
    leave()
    """
)


def test_tensor_parallel_equals_single_process(tmp_path):
    out = tmp_path / "out.pt"
    run_ranks(tmp_path, _TP_SCRIPT, 4, str(out))
    result = torch.load(out)
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    labels = torch.roll(tokens, -1, 1)
    for name in ("tiny-gpt", "tiny-llama"):
        ref = build_stage(name, 0, 7, dtype=torch.float64)
        loss = ref(tokens, labels)
        loss.backward()
        for tp in (2, 4):
            got_loss, grads = result[(name, tp)]
            torch.testing.assert_close(got_loss, loss.detach(), rtol=1e-12, atol=0)
            for n, p in ref.named_parameters():
                torch.testing.assert_close(grads[n], p.grad, rtol=1e-9, atol=1e-12)


def test_split_is_carried_at_tp1():
    stage = build_stage("tiny-gpt", 0, 1)
    assert get_split(stage.layers["0"].word.weight) == (0, 1)
    assert get_split(stage.layers["1"].mlp.down.weight) == (1, 1)
    assert get_split(stage.layers["1"].mlp.down.bias) is None


def test_parallelize_outside_the_constructors_slices_a_built_model():
    """TP is a step applied to a built stage: parallelizing a full, initialized model keeps
    each rank's chunk (the same tensors ``build_stage`` makes on the meta device), splits the
    attention heads, and a stage is parallelized only once."""
    from sailor_profiler.zoo import parallelize

    for rank in range(2):
        head = str(get_model("tiny-llama").head_layer_id)
        built = build_stage("tiny-llama", 0, int(head), tp_rank=rank, tp_size=2)
        applied = parallelize(build_stage("tiny-llama", 0, int(head)), rank, 2)
        want = dict(built.named_parameters())
        for name, p in applied.named_parameters():
            assert torch.equal(p, want[name]) and get_split(p) == get_split(want[name]), name
        attn = applied.layers["1"].attn
        assert (attn.heads, attn.kv_heads) == (
            built.layers["1"].attn.heads,
            built.layers["1"].attn.kv_heads,
        )
        assert attn.heads == get_model("tiny-llama").num_heads // 2
        assert applied.layers[head].tp_rank == rank and applied.layers[head].tp_size == 2
    with pytest.raises(ValueError, match="only once"):
        parallelize(built, 0, 2)
