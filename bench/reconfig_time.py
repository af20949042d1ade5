"""Reconfiguration time of `sailor run --local`: failure (or join) -> training resumed; and
the measured iteration time of a 4-node, 2-GPU-type local run against the simulator.

Real processes on 127.0.0.1: the planner server, the controller, worker agents, the engine's
ranks (tiny-gpt). Each scenario injects one change mid-run and reads the controller's phase
timings (detect, debounce, plan, place, stop, checkpoint, restart). For a kill -9, "detect" is
measured from the kill itself (not from the node's last heartbeat), and "total" is kill ->
first step of the new generation completed; the "restart" phase is split into "start" and
"first step" (PHASES). Cold agents import nothing before registering: their zygote imports
torch with the first assignment, so a restart forks (fresh rank processes importing torch each
took 16-19 s here; they remain only as the fallback when a zygote dies). Targets: total < 5 s
for every scenario, cold agents included; measured iteration time within 25 % of the planner's
prediction made before training (this machine's profile, stretched by the core sharing
expected from the load before the run; run.profile). The "explained" column re-simulates the
plan after the run with the CPU stretch the ranks were measured to get: it shows what the
sharing accounts for, and is never what the bar checks. Exits 1 when any scenario or
prediction misses its target (and says why).

    uv run python bench/reconfig_time.py [--quick]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from sailor_runtime.run.local import LocalRun, LocalRunConfig

TARGET_S = 5.0
PREDICTION_BAR = 0.25
PHASES = ("detect", "debounce", "plan", "place", "stop", "checkpoint", "start", "first step")
"""The controller's phases, with its "restart" (assignment -> first step reported) split into
"start" (fork or process start, rendezvous, model build, checkpoint load, and the heartbeat that
carries the step) and "first step" (that step's own iteration time, as the rank measured it)."""


def scenario(name: str, workers: int, warm: bool, kill: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="sailor-reconfig-") as tmp:
        cfg = LocalRunConfig.create(
            run_dir=Path(tmp), workers=workers, gpu_types=("CPU",), steps=24 if kill else 80,
            checkpoint_every=4, kill_worker_at_step=6 if kill else None,
            add_worker_at_step=None if kill else 3, global_batch_size=32, seq_len=128,
            heartbeat_timeout_s=5.0, profile=False, progress=False, warm=warm, timeout_s=400,
        )  # fmt: skip
        run = LocalRun(cfg)
        try:
            s = run.run()
        finally:
            run.close()
    # A joining node registers once its warm rank process is ready (seconds), so the join
    # scenario trains longer than the kill ones.
    event = next((e for e in s.events), None)
    recs = [r for r in s.reconfigurations if event and r["noticed_at"] >= event["at"] - 0.01]
    if s.state != "DONE" or not event or not recs or not recs[0]["resumed"]:
        return {"name": name, "ok": False, "note": f"{s.state}: {s.message}"}
    r = recs[0]
    phases = dict(r["phases"])
    if kill:
        phases["detect"] = r["noticed_at"] - event["at"]
    first = next(m for m in s.metrics if m["generation"] == r["generation"])
    phases["first step"] = first["iteration_time_s"]
    phases["start"] = phases.pop("restart") - phases["first step"]
    total = r["resumed_at"] - (event["at"] if kill else r["noticed_at"])
    return {"name": name, "ok": True, "phases": phases, "total": total, "kill": kill,
            "plan": s.plan, "note": r["inventory"]}  # fmt: skip


PREDICTION_RUNS = 3
"""Separate local runs, each profiling the machine afresh: the bar must hold for every one."""


def prediction() -> dict:
    """`sailor run --local --workers 4` (single-threaded cpu-1t ranks): measured vs predicted."""
    with tempfile.TemporaryDirectory(prefix="sailor-predict-") as tmp:
        cfg = LocalRunConfig.create(
            run_dir=Path(tmp), workers=4, gpu_types=("cpu-1t",), steps=60,
            checkpoint_every=20, progress=False, timeout_s=400,
        )  # fmt: skip
        run = LocalRun(cfg)
        try:
            s = run.run()
        finally:
            run.close()
    return s.to_dict()


def why_missed(misses: list[dict]) -> str:
    """The reason a prediction missed, from what the run recorded."""
    lines = ["\nThis machine could not be predicted within the bar:"]
    for p in misses:
        if p["state"] != "DONE":
            lines.append(f"  run ended {p['state']}: {p['message']}")
            continue
        planned, got = p["planned_stretch"], p["cpu_slowdown"]
        explained = abs(p["explained_error"]) <= PREDICTION_BAR
        lines.append(
            f"  predicted {p['prediction_error']:+.0%}: the planner assumed its ranks would be "
            f"stretched {planned:.2f}x by sharing the cores (load sampled before the run); "
            f"they were stretched {got:.2f}x while training. "
            + (
                "With the measured stretch the simulator lands within the bar, so the miss is "
                "the load on this machine changing between planning and training (other "
                "processes come and go), which the load sampled before the run did not foresee."
                if explained
                else "Even the measured stretch leaves the error outside the bar: the per-layer "
                "profile or the link model does not describe this machine's run."
            )
        )
    return "\n".join(lines)


def main() -> int:
    quick = "--quick" in sys.argv
    cases = [("kill -9, 3 nodes, warm ranks", 3, True, True)]
    if not quick:
        cases += [
            ("kill -9, 3 nodes, cold agents", 3, False, True),
            ("join 2 -> 3 nodes, warm ranks", 2, True, False),
            # the one start that cannot fork: the new node's zygote imports torch first
            ("join 2 -> 3 nodes, cold agents", 2, False, False),
        ]
    rows = [scenario(*c) for c in cases]
    print(f"\nReconfiguration time (s), tiny-gpt, target < {TARGET_S:.0f} s")
    head = f"{'scenario':<32}" + "".join(f"{p:>11}" for p in PHASES) + f"{'total':>8}  result"
    print(head)
    print("-" * len(head))  # the phase table: where a re-plan's time goes
    failed = False
    for row in rows:
        if not row["ok"]:
            print(f"{row['name']:<32}  did not complete: {row['note']}")
            failed = True
            continue
        cells = "".join(f"{row['phases'].get(p, 0.0):>11.2f}" for p in PHASES)
        ok = row["total"] < TARGET_S
        failed |= not ok
        print(f"{row['name']:<32}{cells}{row['total']:>8.2f}  {'ok' if ok else 'SLOW'}")
    print("\ntotal = kill -> first step of the new generation (join: noticed -> first step)")
    print("cold = the agents imported nothing before registering (their zygote starts with the")
    print("first assignment); warm = the zygote imported torch before the agent registered")
    print(
        "\nIteration time, sailor run --local --workers 4 --gpu-types cpu-1t, 60 steps, "
        f"{PREDICTION_RUNS} runs (target: each within {PREDICTION_BAR:.0%} of the prediction "
        "made before training)"
    )
    print(
        f"{'plan':<44}{'measured':>10}{'predicted':>11}{'error':>8}{'stretch':>9}"
        f"{'explained':>11}{'error':>8}{'stretch':>9}  result"
    )
    print(f"{'':<44}{'':>10}{'(pre-run)':>11}{'':>8}{'assumed':>9}{'(post-run)':>11}{'':>8}"
          f"{'measured':>9}")  # fmt: skip
    misses = []
    for _ in range(PREDICTION_RUNS):
        p = prediction()
        ok = p["state"] == "DONE" and abs(p["prediction_error"]) <= PREDICTION_BAR
        if not ok:
            misses.append(p)
        print(
            f"{p['plan'][:42]:<44}{p['measured_iteration_s'] * 1e3:>8.1f}ms"
            f"{p['predicted_iteration_s'] * 1e3:>9.1f}ms{p['prediction_error']:>+8.0%}"
            f"{p['planned_stretch']:>9.2f}{p['explained_iteration_s'] * 1e3:>9.1f}ms"
            f"{p['explained_error']:>+8.0%}{p['cpu_slowdown']:>9.2f}  "
            f"{'ok' if ok else 'MISSED'}",
            flush=True,
        )
    if misses:
        failed = True
        print(why_missed(misses))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
