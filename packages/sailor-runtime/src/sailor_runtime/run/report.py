"""What `sailor run` says about a plan: why the planner chose it (per worker type, measured
compute of its share), what the simulator predicts per rank (time, tensor memory) before it
runs, and what each rank measured after (``engine.rank.memprobe``), for the run's execution options.

Predicted memory is the simulator's per-GPU terms without ``framework`` (CUDA context, NCCL
buffers, allocator reserve: none of it is a tensor, and on CPU the engine measures tensors);
measured memory is a rank's live tensors at the probed step plus the allocator's peak during it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sailor_sim import Job, Plan, StageSlice

from ..topology import rank_layout

MB = 1e6


@dataclass(frozen=True)
class RankMemory:
    rank: int
    stage: int
    replica: int
    gpu_type: str
    predicted_bytes: int
    measured_bytes: int | None


def simulator(profile_dir: str):
    from sailor_sim import Simulator

    return Simulator.from_profile_dir(profile_dir)


def why_lines(job: Job, plan: Plan, profile_dir: str, types: list[str]) -> list[str]:
    """Per worker type: the measured compute of one block per sample; per replica: its layers,
    microbatches and compute per iteration on its type (what the planner balanced)."""
    sim = simulator(profile_dir)
    lines = ["  why (measured compute, this machine's profile):"]
    for t in types:
        st = sim.stage_time(job, StageSlice(1, 1, t, 1, 1))
        ms = (st.forward_s + st.backward_s) * 1e3
        lines.append(f"    {t:8} one block, one sample: {ms:7.2f} ms forward+backward")
    for i, stage in enumerate(plan.stages):
        for j, rep in enumerate(stage.replicas):
            st = sim.stage_time(job, StageSlice.of(stage, rep))
            busy = st.per_microbatch_s * rep.num_microbatches
            lines.append(
                f"    stage {i} replica {j} on {rep.gpu_type:8} layers {stage.first_layer}-"
                f"{stage.last_layer}, {rep.num_microbatches} x mbs {rep.microbatch_size}: "
                f"{busy * 1e3:7.1f} ms of compute per iteration"
            )
    return lines


def predicted_memory(job: Job, plan: Plan, profile_dir: str) -> dict[tuple[int, int], int]:
    """(stage, replica) -> predicted tensor bytes of one of its GPUs."""
    est = simulator(profile_dir).estimate(job, plan)
    return {
        (m.stage, m.replica): sum(v for k, v in m.breakdown_bytes.items() if k != "framework")
        for m in est.memory
    }


def measured_memory(run_dir: Path, generation: int) -> dict[int, dict]:
    """rank -> what the rank's memory probe wrote in ``generation`` (absent: not yet run)."""
    out = {}
    for path in run_dir.glob(f"workers/*/gen-{generation}/rank-*.metrics.jsonl.rank*.memory.json"):
        try:
            rank = int(path.name.rsplit(".rank", 1)[1].split(".")[0])
            out[rank] = json.loads(path.read_text())
        except (OSError, ValueError, IndexError):
            continue
    return out


def rank_memory(
    job: Job, plan: Plan, profile_dir: str, run_dir: Path, generation: int
) -> list[RankMemory]:
    pred = predicted_memory(job, plan, profile_dir)
    meas = measured_memory(run_dir, generation)
    return [
        RankMemory(
            r.rank,
            r.stage,
            r.replica,
            r.gpu_type,
            pred[(r.stage, r.replica)],
            meas.get(r.rank, {}).get("peak"),
        )
        for r in rank_layout(plan)
    ]


def memory_lines(rows: list[RankMemory], options: str) -> list[str]:
    if all(m.measured_bytes is None for m in rows):  # before training: the prediction only
        return [f"  tensor memory per rank ({options}), predicted:"] + [
            f"    rank {m.rank} (stage {m.stage} replica {m.replica}, {m.gpu_type:8}) "
            f"{m.predicted_bytes / MB:8.2f} MB"
            for m in rows
        ]
    lines = [f"  tensor memory per rank ({options}): predicted -> measured"]
    for m in rows:
        got = (
            f"{m.measured_bytes / MB:8.2f} MB"
            if m.measured_bytes is not None
            else "   (not measured)"
        )
        err = (
            f" ({m.measured_bytes / m.predicted_bytes - 1:+.0%})"
            if m.measured_bytes is not None and m.predicted_bytes
            else ""
        )
        lines.append(
            f"    rank {m.rank} (stage {m.stage} replica {m.replica}, {m.gpu_type:8}) "
            f"{m.predicted_bytes / MB:8.2f} MB -> {got}{err}"
        )
    return lines


def rerun_lines(metrics: list[dict], plans: dict[int, str]) -> list[str]:
    """Steps trained again after a resume (they ran after the last checkpoint before a
    failure): the loss of each re-run against its first run, bit for bit. Under the same plan
    the engine is deterministic, so they must be equal; under another plan the summation order
    differs, so only the relative difference is reported. ``plans``: generation -> plan."""
    first: dict[int, dict] = {}
    reruns: list[tuple[dict, dict]] = []
    for m in metrics:
        if m["step"] in first and first[m["step"]]["generation"] != m["generation"]:
            reruns.append((first[m["step"]], m))
        first.setdefault(m["step"], m)
    if not reruns:
        return []
    lines = ["  steps re-run after the resume (loss: first run -> re-run):"]
    for a, b in reruns:
        same_plan = plans.get(a["generation"]) == plans.get(b["generation"])
        verdict = (
            "bit-identical"
            if a["loss"] == b["loss"]
            else f"differs by {abs(b['loss'] / a['loss'] - 1):.1e} relative"
        )
        lines.append(
            f"    step {a['step']:>3}: gen {a['generation']} {a['loss']!r} -> gen "
            f"{b['generation']} {b['loss']!r}  {verdict}"
            f"{'' if same_plan else ' (another plan: other summation order)'}"
        )
    return lines
