"""`sailor run --local`: planner server, controller and N worker agents on this machine.

The controller runs in this process (threads, real gRPC on 127.0.0.1), the planner server in a
child process (`sailor-planner serve`), and each worker agent is a child process (`sailor
worker`) that may emulate its own GPU type, so a failure can be injected with a real kill -9.
The run ends when every rank of the last generation exits 0; the summary puts the measured
iteration time of the plan that ran next to the planner's prediction for it, made before that
generation trained (this machine's profile, stretched by the core sharing expected before the
run). A second, labelled "explained" figure re-simulates the plan with the CPU stretch the ranks
were measured to get while training: it says how much of the error the sharing accounts for, and
is never the reported prediction.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sailor_sim import Job, RunSpec

from ..agent.cputypes import cpu_worker_type
from ..controller.controller import Controller, ControllerConfig, split_run_settings
from ..controller.metricslog import METRICS_FILE, read_metrics
from ..controller.service import create_controller_server
from ..controller.state import ControllerState
from ..engine.backend import is_cpu_type
from ..engine.config import RunViews
from .processes import LocalWorker, start_planner, start_worker
from .profile import CpuShare, contention, machine_profile, rank_pids, sample_runnable
from .report import memory_lines, rank_memory, rerun_lines, why_lines
from .summary import (
    Progress,
    RunSummary,
    eval_losses,
    measured_iteration_time,
    throughput_figures,
)

log = logging.getLogger("sailor.run")


LOCAL_RUN = RunSpec(model="tiny-gpt", global_batch_size=16, seq_len=64, steps=20,
                    checkpoint_every=5)  # fmt: skip
"""The run a ``LocalRunConfig`` trains unless given one: a tiny model, briefly, on CPUs."""


@dataclass(frozen=True)
class LocalRunConfig(RunViews):
    run_dir: Path
    run: RunSpec = LOCAL_RUN
    """The run's settings (model, batch, sequence, precision, options, steps, checkpointing,
    seed, recipe): every node gets them as one message, and ``model`` ... ``options`` below
    are views of them."""
    workers: int = 4
    gpu_types: tuple[str, ...] = ("CPU",)
    """GPU type per worker, cycled when shorter than ``workers``."""
    zone: str = "local"
    kill_worker_at_step: int | None = None
    kill_rank_at_step: int | None = None
    """kill -9 of the highest rank's process (its node lives on) once this step is reached."""
    add_worker_at_step: int | None = None
    heartbeat_interval_s: float = 0.5
    heartbeat_timeout_s: float = 3.0
    debounce_s: float = 1.0
    profile: bool = True
    on_save_error: str = "stop"
    """A checkpoint that cannot be written: 'stop' the run or 'continue' without saving."""
    progress: bool = True
    timeout_s: float = 900.0
    token: str | None = None
    planner_address: str = ""
    """An external planner server; "" = start one as a child process."""
    warm: bool = True
    """Agents fork ranks from a zygote with torch imported (fast restarts, agent.zygote)."""
    precision_reason: str = ""
    """Why the run trains in ``run.precision`` (the summary says it); "" = not given."""
    training: dict = field(default_factory=dict)
    """The data of every rank (``run.recipeopts.training_json``); {} = the generated corpus."""

    @classmethod
    def from_run(cls, run: RunSpec, **rest) -> LocalRunConfig:
        """The config of a local run of ``run`` (the rest from ``rest``); options the engine
        does not run are refused here, naming the field and the fix."""
        from ..engine.options import check_run

        check_run(run)  # raises OptionsError
        return cls(run=run, **rest)

    @classmethod
    def create(cls, run_dir: Path, **settings) -> LocalRunConfig:
        """A local run (tests, benches): ``settings`` that are RunSpec fields (and ``lr``)
        replace ``LOCAL_RUN``'s, the rest are this config's fields."""
        run, rest = split_run_settings(LOCAL_RUN, settings)
        return cls.from_run(run, run_dir=run_dir, **rest)

    @property
    def model(self) -> str:
        return self.run.model

    @property
    def global_batch_size(self) -> int:
        return self.run.global_batch_size

    @property
    def sequence_length(self) -> int:
        return self.run.seq_len or self.run.job().sequence_length

    def gpu_type_of(self, i: int) -> str:
        return self.gpu_types[i % len(self.gpu_types)]


class LocalRun:
    """The pieces of one local run; `run()` drives it to the end and returns the summary."""

    def __init__(self, cfg: LocalRunConfig) -> None:
        self.cfg = cfg
        cfg.run_dir.mkdir(parents=True, exist_ok=True)
        self.job = Job.create(
            cfg.model, cfg.global_batch_size, cfg.sequence_length, cfg.run.precision or "fp32",
            "adam", cfg.options,
        )  # fmt: skip
        types = sorted({cfg.gpu_type_of(i) for i in range(cfg.workers + 1)})
        self.gpu_types = types
        self.cpu_share = CpuShare()
        """Run-queue waits of the ranks while the last generation trained (run.profile)."""
        self.profile_dir = ""
        self.planned_stretch = 1.0
        """The core-sharing stretch the planner's profile assumes (known before training)."""
        if cfg.profile:
            self.runnable_before = sample_runnable()
            self.planned_stretch = contention(self.runnable_before + cfg.workers)
            self.profile_dir = machine_profile(
                cfg.run_dir, self.job, types, self.planned_stretch, "profile-plan", cfg.workers
            )
        self.planner = None if cfg.planner_address else start_planner(cfg.run_dir)
        self.planner_address = cfg.planner_address or self.planner.address
        self.controller = Controller(
            ControllerConfig.from_run(
                cfg.run,
                self.job,
                run_dir=cfg.run_dir,
                planner_address=self.planner_address,
                profile_dir=str(self.profile_dir),
                min_workers=cfg.workers,
                heartbeat_interval_s=cfg.heartbeat_interval_s,
                heartbeat_timeout_s=cfg.heartbeat_timeout_s,
                debounce_s=cfg.debounce_s,
                training=_with_sample_log(cfg.training, cfg.run_dir),
                token=cfg.token,
                on_save_error=cfg.on_save_error,
            )
        )
        self.server, port = create_controller_server(self.controller, "127.0.0.1:0", cfg.token)
        self.server.start()
        self.controller.start()
        self.address = f"127.0.0.1:{port}"
        self._load_generation = 0
        self._announced = -1
        self._next_core = 0
        """First core of the next worker's ranks: workers take consecutive cores (wrapping)."""
        self.why: list[str] = []
        self.options = _describe_options(cfg.run)
        self.slowdown = 1.0
        self.workers: list[LocalWorker] = []
        self.events: list[dict] = []
        self._t0 = time.monotonic()
        self._started_at = time.time()

    def add_worker(self) -> LocalWorker:
        i = len(self.workers)
        gpu = not is_cpu_type(self.cfg.gpu_type_of(i))  # one GPU of this machine per worker
        w = start_worker(
            f"worker-{i}",
            self.address,
            self.cfg.gpu_type_of(i),
            self.cfg.zone,
            self.cfg.run_dir,
            token=self.cfg.token,
            warm=self.cfg.warm,
            first_core=self._next_core,
            cuda_devices=str(sum(not is_cpu_type(x.gpu_type) for x in self.workers))
            if gpu
            else None,
        )
        kind = cpu_worker_type(self.cfg.gpu_type_of(i))
        self._next_core += kind.threads if kind else 1
        self.workers.append(w)
        return w

    def kill_a_worker(self, step: int | None = None) -> LocalWorker:
        """kill -9 the worker that runs the highest rank of the current generation."""
        placement = self.controller.placement
        victim_id = max(placement, key=lambda w: max(r for r, _ in placement[w]))
        victim = next(w for w in self.workers if w.name == victim_id)
        victim.kill()
        self.events.append(
            {
                "event": "kill -9",
                "worker": victim.name,
                "at": time.monotonic(),
                "step": self.step if step is None else step,
            }
        )
        return victim

    def kill_a_rank(self, step: int) -> None:
        """kill -9 the process of the highest rank of the current generation (a crash; the
        node and its agent live on, so the re-plan sees the same GPUs)."""
        ranks = rank_pids(
            {w.pid for w in self.workers if w.popen.poll() is None}, self.controller.generation
        )
        if not ranks:
            return
        rank = max(ranks)
        os.kill(ranks[rank], signal.SIGKILL)
        self.events.append({"event": f"kill -9 rank {rank}", "at": time.monotonic(), "step": step})

    @property
    def step(self) -> int:
        return self.controller.step

    def trained_step(self) -> int:
        """The newest step the current generation finished, read from its metrics file (the
        controller hears of it only with the next heartbeat, several steps later)."""
        gen = self.controller.generation
        newest = self.step
        for path in self.cfg.run_dir.glob(f"workers/*/gen-{gen}/rank-*.metrics.jsonl"):
            try:
                with open(path, "rb") as f:
                    f.seek(max(0, f.seek(0, 2) - 4096))
                    lines = f.read().split(b"\n")
                newest = max(newest, json.loads(lines[-2])["step"])
            except (OSError, ValueError, IndexError, KeyError):
                continue  # not written yet, or a line being written
        return newest

    def _inject(self, done: dict[str, int]) -> None:
        """Kill a rank, kill a worker or add a worker once its step is reached (checked every
        tick, so each lands within a step or two of the one asked for). ``done`` maps each
        injection made to its generation. Each flag is tracked on its own: one shared
        "killed" flag made `--kill-rank-at-step 3 --kill-worker-at-step 7` kill only the
        worker, and drop the rank kill without a word."""
        c = self.cfg
        wanted = [
            (step, name)
            for name, step in (
                ("rank", c.kill_rank_at_step),
                ("worker", c.kill_worker_at_step),
                ("add", c.add_worker_at_step),
            )
            if step and name not in done
        ]
        if not wanted or self.controller.state != ControllerState.RUNNING:
            return
        s = self.trained_step()
        gen = self.controller.generation
        for step, name in sorted(wanted):
            if s < step:
                break
            # A second kill waits for the generation after the first one's: two kills in one
            # generation would be one failure to the controller, and the second could hit a
            # rank already gone.
            if name != "add" and any(g >= gen for n, g in done.items() if n != "add"):
                continue
            if name == "worker":
                self.kill_a_worker(s)
            elif name == "rank":
                self.kill_a_rank(s)
            else:
                w = self.add_worker()
                self.events.append(
                    {"event": "join", "worker": w.name, "at": time.monotonic(), "step": s}
                )
            done[name] = gen

    def run(self, on_tick: Callable[[LocalRun], None] | None = None) -> RunSummary:
        """Start the workers and poll until the run ends; ``on_tick(self)`` runs every poll
        (tests use it to inject changes)."""
        for _ in range(self.cfg.workers):
            self.add_worker()
        progress = Progress(self.cfg.steps, self.cfg.progress)
        injected: dict[str, int] = {}
        deadline = self._t0 + self.cfg.timeout_s
        tick = 0
        try:
            while not self.controller.finished and time.monotonic() < deadline:
                time.sleep(0.05)
                self._inject(injected)
                if self._all_workers_gone():
                    break  # every node is gone (e.g. refused at registration): no use waiting
                tick += 1
                if tick % 4:
                    continue
                self._sample_load()
                self._announce_plan()
                if on_tick:
                    on_tick(self)
                c = self.controller
                progress.update(self.step, c.last_loss, c.generation, c.state.name, self._last())
        finally:
            c = self.controller
            progress.close(self.step, c.last_loss, c.generation, c.state.name, self._last())
        return self.summary()

    def summary(self) -> RunSummary:
        c = self.controller
        state = c.state.name if c.finished else "TIMED_OUT"
        message = c.message
        if not c.finished and self._all_workers_gone():
            state = "FAILED"
            message = f"every worker exited before the run finished; see {self.cfg.run_dir}/logs"
        # The planner's estimate for the plan of the last generation, returned with the plan,
        # i.e. before any rank of that generation trained.
        predicted = c.reconfigurations[-1].predicted_iteration_s if c.reconfigurations else 0.0
        explained = self.explain(c.plan) if c.plan is not None and self.profile_dir else 0.0
        # Every figure from the run folder's metrics file (what a plotting tool reads too).
        # (Those of this invocation: a resumed run folder holds the earlier ones too.)
        metrics = [m for m in read_metrics(self.cfg.run_dir / METRICS_FILE)
                   if m.get("time", 0) >= self._started_at]  # fmt: skip
        summary = RunSummary(
            state=state,
            steps=c.step,
            target_steps=self.cfg.steps,
            first_loss=metrics[0]["loss"] if metrics else 0.0,
            final_loss=metrics[-1]["loss"] if metrics else 0.0,
            plan=c.plan.describe() if c.plan else "",
            measured_iteration_s=measured_iteration_time(metrics, c.generation),
            predicted_iteration_s=predicted,
            planned_stretch=self.planned_stretch,
            explained_iteration_s=explained,
            wall_s=time.monotonic() - self._t0,
            cpu_slowdown=self.slowdown,
            reconfigurations=[r.to_dict() for r in c.reconfigurations],
            events=self.events,
            metrics=metrics,
            message=message,
            options=self.options,
            precision=self.precision_line(),
            why=self.why,
            rank_memory=self._rank_memory(),
            reruns=rerun_lines(metrics, {r.generation: r.plan_json for r in c.reconfigurations}),
            warnings=self._unused_join(),
            eval_losses=eval_losses(metrics),
            throughput=throughput_figures(metrics, c.generation, self.job, c.plan, predicted),
        )
        (self.cfg.run_dir / "summary.json").write_text(json.dumps(summary.to_dict(), indent=2))
        return summary

    def _last(self) -> dict:
        """The newest metrics record, with the newest eval loss carried on (for the live line)."""
        with self.controller._lock:
            metrics = self.controller.metrics
            last = dict(metrics[-1]) if metrics else {}
            evals = [m["eval_loss"] for m in metrics[-50:] if m.get("eval_loss") is not None]
        if evals:
            last["eval_loss"] = evals[-1]
        return last

    def _all_workers_gone(self) -> bool:
        return bool(self.workers) and all(w.popen.poll() is not None for w in self.workers)

    def _unused_join(self) -> list[str]:
        """A warning when --add-worker-at-step added no worker, or one no generation used."""
        step = self.cfg.add_worker_at_step
        if not step:
            return []
        joins = [e for e in self.events if e["event"] == "join"]
        if not joins:
            return [f"the worker to add at step {step} was never added: the run ended at step "
                    f"{self.controller.step}"]  # fmt: skip
        name = joins[-1]["worker"]
        if any(name in r.reason for r in self.controller.reconfigurations):
            return []
        if any(name in reason for reason in self.controller.unchanged):
            return [f"{name} joined at step {joins[-1]['step']}; the best plan did not use it, so "
                    "training went on without a restart"]  # fmt: skip
        return [f"{name} joined at step {joins[-1]['step']} but the run ended before a re-plan "
                "could use it"]  # fmt: skip

    def _rank_memory(self) -> list[dict]:
        c = self.controller
        if c.plan is None or not self.profile_dir:
            return []
        rows = rank_memory(self.job, c.plan, self.profile_dir, self.cfg.run_dir, c.generation)
        return [asdict(r) for r in rows]

    def _announce_plan(self) -> None:
        """Before a generation trains: its plan, why, and the simulator's time and memory per
        rank (printed once per generation; ``explain``)."""
        c = self.controller
        if c.plan is None or self._announced == c.generation or not self.profile_dir:
            return
        self._announced = c.generation
        rec = c.reconfigurations[-1] if c.reconfigurations else None
        lines = [f"generation {c.generation}: plan {c.plan.describe()}"]
        if rec is not None:
            lines.append(
                f"  predicted iteration {rec.predicted_iteration_s * 1e3:.1f} ms "
                "(simulator, planning profile)"
            )
        self.why = why_lines(self.job, c.plan, self.profile_dir, self.gpu_types)
        rows = rank_memory(self.job, c.plan, self.profile_dir, self.cfg.run_dir, c.generation)
        lines += self.why + memory_lines(rows, self.options)
        print("\n" + "\n".join(lines), flush=True)

    def _sample_load(self) -> None:
        """Sample the run queue while the current generation trains past its first steps."""
        c = self.controller
        rec = c.reconfigurations[-1] if c.reconfigurations else None
        if rec is None or not rec.resumed or c.state != ControllerState.RUNNING:
            return
        if self._load_generation != c.generation:
            self._load_generation, self.cpu_share = c.generation, CpuShare()
        self.cpu_share.sample({w.pid for w in self.workers if w.popen.poll() is None})

    def explain(self, plan) -> float:
        """After the run: the simulator's iteration time for ``plan`` with this machine's profile
        stretched by the CPU share its ranks were measured to get while training (run.profile).
        It uses the run's own measurement, so it explains the error; it predicts nothing."""
        from sailor_sim import Simulator

        self.slowdown = self.cpu_share.slowdown
        folder = machine_profile(
            self.cfg.run_dir,
            self.job,
            self.gpu_types,
            self.slowdown,
            "profile-explain",
            self.cfg.workers,
        )
        return Simulator.from_profile_dir(folder).estimate(self.job, plan).iteration_time_s

    def precision_line(self) -> str:
        """The precision the ranks trained in, and why (the job's dtype: what every rank ran)."""
        why = self.cfg.precision_reason or "no precision given: fp32"
        return f"{self.job.dtype}: {why}"

    def close(self, wait_s: float = 10.0) -> None:
        """Stop everything this run started; agents get ``wait_s`` to exit on their own once
        told the run is over (0 when interrupted: they are terminated at once)."""
        if not self.controller.finished:  # interrupted: no re-plan onto the agents stopping
            self.controller.shutdown("sailor run was stopped")
        deadline = time.monotonic() + wait_s
        for w in self.workers:  # agents exit on their own once told the run is over
            try:
                w.popen.wait(max(0.1, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001
                pass
            w.terminate()
        self.controller.close()
        self.server.stop(grace=0.5)
        if self.planner is not None:
            self.planner.close()


def _with_sample_log(training: dict, run_dir: Path) -> dict:
    """With a data folder, every rank that reads samples logs their ids to the run folder's
    ``samples.jsonl`` (an audit that each sample is trained once; ``data.order``)."""
    if "data_dir" not in training or "sample_log_path" in training:
        return training
    return {**training, "sample_log_path": str((run_dir / "samples.jsonl").resolve())}


def _describe_options(run: RunSpec) -> str:
    from ..engine.options import describe

    return describe(run.options, run.precision).replace("job dtype", "fp32")


def run_local(cfg: LocalRunConfig, on_tick: Callable[[LocalRun], None] | None = None) -> RunSummary:
    run = LocalRun(cfg)
    try:
        summary = run.run(on_tick)
    except BaseException:  # SIGINT/SIGTERM (KeyboardInterrupt) or a failure: stop all now
        run.close(wait_s=0.0)
        raise
    run.close()
    return summary
