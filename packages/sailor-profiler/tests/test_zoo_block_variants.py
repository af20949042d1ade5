"""The zoo's newer block shapes under tensor and sequence parallelism, on 2 gloo processes
against one process in fp64: a parallel attention + MLP block with one norm (Phi-2, with an
LM-head bias) and with two (Pythia), per-head q/k RMSNorms on heads wider than
hidden / heads (Qwen3), per-head q/k LayerNorms with a weight per head (Command-R+), q/k
RMSNorms over the whole projection with norms only after attention and MLP (OLMo-2), norms after
attention and MLP (Gemma-2/3) and after the embedding (BLOOM). Same loss and gradients, and
each block issues the all-reduces the simulator charges for it
(``ModelSpec.tp_all_reduces_per_block``)."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest
import torch

from sailor_profiler.zoo import build_stage
from sailor_sim import get_model
from sailor_testing import run_ranks

VARIANTS = {
    # name: (catalog model, ModelSpec changes)
    "parallel-1-norm": ("tiny-gpt", {"parallel_block": True, "lm_head_bias": True}),
    "parallel-2-norms": ("tiny-llama", {"parallel_block": True, "parallel_norms": 2}),
    "qk-norm-wide-heads": ("tiny-llama", {"qk_norm": True, "attention_head_dim": 16}),
    # Gemma-3's shape: sandwich norms and per-head q/k norms; BLOOM's embedding norm
    "sandwich-qk-norm": ("tiny-llama", {"sandwich_norm": True, "qk_norm": True}),
    "embedding-norm": ("tiny-gpt", {"embedding_norm": True}),
    # MPT / BLOOM positions: each TP rank biases its own heads with their slopes
    "alibi": ("tiny-gpt", {"position": "alibi"}),
    # OLMo-2: q/k RMSNorms over the whole projection (their statistics summed over the TP
    # ranks), norms after attention and MLP instead of before; with grouped-query attention
    "olmo2-full-qk-norm": (
        "tiny-llama",
        {"qk_norm": True, "qk_norm_kind": "full", "post_norms": True, "num_kv_heads": 2},
    ),
    # Command-R+ / StableLM-2: a bias-free LayerNorm per q and k head, a weight per head
    "per-head-layernorm-qk": (
        "tiny-gpt",
        {"qk_norm": True, "qk_norm_kind": "per_head", "norm": "layernorm"},
    ),
}

MICROBATCHES = 3
"""Microbatches of the step whose all-reduces are counted."""

_SCRIPT = textwrap.dedent(
    """
    import dataclasses, torch, torch.distributed as dist
    from sailor_profiler.zoo import build_stage, enable_sequence_parallel, sync_partial_grads
    from sailor_sim import get_model
    from sailor_testing import join, leave, step_grads
    rank, world, (out, variants, microbatches) = join()
    variants, microbatches = eval(variants), int(microbatches)
    group = dist.new_group([0, 1])
    calls = {"all_reduce": 0}
    real_all_reduce = dist.all_reduce

    def counted(*args, **kwargs):  # counts, then runs the real collective
        calls["all_reduce"] += 1
        return real_all_reduce(*args, **kwargs)

    dist.all_reduce = counted
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    labels = torch.roll(tokens, -1, 1)
    hidden = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(2),
                         dtype=torch.float64)

    result = {}
    for name, (base, changes) in variants.items():
        spec = dataclasses.replace(get_model(base), **changes)
        for sp in (False, True):
            m = build_stage(spec, 0, spec.head_layer_id, tp_rank=rank, tp_size=2,
                            tp_group=group, dtype=torch.float64)
            if sp:
                enable_sequence_parallel(m, group)
            loss = m(tokens, labels)
            loss.backward()
            result[(name, sp)] = (loss.detach(), step_grads(m, group))
            # one block's step of several microbatches: the all-reduces each microbatch
            # issues, then those of the step's gradient sync
            block = build_stage(spec, 1, 1, tp_rank=rank, tp_size=2, tp_group=group,
                                dtype=torch.float64)
            if sp:
                enable_sequence_parallel(block, group)
            counts = []
            for _ in range(microbatches):
                calls["all_reduce"] = 0
                block(hidden.clone().requires_grad_(True)).pow(2).sum().backward()
                counts.append(calls["all_reduce"])
            calls["all_reduce"] = 0
            sync_partial_grads(block, group)
            result[(name, sp, "all_reduces")] = (counts, calls["all_reduce"])
    if rank == 0:
        torch.save(result, out)
    leave()
    """
)


def _spec(name: str):
    base, changes = VARIANTS[name]
    return dataclasses.replace(get_model(base), **changes)


@pytest.fixture(scope="module")
def tp_result(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("variants")
    out = tmp / "out.pt"
    run_ranks(tmp, _SCRIPT, 2, str(out), repr(VARIANTS), str(MICROBATCHES))
    return torch.load(out)


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_tensor_and_sequence_parallel_equal_one_process(tp_result, name, sequence_parallel):
    spec = _spec(name)
    ref = build_stage(spec, 0, spec.head_layer_id, dtype=torch.float64)
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    loss = ref(tokens, torch.roll(tokens, -1, 1))
    loss.backward()
    got_loss, grads = tp_result[(name, sequence_parallel)]
    torch.testing.assert_close(got_loss, loss.detach(), rtol=1e-12, atol=0)
    for n, p in ref.named_parameters():
        torch.testing.assert_close(grads[n], p.grad, rtol=1e-9, atol=1e-12, msg=n)


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_a_block_issues_the_all_reduces_the_simulator_charges(tp_result, name, sequence_parallel):
    """Each microbatch of a block issues the all-reduces of activations the simulator charges
    per block and microbatch (``tp_comm_time``): a parallel block sums its branches before one
    forward all-reduce and all-reduces one input gradient per norm (1 + norms), a sequential
    block 4; under sequence parallelism none (all-gathers and reduce-scatters instead). The
    gradients of replicated parameters that each rank holds a part of (q/k norms; under SP
    also the norms and row-parallel biases) are summed once per step, in one all-reduce,
    not once per parameter and microbatch (2 more per microbatch for q/k norms before)."""
    spec = _spec(name)
    per_microbatch, step_sync = tp_result[(name, sequence_parallel, "all_reduces")]
    activations = 0 if sequence_parallel else spec.tp_all_reduces_per_block
    whole = spec.qk_norm and spec.qk_norm_kind == "full"
    statistics = 2 if whole else 0  # q's and k's sums of squares: forward, backward
    assert per_microbatch == [activations + statistics] * MICROBATCHES
    shared_qk_weights = spec.qk_norm and spec.qk_norm_kind == "head"
    assert step_sync == (1 if shared_qk_weights or sequence_parallel else 0)


def test_the_branches_really_run_in_parallel():
    """The parallel block reads both branches from the block input: with the MLP's weights
    zeroed, its output is x + attn(norm(x)) whatever the order; a sequential block's MLP
    would read x + attn(...), so perturbing the attention changes only the attention term."""
    spec = _spec("parallel-2-norms")
    stage = build_stage(spec, 1, 1, dtype=torch.float64)
    block = stage.layers["1"]
    x = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    both = block(x)
    with torch.no_grad():
        attn_only = x + block.attn(block.norm1(x))
        mlp_only = x + block.mlp(block.norm2(x))
    torch.testing.assert_close(both, attn_only + mlp_only - x, rtol=1e-12, atol=1e-12)


def test_the_simulators_parallel_block_stash_is_what_the_block_saves():
    """The simulator drops the MLP's norm input and (one norm) the MLP's input from a parallel
    block's stash; the zoo's block saves exactly that much less, plus the one LayerNorm's
    per-token mean and rstd it no longer runs (fp32: 2 x 4 bytes per token)."""
    from sailor_profiler.compute.memory import SavedTensorBytes

    def saved(spec) -> int:
        layer = build_stage(spec, 1, 1).layers["1"]
        counter = SavedTensorBytes(layer)
        with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
            layer(torch.randn(2, 64, 64, requires_grad=True))
        return counter.total

    sequential = get_model("tiny-gpt")
    parallel = _spec("parallel-1-norm")

    def stash(spec) -> int:
        return sum(spec.stash_terms(1, 2, 64, "fp32", 1, True).values())

    layernorm_stats = 2 * 64 * 2 * 4
    assert saved(sequential) - saved(parallel) == stash(sequential) - stash(parallel) + (
        layernorm_stats
    )


def test_alibi_slopes_are_press_et_al_s():
    from sailor_profiler.zoo.layers import alibi_slopes

    assert alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]
    # 12 heads (BLOOM's rule): the 8-head sequence, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
    twelve = alibi_slopes(12).tolist()
    assert twelve[:8] == [2.0**-i for i in range(1, 9)]
    assert twelve[8:] == pytest.approx([2 ** -(i + 0.5) for i in range(4)], rel=1e-15)


def test_alibi_attention_is_the_biased_softmax_and_sees_positions():
    """An ALiBi block attends with softmax(q k^T / sqrt(d) - slope (i - j)) under the causal
    mask, in both kernels; so swapping two early tokens changes what a later one sees (the
    zoo used to drop ALiBi: only the causal mask, blind to order within the prefix)."""
    spec = _spec("alibi")
    block = build_stage(spec, 1, 1, dtype=torch.float64).layers["1"]
    attn = block.attn
    x = torch.randn(1, 8, 64, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    h = block.norm1(x)
    q, k, v = (m(h).view(1, 8, 4, 16).transpose(1, 2) for m in (attn.q, attn.k, attn.v))
    slopes = torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8], dtype=torch.float64)
    i = torch.arange(8).view(8, 1)
    j = torch.arange(8).view(1, 8)
    scores = q @ k.transpose(-2, -1) / 4.0 - slopes.view(4, 1, 1) * (i - j)
    scores = scores.masked_fill(j > i, float("-inf"))
    want = attn.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(1, 8, 64))
    with torch.no_grad():
        for flash in (True, False):
            attn.flash = flash
            torch.testing.assert_close(attn(h), want, rtol=1e-10, atol=1e-12)
        swapped = x[:, [1, 0, *range(2, 8)]]
        assert not torch.allclose(block(swapped)[:, 5], block(x)[:, 5])


def test_an_alibi_bias_is_held_once_per_stage_not_per_layer():
    """Every layer reads one cached bias, which CUDA's masked attention kernels save for
    backward (CPU's adds it to the scores, saving nothing); a layer's measured stash leaves
    it out either way: the profiler files per-layer stashes, which the simulator multiplies
    by layers and microbatches in flight, and the stage holds the bias once."""
    from sailor_profiler.compute.memory import SavedTensorBytes
    from sailor_profiler.zoo.layers import alibi_bias

    layer = build_stage(_spec("alibi"), 1, 1).layers["1"]
    cpu = torch.device("cpu")
    bias = alibi_bias(4, 0, 4, 64, torch.float32, cpu)
    assert alibi_bias(4, 0, 4, 64, torch.float32, cpu) is bias  # one tensor for every layer
    counter = SavedTensorBytes(layer)
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
        # kept: its graph holds the saved tensors (freed, their addresses could be reused)
        out = layer(torch.randn(2, 64, 64, requires_grad=True))
    before = counter.total
    counter.pack(bias)  # as a kernel that keeps it for backward would
    counter.pack(bias[1:])  # or a view of it
    assert counter.total == before > 0
    other = torch.zeros_like(bias)
    counter.pack(other)  # any other saved tensor counts
    assert counter.total == before + other.untyped_storage().nbytes()
    del out
