"""Sequence parallelism (``zoo.sequence``) on 2 gloo processes against one process, in fp64:
the same loss and gradients, with the norms really running on half of the tokens."""

from __future__ import annotations

import textwrap

import torch

from sailor_profiler.zoo import build_stage
from sailor_testing import run_ranks

_SP_SCRIPT = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    from sailor_profiler.zoo import build_stage, enable_sequence_parallel
    from sailor_profiler.zoo.layers import Norm
    from sailor_testing import join, leave, step_grads
    rank, world, (out,) = join()
    group = dist.new_group([0, 1])
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    labels = torch.roll(tokens, -1, 1)
    hidden = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(2),
                         dtype=torch.float64)
    result = {}

    for name in ("tiny-gpt", "tiny-llama"):
        m = build_stage(name, 0, 7, tp_rank=rank, tp_size=2, tp_group=group,
                        dtype=torch.float64)
        enable_sequence_parallel(m, group)
        seen = []
        for mod in m.modules():
            if isinstance(mod, Norm):
                mod.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape[1]))
        loss = m(tokens, labels)
        loss.backward()
        result[name] = (loss.detach(), step_grads(m, group), seen)
        # a middle stage: hidden in, hidden out (replicated at both edges)
        mid = build_stage(name, 2, 5, tp_rank=rank, tp_size=2, tp_group=group,
                          dtype=torch.float64)
        enable_sequence_parallel(mid, group)
        x = hidden.clone().requires_grad_(True)
        y = mid(x)
        y.pow(2).sum().backward()
        result[name + "/mid"] = (y.detach(), x.grad, step_grads(mid, group))
    if rank == 0:
        torch.save(result, out)
    leave()
    """
)


def test_sequence_parallel_equals_single_process(tmp_path):
    out = tmp_path / "out.pt"
    run_ranks(tmp_path, _SP_SCRIPT, 2, str(out))
    result = torch.load(out)
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    labels = torch.roll(tokens, -1, 1)
    hidden = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    for name in ("tiny-gpt", "tiny-llama"):
        ref = build_stage(name, 0, 7, dtype=torch.float64)
        loss = ref(tokens, labels)
        loss.backward()
        got_loss, grads, seen = result[name]
        # every norm inside the blocks and the head's saw half of the 16 tokens
        assert seen and all(n == 8 for n in seen), seen
        torch.testing.assert_close(got_loss, loss.detach(), rtol=1e-12, atol=0)
        for n, p in ref.named_parameters():
            torch.testing.assert_close(grads[n], p.grad, rtol=1e-9, atol=1e-12, msg=n)

        mid = build_stage(name, 2, 5, dtype=torch.float64)
        x = hidden.clone().requires_grad_(True)
        y = mid(x)
        y.pow(2).sum().backward()
        got_y, got_xgrad, grads = result[name + "/mid"]
        torch.testing.assert_close(got_y, y.detach(), rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(got_xgrad, x.grad, rtol=1e-9, atol=1e-12)
        for n, p in mid.named_parameters():
            torch.testing.assert_close(grads[n], p.grad, rtol=1e-9, atol=1e-12, msg=n)
