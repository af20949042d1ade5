"""`sailor run --local --trace FILE`: an elastic local run driven by an availability trace, next to
the replay's prediction for it.

The trace (sailor-planner's format, zone ``local``, GPU types the workers emulate) is replayed in
wall-clock time divided by ``time_scale``: at each state the driver starts workers of a type
that gained GPUs, and stops workers of a type that lost some: gracefully (SIGTERM: the agent
leaves) or, for rows with ``preempted``, with a kill -9. The controller re-plans at each change,
as it always does. Before the first worker starts, the replay predicts the samples the run will
have trained by the trace's end (policy ``every-change``: what the controller does), with the
planner on this machine's profile and the reconfiguration model's local figures (warm ranks);
at the end the run's trained step x global batch is compared with it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from sailor_planner.policies import EVERY_CHANGE
from sailor_planner.reconfig import ReconfigModel
from sailor_planner.replay import replay
from sailor_planner.request import SearchOptions
from sailor_planner.sources import planner_for
from sailor_planner.trace import AvailabilityTrace, TraceState

from ..errors import SailorRuntimeError
from .local import LocalRun, LocalRunConfig
from .processes import start_worker

RESTART_WARM_S = 0.5
"""Restart with the zygote's warm ranks (bench/reconfig_time.py, runtime README)."""


@dataclass(frozen=True)
class TraceRunResult:
    predicted_samples: float
    measured_samples: float
    trace_wall_s: float
    steps: int
    changes: int
    reconfigurations: int
    predicted_reconfigurations: int
    predicted_iteration_s: float
    """The simulator's iteration time for the first state's plan (this machine's profile)."""
    measured_iteration_s: float
    """Median iteration time of the steps trained (all generations)."""

    @property
    def error(self) -> float:
        return self.measured_samples / self.predicted_samples - 1 if self.predicted_samples else 0.0

    def to_dict(self) -> dict:
        return {**self.__dict__, "error": self.error}


def scaled(trace: AvailabilityTrace, time_scale: float) -> AvailabilityTrace:
    """The trace in wall-clock seconds: every time divided by ``time_scale``."""
    if not time_scale > 0:
        raise SailorRuntimeError(f"must be > 0, got {time_scale}", field="--time-scale")
    states = tuple(
        replace(s, start_s=s.start_s / time_scale, duration_s=s.duration_s / time_scale)
        for s in trace.states
    )
    return AvailabilityTrace(states, trace.source)


def check_local(trace: AvailabilityTrace) -> None:
    for gpu_type, zone in trace.pools:
        if zone != "local":
            raise SailorRuntimeError(
                f"pool {gpu_type}@{zone}: a local run has only zone 'local'; write the trace "
                "with zone local",
                field="--trace",
            )
    if trace.states[0].inventory.total_gpus == 0:
        raise SailorRuntimeError(
            "the trace starts with no GPUs; start it with some", field="--trace"
        )


def initial_types(state: TraceState) -> tuple[str, ...]:
    """One entry per worker of the first state (``LocalRunConfig.gpu_types`` is cycled)."""
    return tuple(p.gpu_type for p in state.inventory.pools for _ in range(p.count))


def predict(
    run: LocalRun, trace: AvailabilityTrace, checkpoint_every: int
) -> tuple[float, int, float]:
    """Samples the replay expects by the trace's end, its number of reconfigurations, and the
    first plan's iteration time."""
    planner = planner_for(str(run.profile_dir) if run.profile_dir else None, None)
    first = planner.plan(run.job, trace.states[0].inventory, SearchOptions())
    model = ReconfigModel(
        debounce_s=run.cfg.debounce_s,
        restart_s=RESTART_WARM_S if run.cfg.warm else ReconfigModel().restart_s,
        checkpoint_interval_s=checkpoint_every * first.best.estimate.iteration_time_s,
    )
    result = replay(planner, run.job, trace, SearchOptions(), model, (EVERY_CHANGE,))
    s = result.summaries[0]
    return s.samples, s.reconfigurations, first.best.estimate.iteration_time_s


class TraceDriver:
    """``LocalRun.run``'s tick hook: applies the trace's state of the current wall time."""

    def __init__(self, run: LocalRun, trace: AvailabilityTrace) -> None:
        self.run, self.trace = run, trace
        self.start: float | None = None
        self.applied = 0
        self.ended_step: int | None = None

    def __call__(self, run: LocalRun) -> None:
        now = time.monotonic()
        self.start = self.start if self.start is not None else now
        t = now - self.start
        if t >= self.trace.duration_s:
            self.ended_step = run.trained_step()
            raise _TraceEnded
        index = max(i for i, s in enumerate(self.trace.states) if s.start_s <= t)
        while self.applied < index:
            self.applied += 1
            self._apply(self.trace.states[self.applied])

    def _alive(self, gpu_type: str):
        return [w for w in self.run.workers if w.gpu_type == gpu_type and w.popen.poll() is None]

    def _apply(self, state: TraceState) -> None:
        preempted = {g for g, _, _ in state.preempted}
        types = {p.gpu_type for p in state.inventory.pools} | {w.gpu_type for w in self.run.workers}
        for gpu_type in sorted(types):
            alive = self._alive(gpu_type)
            want = state.inventory.count(gpu_type, "local")
            for w in alive[want:]:
                (w.kill if gpu_type in preempted else w.terminate)()
                self._note("preempted" if gpu_type in preempted else "leave", w.name)
            for _ in range(want - len(alive)):
                self._start(gpu_type)

    def _start(self, gpu_type: str) -> None:
        cfg = self.run.cfg
        w = start_worker(
            f"worker-{len(self.run.workers)}", self.run.address, gpu_type, cfg.zone, cfg.run_dir,
            token=cfg.token, warm=cfg.warm,
        )  # fmt: skip
        self.run.workers.append(w)
        self._note("join", w.name)

    def _note(self, event: str, worker: str) -> None:
        self.run.events.append(
            {"event": event, "worker": worker, "at": time.monotonic(), "step": self.run.step}
        )


def _median_step_s(run: LocalRun) -> float:
    with run.controller._lock:
        times = sorted(m["iteration_time_s"] for m in run.controller.metrics)
    return times[len(times) // 2] if times else 0.0


class _TraceEnded(Exception):
    """Raised from the tick hook once the trace's time is over."""


def run_trace(cfg: LocalRunConfig, trace: AvailabilityTrace, time_scale: float) -> TraceRunResult:
    """Predict with the replay, then run the trace on local workers; compare the samples."""
    wall = scaled(trace, time_scale)
    check_local(wall)
    types = initial_types(wall.states[0])
    # The trace, not a step count, ends the run.
    cfg = replace(cfg, workers=len(types), gpu_types=types, steps=10**9, progress=False,
                  timeout_s=wall.duration_s + 600)  # fmt: skip
    run = LocalRun(cfg)
    try:
        predicted, predicted_reconfigs, iteration_s = predict(run, wall, cfg.checkpoint_every)
        driver = TraceDriver(run, wall)
        try:
            run.run(on_tick=driver)
        except _TraceEnded:
            pass
        if driver.ended_step is None:
            raise SailorRuntimeError(
                f"the run ended before the trace did: {run.controller.message}", field="--trace"
            )
        return TraceRunResult(
            predicted_samples=predicted,
            measured_samples=driver.ended_step * run.job.global_batch_size,
            trace_wall_s=wall.duration_s,
            steps=driver.ended_step,
            changes=len(wall.states) - 1,
            reconfigurations=len(run.controller.reconfigurations),
            predicted_reconfigurations=predicted_reconfigs,
            predicted_iteration_s=iteration_s,
            measured_iteration_s=_median_step_s(run),
        )
    finally:
        run.close()
