"""Engine parts that need no process group: topology, schedule, data, LR, AdamW and the
worker's input errors (checkpoints: ``test_checkpoint_dcp``)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from sailor_runtime.engine import worker
from sailor_runtime.engine.config import TrainConfig
from sailor_runtime.engine.parallel.optim import AdamW, LRSchedule, clip_coefficient
from sailor_runtime.engine.parallel.pipeline import schedule
from sailor_runtime.engine.parallel.topology import Slot, Topology
from sailor_runtime.engine.rank.data import TextDataset, generate_corpus
from sailor_sim import Job, Plan, Replica, Stage


def R(tp, mbs=1, n=8):
    return Replica("CPU", "local", tp, mbs, n)


MIXED = Plan((Stage(0, 1, (R(1), R(4))), Stage(2, 7, (R(2), R(1)))))


def test_rank_order_is_stage_major_then_replica_then_tp():
    topo = Topology(MIXED)
    assert topo.world_size == 8
    slots = [topo.slot(r) for r in range(8)]
    assert slots[0] == Slot(0, 0, 0) and slots[1] == Slot(0, 1, 0) and slots[4] == Slot(0, 1, 3)
    assert slots[5] == Slot(1, 0, 0) and slots[6] == Slot(1, 0, 1) and slots[7] == Slot(1, 1, 0)
    assert topo.tp_ranks(0, 1) == [1, 2, 3, 4]
    assert topo.metrics_rank == 5


def test_dp_groups_pair_each_fine_piece_with_its_owner():
    topo = Topology(MIXED)
    # Stage 0: replica 0 has tp 1 (owns all 4 pieces), replica 1 has tp 4.
    assert [topo.dp_group_ranks(0, f) for f in range(4)] == [[0, 1], [0, 2], [0, 3], [0, 4]]
    assert topo.fine_pieces(Slot(0, 0, 0)) == range(0, 4)
    assert topo.fine_pieces(Slot(0, 1, 2)) == range(2, 3)
    # Stage 1: tp 2 and tp 1.
    assert [topo.dp_group_ranks(1, f) for f in range(2)] == [[5, 7], [6, 7]]


@pytest.mark.parametrize("stages,stage,micro", [(4, 0, 6), (4, 3, 6), (3, 1, 2), (1, 0, 3)])
def test_1f1b_order(stages, stage, micro):
    ops = schedule("1f1b", stages, stage, micro)
    every = [("F", m) for m in range(micro)] + [("B", m) for m in range(micro)]
    assert sorted(ops) == sorted(every)
    warm = min(stages - stage - 1, micro)
    assert all(op == "F" for op, _ in ops[:warm])
    in_flight = peak = 0
    for op, m in ops:
        in_flight += 1 if op == "F" else -1
        peak = max(peak, in_flight)
        if op == "B":
            assert ("F", m) in ops[: ops.index(("B", m))]
    assert peak == min(stages - stage, micro)  # 1F1B bounds the stashed microbatches
    assert schedule("gpipe", stages, stage, micro)[:micro] == [("F", m) for m in range(micro)]
    with pytest.raises(ValueError, match="1f1b"):
        schedule("zigzag", stages, stage, micro)


def test_data_order_is_deterministic_and_resumable():
    data = TextDataset(32, seed=0)
    x, y = data.batch(0, 8)
    x2, y2 = data.batch(5, 3)
    assert torch.equal(x[5:], x2) and torch.equal(y[5:], y2)
    assert torch.equal(x[:, 1:], y[:, :-1])  # labels are inputs shifted by one
    assert torch.equal(TextDataset(32, seed=0).batch(3, 2)[0], x[3:5])
    assert not torch.equal(TextDataset(32, seed=1).batch(0, 8)[0], x)
    # The next epoch is a different permutation of the same windows.
    nxt = data.batch(data.num_windows, 8)[0]
    assert not torch.equal(nxt, x)
    assert len(generate_corpus()) == 300_000 and generate_corpus().isascii()


def test_lr_schedule_warms_up_then_decays():
    s = LRSchedule(max_lr=1e-3, min_lr=1e-4, warmup_steps=2, decay_steps=12)
    assert s.lr(0) == pytest.approx(5e-4) and s.lr(1) == pytest.approx(1e-3)
    assert s.lr(7) == pytest.approx(5.5e-4)
    assert s.lr(12) == s.lr(100) == pytest.approx(1e-4)
    assert clip_coefficient(4.0, 1.0) == pytest.approx(0.25, rel=1e-5)
    assert clip_coefficient(0.5, 1.0) == 1.0


def test_adamw_equals_torch_bit_for_bit():
    torch.manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(5, 7)) for _ in range(3)]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    a = AdamW(ours, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    b = torch.optim.AdamW(theirs, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)
    for _ in range(4):
        for p, q in zip(ours, theirs, strict=True):
            g = torch.randn(5, 7)
            p.grad, q.grad = g.clone(), g.clone()
        a.step()
        b.step()
    for p, q in zip(ours, theirs, strict=True):
        assert torch.equal(p, q)
        assert torch.equal(a.state[p]["exp_avg_sq"], b.state[q]["exp_avg_sq"])


def test_worker_rejects_bad_input_with_one_line(tmp_path, capsys, monkeypatch):
    """The rank entry point reads one TrainConfig file; bad input is one line naming the
    field, exit status 2, before any process group or checkpoint directory exists."""
    job = Job.create("tiny-gpt", 8, 32)
    good = TrainConfig.for_job(
        job=job,
        plan=Plan((Stage(0, 7, (R(2, 2, 4),)),)),
        steps=1,
        checkpoint_dir=str(tmp_path / "c"),
        master_port=1,
    ).to_dict()
    cases = [  # (config file content, RANK, the field the error must name)
        (None, "0", "config"),
        ("{not json", "0", "config"),
        ({**good, "job": good["plan"]}, "0", "job"),
        ({**good, "dtype": "fp8"}, "0", "dtype"),
        ({**good, "steps": -1}, "0", "steps"),
        ({**good, "world_size": 2}, "0", "config"),  # unknown key: the world is the plan's
        (good, "2", "rank"),
        (good, None, "rank"),
    ]
    if not torch.cuda.is_available():
        cases.append(({**good, "backend": "nccl"}, "0", "backend"))
    for i, (content, rank, field) in enumerate(cases):
        path = tmp_path / f"cfg{i}.json"
        if content is not None:
            path.write_text(content if isinstance(content, str) else json.dumps(content))
        if rank is None:
            monkeypatch.delenv("RANK", raising=False)
        else:
            monkeypatch.setenv("RANK", rank)
        assert worker.main([str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {field}"), (i, err)
    assert worker.main([]) == 2 and "error: argv" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "c")
