"""`sailor run --local --trace FILE`: an elastic local run driven by an availability trace, next to
the replay's prediction for it.

The trace (sailor-planner's format, zone ``local``, GPU types the workers emulate) is replayed in
wall-clock time divided by ``time_scale``: at each state the driver starts workers of a type
that gained GPUs, and stops workers of a type that lost some: gracefully (SIGTERM: the agent
leaves) or, for rows with ``preempted``, with a kill -9. The controller re-plans at each change,
as it always does.

The trace starts once the first generation has trained through a calibration window
(``run/calibrate.py``): it measures this machine's figures of the runtime's phases (the ranks'
CPU stretch, wall seconds per step with checkpoint saves, restart and place times, an agent's
start time and CPU seconds). Then, before the trace's first change, the replay predicts
the samples the run will have trained by the trace's end (policy ``every-change``: what the
controller does; the first plan already running; the reconfiguration model with those measured
phases), and at the end the run's progress (trained steps x global batch since the trace
started) is compared with it. The run's load (runnable processes) is sampled through every
state, next to the calibration's: other work on the machine is what the prediction cannot know.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from sailor_planner import (
    EVERY_CHANGE,
    AvailabilityTrace,
    ReconfigModel,
    ReplayRequest,
    SearchOptions,
    TraceState,
    planner_for,
)
from sailor_planner import replay_trace as replay

from ..controller.state import ControllerState
from ..errors import SailorRuntimeError
from .calibrate import Calibration, Window, agent_cpu_seconds
from .local import LocalRun, LocalRunConfig
from .processes import start_worker
from .profile import cores, machine_profile, rank_pids, runnable_now

WARMUP_STEPS = 5
"""Steps the first generation trains before the calibration window opens (its first steps are
slower: caches, allocator)."""


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
    """Median iteration time of the steps trained during the trace (all generations)."""
    predicted_reconfigure_s: float
    """Training stopped for reconfigurations, replay (detect + debounce + plan + ... + restart)."""
    measured_reconfigure_s: float
    """The same in the run: detect + (change noticed -> first step of the new generation)."""
    calibration: Calibration
    """This machine's figures measured before the trace (``run/calibrate.py``)."""
    per_state: tuple[tuple[float, float], ...] = ()
    """(predicted, measured) samples trained in each state of the trace."""
    runnable: tuple[float, ...] = ()
    """Mean runnable processes on the machine in each state (the calibration assumed
    ``calibration.runnable``)."""
    worker_events: tuple[tuple[str, str, int], ...] = ()
    """What happened to the workers during the trace, in order: (``leave`` / ``preempted`` /
    ``join``, or a failure injected by the run, worker name, the controller's step then)."""

    @property
    def boot_s(self) -> float:
        return self.calibration.boot_s

    @property
    def stretch(self) -> float:
        return self.calibration.stretch

    @property
    def error(self) -> float:
        return self.measured_samples / self.predicted_samples - 1 if self.predicted_samples else 0.0

    def to_dict(self) -> dict:
        return {
            **self.__dict__,
            "calibration": self.calibration.to_dict(),
            "per_state": [list(p) for p in self.per_state],
            "runnable": list(self.runnable),
            "worker_events": [list(e) for e in self.worker_events],
            "error": self.error,
        }


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


NEVER_STEPS = 10**12
"""The checkpoint interval, in steps, of a run that never checkpoints."""


@dataclass(frozen=True)
class Prediction:
    samples: float
    reconfigurations: int
    reconfigure_s: float
    iteration_s: float
    per_state: tuple[float, ...]


def reconfig_model(run: LocalRun, cal: Calibration, iteration_s: float) -> ReconfigModel:
    """The replay's reconfiguration model with this machine's measured phases."""
    # Without checkpoints every change restarts from step 0: an interval longer than any trace.
    every = run.cfg.checkpoint_every or NEVER_STEPS
    checkpoint_interval_s = every * iteration_s
    # Per checkpoint interval, what the warm-up's steps took beyond the simulator's iterations.
    stall_s = max(1e-3, every * (cal.wall_step_s - iteration_s))
    defaults = ReconfigModel()
    return ReconfigModel(
        debounce_s=run.cfg.debounce_s,
        place_stop_s=cal.place_stop_s,
        restart_s=cal.restart_s,
        save_bytes_per_s=defaults.checkpoint_bytes(run.job) / stall_s,
        checkpoint_interval_s=checkpoint_interval_s,
        provision_s=cal.boot_s,
        provision_stall_s=min(cal.boot_s, cal.provision_stall_s),
    )


def predict(run: LocalRun, trace: AvailabilityTrace, cal: Calibration) -> Prediction:
    """The replay's prediction for ``trace`` from now on, with the plan already running."""
    folder = machine_profile(
        run.cfg.run_dir, run.job, run.gpu_types, cal.stretch, "profile-replay", run.cfg.workers
    )
    planner = planner_for(folder, None)
    # The job's own options, as the run trains (and as the replay below plans).
    options = SearchOptions(search_execution_options=False)
    first = planner.plan(run.job, trace.states[0].inventory, options)
    iteration_s = first.best.estimate.iteration_time_s
    model = reconfig_model(run, cal, iteration_s)
    request = ReplayRequest(run.job, trace, reconfig=model, policies=(EVERY_CHANGE,), started=True)
    result = replay(planner, request)
    s = result.summaries[0]
    per_state = tuple(e.samples for e in result.events)
    return Prediction(s.samples, s.reconfigurations, s.reconfigure_s, iteration_s, per_state)


class TraceDriver:
    """``LocalRun.run``'s tick hook: warm-up, prediction, then the trace's state of the current
    wall time."""

    def __init__(self, run: LocalRun, trace: AvailabilityTrace) -> None:
        self.run, self.trace = run, trace
        self.launched = time.monotonic()
        self.window: Window | None = None
        self.calibration: Calibration | None = None
        self.start: float | None = None
        self.start_step = 0
        self.prediction: Prediction | None = None
        self.applied = 0
        self.ended_step: int | None = None
        self.boundaries: list[int] = []  # trained step at each state's start, and at the end
        self.runnable: list[list[float]] = []  # load samples per state

    def __call__(self, run: LocalRun) -> None:
        now = time.monotonic()
        if self.start is None:
            self._warm_up(run, now)
            return
        t = now - self.start
        if t >= self.trace.duration_s:
            self.ended_step = run.trained_step()
            self.boundaries.append(self.ended_step)
            raise _TraceEnded
        self.runnable[self.applied].append(runnable_now())
        index = max(i for i, s in enumerate(self.trace.states) if s.start_s <= t)
        while self.applied < index:
            self.applied += 1
            self.boundaries.append(run.trained_step())
            self.runnable.append([])
            self._apply(self.trace.states[self.applied])

    def _warm_up(self, run: LocalRun, now: float) -> None:
        """Train WARMUP_STEPS, then the calibration window; then predict and start the trace."""
        c = run.controller
        if c.state != ControllerState.RUNNING or not c.reconfigurations:
            return
        if not c.reconfigurations[0].resumed or not run.cpu_share.last:
            return
        step = run.trained_step()
        if self.window is None:
            if step >= WARMUP_STEPS:
                self.window = Window(now, step, run.cpu_share)
            return
        self.window.runnable.append(runnable_now())
        if not self.window.long_enough(now, step, run.cfg.checkpoint_every):
            return
        self.calibration = self._calibrate(run, now, step)
        self.prediction = predict(run, self.trace, self.calibration)
        self.start, self.start_step = time.monotonic(), run.trained_step()
        self.boundaries, self.runnable = [self.start_step], [[]]

    def _calibrate(self, run: LocalRun, now: float, step: int) -> Calibration:
        first = run.controller.reconfigurations[0]
        ranks = set(rank_pids({w.pid for w in run.workers}, run.controller.generation).values())
        window = self.window
        return Calibration(
            stretch=window.stretch(run.cpu_share),
            wall_step_s=window.wall_step_s(now, step),
            restart_s=first.phases.get("restart", 0.0),
            place_stop_s=first.phases.get("place", 0.0) + first.phases.get("stop", 0.0),
            boot_s=first.noticed_at - self.launched,
            # The least busy agent's start: idle since, so its CPU is (almost) all start-up.
            boot_cpu_s=min(agent_cpu_seconds(w.pid, ranks) for w in run.workers),
            runnable=window.mean_runnable(),
            cores=cores(),
        )

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


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _median_step_s(run: LocalRun, after_step: int) -> float:
    with run.controller._lock:
        metrics = list(run.controller.metrics)
    times = sorted(m["iteration_time_s"] for m in metrics if m["step"] > after_step)
    return times[len(times) // 2] if times else 0.0


class _TraceEnded(SailorRuntimeError):
    """Raised from the tick hook once the trace's time is over (control flow, caught below)."""

    def __init__(self) -> None:
        super().__init__("the availability trace ended")


def run_trace(cfg: LocalRunConfig, trace: AvailabilityTrace, time_scale: float) -> TraceRunResult:
    """Predict with the replay, then run the trace on local workers; compare the samples."""
    wall = scaled(trace, time_scale)
    check_local(wall)
    types = initial_types(wall.states[0])
    # The trace, not a step count, ends the run.
    cfg = replace(cfg, run=replace(cfg.run, steps=10**9), workers=len(types), gpu_types=types,
                  progress=False, timeout_s=wall.duration_s + 600)  # fmt: skip
    run = LocalRun(cfg)
    try:
        driver = TraceDriver(run, wall)
        try:
            run.run(on_tick=driver)
        except _TraceEnded:
            pass
        if driver.ended_step is None or driver.prediction is None:
            raise SailorRuntimeError(
                f"the run ended before the trace did: {run.controller.message}", field="--trace"
            )
        p = driver.prediction
        steps = driver.ended_step - driver.start_step
        recs = [r for r in run.controller.reconfigurations if r.noticed_at >= driver.start]
        return TraceRunResult(
            predicted_samples=p.samples,
            measured_samples=steps * run.job.global_batch_size,
            trace_wall_s=wall.duration_s,
            steps=steps,
            changes=len(wall.states) - 1,
            reconfigurations=len(recs),
            predicted_reconfigurations=p.reconfigurations,
            predicted_iteration_s=p.iteration_s,
            predicted_reconfigure_s=p.reconfigure_s,
            measured_reconfigure_s=sum(
                r.phases.get("detect", 0.0) + max(0.0, r.resumed_at - r.noticed_at) for r in recs
            ),
            measured_iteration_s=_median_step_s(run, driver.start_step),
            calibration=driver.calibration,
            runnable=tuple(_mean(r) for r in driver.runnable),
            worker_events=tuple(
                (e["event"], e.get("worker", ""), e["step"])
                for e in run.events
                if e["at"] >= driver.start
            ),
            per_state=tuple(
                (predicted, (b - a) * run.job.global_batch_size)
                for predicted, a, b in zip(
                    p.per_state, driver.boundaries, driver.boundaries[1:], strict=False
                )
            ),
        )
    finally:
        run.close()
