"""No per-microbatch or per-parameter host synchronisation on the step path (issue 14, item 4).

On CUDA, every Python-level read of a tensor's value (``.item()``, ``.tolist()``, ``float()``,
``.cpu()``, ...) waits for the device. One real rank (gloo, world 1) trains with the CUDA path's
optimizer (torch's fused AdamW) and bf16 autocast; every such call made during ``train`` is
counted. The count per step must be one (the loss and gradient norm, read back together after
the world all-reduce), whatever the number of microbatches. Reads inside torch's C++ ops are not
seen here; this guards the engine's own Python code.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from sailor_runtime.engine import TrainConfig
from sailor_runtime.engine.examples import JOBS, R
from sailor_runtime.engine.rank.train import train
from sailor_sim.spec.plan import Plan, Stage
from sailor_testing import free_port

READS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")


def count_reads(monkeypatch, steps: int, microbatches: int) -> Counter:
    plan = Plan((Stage(0, 7, (R(1, 8 // microbatches, microbatches),)),))
    cfg = TrainConfig.for_job(
        job=JOBS["llama"],
        plan=plan,
        steps=steps,
        optimizer_impl="torch-fused",
        precision="bf16",
        master_port=free_port(),
        store_prefix=f"reads{steps}x{microbatches}",
    )
    seen: Counter = Counter()
    with monkeypatch.context() as m:
        for name in READS:
            original = getattr(torch.Tensor, name)

            def counted(self, *args, _name=name, _original=original, **kwargs):
                seen[_name] += 1
                return _original(self, *args, **kwargs)

            m.setattr(torch.Tensor, name, counted)
        result = train(JOBS["llama"], plan, 0, 1, cfg)
    assert result.final_step == steps
    return seen


@pytest.mark.timeout(300)
def test_one_readback_per_step_whatever_the_microbatches(monkeypatch):
    base = count_reads(monkeypatch, 1, 1)
    more_steps = count_reads(monkeypatch, 3, 1)
    more_micro = count_reads(monkeypatch, 3, 4)
    per_step = sum(more_steps.values()) - sum(base.values())
    assert per_step == 2, (base, more_steps)  # two more steps: one readback each
    assert more_steps["tolist"] == 3 + 1, more_steps  # per step, + the data order (per epoch)
    assert more_micro == more_steps, (more_steps, more_micro)
