"""Memory saving of each execution option, measured on CPU, next to the simulator's memory term.

    uv run python bench/engine_options_memory.py [--bar 0.25]

tiny-llama (RMSNorm, RoPE, SwiGLU, GQA), global batch 8, sequence 128, trained by the engine
(gloo ranks, ``launch_many``). Each case runs 2 steps; step 2 (AdamW states exist) is measured
on every rank with ``engine.memprobe``: the tensor bytes alive at its start (weights, gradients,
optimizer states) plus the allocator's running peak during the step (torch profiler memory
events). The simulator's side is its memory terms without the framework overhead
(``sailor_sim.memory.memory_terms``, ``ModelSpec.stash_terms``), for the same plan and option.

Saving = peak(baseline) - peak(with the option), per rank. Gap = |measured - predicted| /
|predicted|. Exit 1 when a run fails, when the simulator has no term for an option (missing
data), or when a gap exceeds ``--bar``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import tempfile
from pathlib import Path

from sailor_runtime.engine import launch_many
from sailor_runtime.engine.examples import R
from sailor_sim import memory
from sailor_sim.gpus import get_gpu
from sailor_sim.job import Job
from sailor_sim.model import ModelSpec
from sailor_sim.plan import Plan, Stage

JOB = Job.create("tiny-llama", 8, 128)
ONE = Plan((Stage(0, 7, (R(1, 8, 1),)),))
ACCUM = Plan((Stage(0, 7, (R(1, 2, 4),)),))
DP2 = Plan((Stage(0, 7, (R(1, 4, 1), R(1, 4, 1))),))

# name -> (plan, options, baseline case, what the option is)
CASES: dict[str, tuple[Plan, dict, str | None, str]] = {
    "base": (ONE, {}, None, "fp32, SDPA, no recompute, 1 x mbs 8"),
    "math_attention": (ONE, {"flash_attention": False}, None,
                       "explicit attention (baseline of SDPA)"),
    "sdpa": (ONE, {}, "math_attention", "SDPA instead of the explicit math"),
    "recompute_selective": (ONE, {"recompute": "selective"}, "math_attention",
                            "selective recompute (math attention)"),
    "recompute_full": (ONE, {"recompute": "full"}, "base", "full recompute"),
    "bf16": (ONE, {"precision": "bf16"}, "base", "bf16 autocast, fp32 master"),
    "grad_accumulation": (ACCUM, {}, "base", "4 x mbs 2 instead of 1 x mbs 8"),
    "dp2": (DP2, {}, None, "2 replicas x mbs 4"),
    "zero1": (DP2, {"zero_stage": 1}, "dp2", "ZeRO-1 over the 2 replicas"),
}


def _supports(fn, name: str) -> bool:
    return name in inspect.signature(fn).parameters


def predicted(plan: Plan, opts: dict) -> dict[str, int] | str:
    """The simulator's tensor terms (no framework overhead) of rank 0, or why it has none."""
    spec: ModelSpec = JOB.model
    rep, stage = plan.stages[0].replicas[0], plan.stages[0]
    dtype = opts.get("precision", "fp32")
    kw = {"flash_attention": opts.get("flash_attention", True)}
    if opts.get("recompute", "none") != "none":
        if not _supports(spec.stash_terms, "recompute"):
            return "the simulator has no recompute term (ModelSpec.stash_terms)"
        kw["recompute"] = opts["recompute"]
    act = sum(spec.activation_stash_bytes(lid, rep.microbatch_size, JOB.sequence_length,
                                          dtype, rep.tp, **kw)
              for lid in range(stage.first_layer, stage.last_layer + 1))
    extra = {}
    if opts.get("zero_stage"):
        if not _supports(memory.memory_terms, "zero_stage"):
            return "the simulator has no ZeRO term (memory.memory_terms)"
        extra = {"zero_stage": opts["zero_stage"], "dp": len(stage.replicas)}
    params = sum(spec.params(lid, rep.tp) for lid in range(stage.first_layer,
                                                           stage.last_layer + 1))
    terms = memory.memory_terms(
        gpu=get_gpu("CPU"), dtype=dtype, optimizer=JOB.optimizer, params=params,
        activation_per_microbatch=act,
        in_flight_microbatches=memory.in_flight(0, 1, rep.num_microbatches),
        transient=memory.transient_bytes(spec, stage.last_layer, rep.microbatch_size,
                                         JOB.sequence_length, dtype, rep.tp),
        p2p_buffer=0, communicators=0, **extra)
    terms.pop("framework")
    return terms


def run_all(root: Path) -> dict[str, dict]:
    runs = [{"job": JOB.to_dict(), "plan": plan.to_dict(), "steps": 2, "options": opts,
             "memory_probe_step": 2, "metrics": str(root / f"{name}.jsonl")}
            for name, (plan, opts, _, _) in CASES.items()]
    if launch_many(runs, log_dir=root / "logs"):
        print((root / "logs" / "ranks.log").read_text()[-4000:], file=sys.stderr)
        raise SystemExit(1)
    return {name: json.loads((root / f"{name}.jsonl.rank0.memory.json").read_text())
            for name in CASES}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--bar", type=float, default=0.25, help="largest allowed relative gap")
    a = p.parse_args(argv)
    measured = run_all(Path(tempfile.mkdtemp(prefix="sailor-bench-options-")))
    pred = {name: predicted(plan, opts) for name, (plan, opts, _, _) in CASES.items()}
    MB = 1e6
    print("tiny-llama, gbs 8, seq 128, CPU; tensor bytes of rank 0 at step 2 (MB)")
    print(f"{'case':20} {'measured peak':>13} {'sim peak':>9} {'saving meas':>11} "
          f"{'saving sim':>10} {'gap':>6}  option")
    failed = []
    for name, (_, _, base, what) in CASES.items():
        m = measured[name]["peak"]
        sim = pred[name]
        sim_peak = f"{sum(sim.values()) / MB:9.2f}" if isinstance(sim, dict) else f"{'-':>9}"
        row = f"{name:20} {m / MB:13.2f} {sim_peak}"
        if base is None:
            print(f"{row} {'':>11} {'':>10} {'':>6}  {what}")
            continue
        saving = measured[base]["peak"] - m
        if not isinstance(sim, dict) or not isinstance(pred[base], dict):
            reason = sim if isinstance(sim, str) else pred[base]
            print(f"{row} {saving / MB:11.2f} {'-':>10} {'-':>6}  {what}: MISSING ({reason})")
            failed.append(f"{name}: {reason}")
            continue
        want = sum(pred[base].values()) - sum(sim.values())
        gap = abs(saving - want) / max(abs(want), 1)
        mark = "" if gap <= a.bar else f"  > bar {a.bar:.0%}"
        print(f"{row} {saving / MB:11.2f} {want / MB:10.2f} {gap:6.0%}  {what}{mark}")
        if gap > a.bar:
            failed.append(f"{name}: gap {gap:.0%} > {a.bar:.0%}")
    print("\nmeasured terms (MB):")
    for name in CASES:
        m = measured[name]
        print(f"  {name:20} " + "  ".join(f"{k} {v / MB:.2f}" for k, v in m.items()))
    if failed:
        print("\nFAIL: " + "; ".join(failed))
        return 1
    print(f"\nall savings within {a.bar:.0%} of the simulator")
    return 0


if __name__ == "__main__":
    sys.exit(main())
