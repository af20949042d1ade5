"""The LM head's loss: the same values and gradients as ``F.cross_entropy``, and the step peak
the simulator's ``transient_bytes`` describes (one fp32 buffer beside the logits), measured with
the engine's own CPU memory probe."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sailor_profiler.zoo import vocab_parallel_cross_entropy
from sailor_runtime.engine.rank.memprobe import StepPeak
from sailor_sim import get_model
from sailor_sim.simulate.memory import transient_bytes

TOKENS, HIDDEN, VOCAB = 1024, 64, 8192


def _head():
    """(hidden states, LM-head weight, targets): fp32 leaves, cast by autocast in ``_loss``."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(TOKENS, HIDDEN, generator=g, requires_grad=True)
    w = (torch.randn(VOCAB, HIDDEN, generator=g) * 0.05).requires_grad_()
    target = torch.randint(0, VOCAB, (TOKENS,), generator=g)
    return x, w, target


def _loss(x, w, target, dtype, ours: bool):
    with torch.autocast("cpu", torch.bfloat16, enabled=dtype == torch.bfloat16):
        logits = F.linear(x, w)
        if ours:
            return vocab_parallel_cross_entropy(logits, target, 0, 1, None)
        return F.cross_entropy(logits.float(), target)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_loss_and_gradients_equal_torch_cross_entropy(dtype):
    x, w, target = _head()
    got = _loss(x, w, target, dtype, ours=True)
    gx, gw = torch.autograd.grad(got, (x, w))
    want = _loss(x, w, target, dtype, ours=False)
    wx, ww = torch.autograd.grad(want, (x, w))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    # bf16: the fp32 gradients are cast to bf16 for the matmul's backward, so last-bit
    # differences of the fp32 values may round to neighbouring bf16 numbers
    tol = {"rtol": 1e-5, "atol": 1e-7} if dtype == torch.float32 else {"rtol": 8e-3, "atol": 1e-6}
    torch.testing.assert_close(gx, wx, **tol)
    torch.testing.assert_close(gw, ww, **tol)


def test_a_second_backward_is_refused():
    """The saved softmax becomes the gradient in place: a retained graph cannot run twice."""
    x, w, target = _head()
    loss = _loss(x, w, target, torch.float32, ours=True)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward ran twice"):
        loss.backward()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_head_step_peak_is_its_softmax_and_one_logits_copy(dtype):
    """Peak above the start of forward + backward: the saved fp32 softmax (4 B per logit)
    plus the logits in their own dtype (the simulator's head stash term and
    ``transient_bytes``). ``F.cross_entropy`` on fp32 logits peaked at 12 B per logit (two
    more fp32 copies in backward), which fails this."""
    x, w, target = _head()
    width = 2 if dtype == torch.bfloat16 else 4
    logits = TOKENS * VOCAB
    with StepPeak() as probe:
        _loss(x, w, target, dtype, ours=True).backward()
    # the simulator's figure for a head of this shape: transient beside the 4-byte softmax
    model = get_model("OPT-350M")
    name = "bf16" if dtype == torch.bfloat16 else "fp32"
    per_logit = transient_bytes(model, model.head_layer_id, 1, 1, name, 1) / model.vocab_size
    assert per_logit == width
    small = 4 * (TOKENS * HIDDEN + VOCAB * HIDDEN) * 3  # x, w, their grads and casts
    assert probe.peak_bytes <= (4 + width) * logits + small, probe.peak_bytes / logits
    assert probe.peak_bytes >= (4 + width) * logits * 0.9  # the probe sees the buffers
