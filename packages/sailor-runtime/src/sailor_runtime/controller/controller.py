"""The controller: membership in, generations out.

Event sources (gRPC threads): Register (join), Leave (graceful), Heartbeat (liveness, rank
states, step metrics). One control thread (`_loop`) turns them into re-plans: it expires silent
workers, probes the agents when a rank fails (a dead node answers nothing, a live one
answers), waits out a debounce window so that a burst of changes costs one re-plan, and then
runs `_reconfigure`: drop newcomers whose agent cannot be dialed -> plan on the live inventory
-> place ranks -> (same plan and placement as running: keep training, no new generation) ->
stop the old generation -> locate the last checkpoint -> assign the new generation (rendezvous
namespace ``gen-N`` in the controller's store). Each phase is timed (state.PHASES). The
generation number and its plan change in one locked step, so what is shown is what runs.

Ownership and trust: the controller locks its run folder (``rundir``: one run, one job, one
controller at a time) and numbers generations on from the last one recorded there. Its
rendezvous store (``engine.storeserver``) listens on ``store_host`` only, takes connections
only from the assigned nodes (storeguard), and answers only clients that prove they hold a
generation's key, HMAC(run secret, ``gen-N``): only the agents it assigns learn the key of their
generation, and a client sees only that generation's keys. Each registration gets a session nonce; a
live worker's id cannot be re-registered, heartbeated or removed without it, every Assignment
and Stop carries it so agents refuse orders that are not from their controller, and a
graceful leave retires it for good.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc

from sailor_sim import Job, Plan, Recipe, RunSpec

from ..engine.backend import BackendError, resolve_backend
from ..engine.checkpoints import fence
from ..engine.config import FATAL_EXIT, RunViews
from ..engine.options import FSDP_ZERO, OptionsError, check_run
from ..engine.storeserver import StoreServer, secret_keys
from ..errors import (
    NoPlanError,
    PlacementError,
    RegistrationError,
    SailorRuntimeError,
)
from ..security import TlsFiles
from . import rundir
from .agents import AgentClients
from .assignments import build_assignments, store_prefix
from .checkpoints import latest_checkpoint_step, resume_step
from .membership import Membership, Worker, check_registration, same_secret
from .metricslog import MetricsLog, engine_fields
from .placement import Placement, place
from .planning import PlannerLink, describe_inventory, live_inventory
from .state import ControllerState, Reconfiguration
from .storeguard import StoreGuard

log = logging.getLogger("sailor.controller")
_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

REPLAN_RETRIES = 3
"""Re-plans retried after one raised (planner refused or unreachable, run folder unwritable)
before the run ends FAILED with the reason."""
REPLAN_BACKOFF_S = 1.0
"""Wait before the first retry; doubled for each next one (1, 2, 4 s)."""


def check_engine_runs(run: RunSpec) -> None:
    """Refuse a precision or options the engine does not run (``engine.options.check_run``),
    naming the field and the fix."""
    try:
        check_run(run)
    except OptionsError as exc:
        raise SailorRuntimeError(str(exc).split(": ", 1)[-1], field=exc.field) from None


def split_run_settings(base: RunSpec, settings: dict) -> tuple[RunSpec, dict]:
    """``base`` with the ``settings`` that name RunSpec fields (``lr``: the recipe's peak
    learning rate, min_lr a tenth of it) replaced, and the settings left over."""
    names = set(RunSpec.__dataclass_fields__)
    fields = {k: v for k, v in settings.items() if k in names}
    rest = {k: v for k, v in settings.items() if k not in names and k != "lr"}
    lr = settings.get("lr", 0.0)
    if lr > 0:
        fields["recipe"] = Recipe(lr=lr, min_lr=lr / 10)
    return replace(base, **fields), rest


@dataclass(frozen=True)
class ControllerConfig(RunViews):
    job: Job
    run: RunSpec
    """The run's settings as the user gave them, sent to every node as one message: the one
    place steps, checkpointing, seed, learning rate, precision and options are read from
    (``steps`` ... ``options`` below are views of it)."""
    run_dir: Path
    planner_address: str
    profile_dir: str = ""
    min_workers: int = 1
    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 5.0
    debounce_s: float = 1.0
    max_failures: int = 5
    store_host: str = "127.0.0.1"
    """Where the rendezvous store listens: the controller's --host (0.0.0.0 = everywhere)."""
    store_port: int = 0
    """0 = any free port."""
    advertise_host: str = ""
    """Where ranks dial the store; "" = store_host, and a wildcard store_host makes each
    agent dial the host it reached the controller at."""
    tls: TlsFiles = field(default_factory=TlsFiles)
    training: dict = field(default_factory=dict)
    """The recipe and data every rank trains with (``engine.config.TRAINING_KEYS``; paths
    absolute); {} = the engine's defaults and the run's recipe."""
    backend: str = "auto"
    """``auto``: each plan's backend (``engine.backend``: gloo for CPU worker types, NCCL for
    GPUs); a plan mixing both is refused and the controller waits for another inventory."""
    objective: str = "throughput"
    token: str | None = None
    planner_wait_s: float = 300.0
    planner_token: str | None = None
    """Token the planner server requires; None = ``token`` (one shared secret)."""
    planner_ca: Path | None = None
    """PEM CA to trust for a planner server speaking TLS; None = plaintext."""
    on_save_error: str = "stop"
    """A checkpoint that cannot be written: 'stop' the run (FAILED, with the reason) or
    'continue' training without saving (engine.checkpoints.savefaults)."""

    @classmethod
    def from_run(cls, run: RunSpec, job: Job, **rest) -> ControllerConfig:
        """The config of a controller of ``run`` (``job`` its resolved Job); options the
        engine does not run are refused here, naming the field and the fix."""
        check_engine_runs(run)
        return cls(job=job, run=run, **rest)

    @classmethod
    def for_job(cls, job: Job, **settings) -> ControllerConfig:
        """A controller of ``job`` (tests, benches): its model, batch, sequence and options
        make the RunSpec, ``settings`` that are RunSpec fields (and ``lr``) override it, the
        rest are this config's fields."""
        base = RunSpec(
            model=job.model.name, global_batch_size=job.global_batch_size,
            seq_len=job.sequence_length, options=job.options,
        )  # fmt: skip
        run, rest = split_run_settings(base, settings)
        return cls.from_run(run, job, **rest)

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints"


PLAN_CANDIDATES = 8
"""Plans asked of the planner when the run's options rule some plans out (FSDP, sequence
parallelism, interleaved 1F1B): the best one the engine runs is used."""


def engine_filter(config: ControllerConfig) -> dict:
    """The ``PlannerLink`` arguments that keep the plans the engine cannot run with the run's
    options out (``engine.options.unsupported_reason``). Bad options are refused here, with
    the field and the fix, before the controller serves anyone."""
    from ..engine.options import pipelines_fsdp, unsupported_reason

    check_engine_runs(config.run)
    options = config.options
    planned = config.job.options.virtual_stages
    if options.virtual_stages != planned:  # every plan would be refused for it
        raise SailorRuntimeError(
            f"virtual_stages {options.virtual_stages} differs from the job's {planned}, which "
            "the planner plans with; give the job the same value",
            field="options.virtual_stages",
        )
    fsdp = options.zero in FSDP_ZERO
    restricted = fsdp or options.sequence_parallel
    restricted = restricted or options.virtual_stages > 1  # microbatches a multiple of p
    return {
        "unsupported": lambda plan: unsupported_reason(options, config.job, plan),
        "candidates": PLAN_CANDIDATES if restricted else 1,
        # ZeRO-3 / hybrid shard with FSDP on one-stage plans only: the planner searches only
        # those (its best 8 plans could all be pipelined, and the run found none).
        "max_pipeline_depth": 0 if pipelines_fsdp(options, config.job) else 1,
    }


@dataclass(frozen=True)
class Change:
    reason: str
    failure: bool
    evidence_at: float
    """Last sign of life of what failed (monotonic), or when the change happened."""
    noticed_at: float = field(default_factory=time.monotonic)


class Controller:
    def __init__(self, config: ControllerConfig) -> None:
        self.cfg = config
        engine_runs = engine_filter(config)  # bad options refused before anything is held
        tokens = rundir.tokens_identity(config.training.get("data_dir"))
        self.run_lock = rundir.acquire(config.run_dir, config.job, config.seed, config.lr, tokens)
        try:  # damaged checkpoints only: refused now, before anything trains over them
            config.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            self.resume_step = resume_step(config.checkpoint_dir)
            """The step the run resumes after (its newest usable checkpoint; 0 = none)."""
        except BaseException:
            self.run_lock.release()
            raise
        self.membership = Membership(config.heartbeat_timeout_s)
        self.state = ControllerState.WAITING
        self.message = "waiting for workers"
        self.generation = rundir.last_generation(config.run_dir)
        self._first_generation = self.generation
        self.run_secret = secrets.token_hex(16)
        self.plan: Plan | None = None
        self.placement: Placement = {}
        self.addresses: dict[str, str] = {}
        self.metrics: list[dict] = []
        self.metrics_log = MetricsLog(config.run_dir)
        """Every step's metrics, as JSON lines in the run folder (and TensorBoard)."""
        self.reconfigurations: list[Reconfiguration] = []
        self.unchanged: list[str] = []
        """Changes whose re-plan kept the running plan (training went on, no generation)."""
        self.dropped: list[str] = []
        """Registrations dropped because their agent could not be dialed."""
        self.assigned_ever: set[str] = set()
        """Workers that were sent an assignment (their agent answered once)."""
        self.failures = 0
        self._replan_errors = 0
        """Consecutive re-plans that raised (reset by one that assigns or waits for GPUs)."""
        self._retry_at = 0.0
        self._fatal = ""
        """Why the run must end now (a rank exited with FATAL_EXIT); set under the lock by a
        heartbeat, acted on by the control loop."""
        self.refused_calls = 0
        self._pending: list[Change] = []
        self._left_sessions: set[str] = set()
        """Sessions of workers that left gracefully: a leave is final for its session."""
        self._gen_failed = False
        self._probed = False
        self._assigned_at = 0.0
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._stop = threading.Event()
        listener = _listen(config.store_host, config.store_port)
        ipv4 = listener.family == socket.AF_INET
        self.store_guard = StoreGuard(listener.fileno(), config.store_host, ipv4)  # its own dup
        self.store_guard.allow([])  # loopback and the controller until nodes are assigned
        self.store = StoreServer(listener, secret_keys(self.run_secret))
        """The rendezvous store: a client must prove it holds its generation's key."""
        self.planner = PlannerLink(
            config.planner_address,
            profile_dir=config.profile_dir,
            objective=config.objective,
            wait_s=config.planner_wait_s,
            **engine_runs,
            token=config.planner_token or config.token,
            ca=config.planner_ca,
        )
        self.agents = AgentClients(config.token, config.tls)
        self._thread = threading.Thread(target=self._loop, name="controller", daemon=True)

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=10)
        self.planner.close()
        self.agents.close()
        with self._lock:  # a late heartbeat appends under the same lock
            self.metrics_log.close()
        self.store.close()
        self.store_guard.close()
        self.run_lock.release()

    @property
    def finished(self) -> bool:
        return self.state in (ControllerState.DONE, ControllerState.FAILED)

    def _note(self, change: Change) -> None:
        with self._wake:
            log.info("change: %s", change.reason)
            self._pending.append(change)
            self._wake.notify_all()

    # ---- events from the gRPC threads ---------------------------------------------------------
    def register(
        self,
        worker_id: str,
        address: str,
        gpus_msg,
        hostname: str,
        session: str = "",
        seen_from: str = "",
    ) -> Worker:
        """A node joins (or renews its registration); ``seen_from``: the address its call
        came from."""
        gpus = check_registration(worker_id, address, gpus_msg)
        with self._lock:
            if session and session in self._left_sessions:
                raise RegistrationError(
                    f"{worker_id} left this run; a leave is final for its session. Start a new "
                    "agent to join again",
                    field="register.session",
                    code=grpc.StatusCode.FAILED_PRECONDITION,
                )
            old = self.membership.get(worker_id) if worker_id else None
            if old is not None and not same_secret(old.session, session):
                raise RegistrationError(
                    f"{worker_id} is registered and alive; a node may renew its own "
                    "registration (with its session) but not take over another's. Pick "
                    "another worker id",
                    field="register.worker_id",
                    code=grpc.StatusCode.ALREADY_EXISTS,
                )
            w = self.membership.join(worker_id, address, gpus, hostname, secrets.token_hex(16))
            w.seen_from = seen_from
            self.addresses[w.worker_id] = address
            if old is None:  # a new agent (perhaps a restarted one reusing its id and port)
                self.assigned_ever.discard(w.worker_id)  # a newcomer: dialed before planned on
        if old is None:
            self.agents.forget(address)
        what = "re-registered" if old else "joined"
        self._note(Change(f"{w.worker_id} {what} with {gpus.describe()}", False, time.monotonic()))
        return w

    def leave(self, worker_id: str, reason: str, session: str = "") -> None:
        with self._lock:
            if not self.membership.get(worker_id, session):
                return
            self._left_sessions.add(session)  # no re-registration with it, ever
            if not self.membership.mark_dead(worker_id):
                return
            self._note(Change(f"{worker_id} left ({reason[:100]})", False, time.monotonic()))

    def heartbeat(
        self, worker_id: str, ranks, metrics, session: str = ""
    ) -> tuple[bool, int, bool]:
        """Record a heartbeat; returns (known, generation, shutdown). One with the wrong
        session is not the worker's: it is ignored (and told it is unknown). Whether a
        shutdown is a success is ``unfinished``."""
        now = time.monotonic()
        with self._lock:
            w = self.membership.get(worker_id, session)
            if w is None:
                return False, self.generation, self.finished
            w.last_heartbeat = now
            for r in ranks:
                w.ranks[(r.generation, r.rank)] = (r.state, r.exit_code, r.log_tail)
            for m in metrics:
                self._record_metric(m, now)
            self._check_rank_failures(w, ranks)
            self._check_done()
            return True, self.generation, self.finished

    def _record_metric(self, m, now: float) -> None:
        rec = {
            "generation": m.generation,
            "rank": m.rank,
            "step": m.step,
            "loss": m.loss,
            "iteration_time_s": m.iteration_time_s,
            "samples_per_s": m.samples_per_s,
            "consumed_samples": m.consumed_samples,
            "time": time.time(),
            **engine_fields(m.raw_json),
        }
        self.metrics.append(rec)
        self.metrics_log.append(rec)
        rc = self.reconfigurations[-1] if self.reconfigurations else None
        if rc and m.generation == self.generation == rc.generation and not rc.resumed:
            rc.phases["restart"] = now - self._assigned_at
            rc.resumed, rc.resumed_at = True, now
            log.info("generation %d resumed training (step %d)", m.generation, m.step)

    def _check_rank_failures(self, w: Worker, ranks) -> None:
        from ..proto import agent_pb2

        if self.state != ControllerState.RUNNING or self._gen_failed:
            return
        for r in ranks:
            if r.generation == self.generation and r.state == agent_pb2.RANK_STATE_FAILED:
                self._gen_failed = True
                tail = r.log_tail.strip().splitlines()[-1:] or [""]
                if r.exit_code == FATAL_EXIT:  # a restart would fail the same way
                    self._fatal = f"rank {r.rank} on {w.worker_id} stopped the run: {tail[0]}"
                    return
                self._note(
                    Change(
                        f"rank {r.rank} on {w.worker_id} exited with status {r.exit_code} "
                        f"({tail[0][:160]})",
                        True,
                        time.monotonic(),
                    )
                )
                return

    def _check_done(self) -> None:
        from ..proto import agent_pb2

        if self.state != ControllerState.RUNNING or not self.placement:
            return
        for wid, slots in self.placement.items():
            w = self.membership.get(wid)
            if w is None:
                return
            for rank, _ in slots:
                state = w.ranks.get((self.generation, rank), (None,))[0]
                if state != agent_pb2.RANK_STATE_SUCCEEDED:
                    return
        self.state = ControllerState.DONE
        self.message = f"finished {self.cfg.steps} steps"
        log.info("run finished: generation %d, %d steps", self.generation, self.cfg.steps)

    # ---- the control loop ----------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._wake:
                self._wake.wait(0.1)
            try:
                self._tick()
            except Exception:  # noqa: BLE001 - the controller must keep serving
                log.exception("control loop error")

    def _tick(self) -> None:
        for w in self.membership.expire():
            silent = time.monotonic() - w.last_heartbeat
            self._note(
                Change(
                    f"{w.worker_id} missed heartbeats for {silent:.1f} s", True, w.last_heartbeat
                )
            )
        if self.finished:
            return
        if self._fatal:
            self._fail(self._fatal)
            return
        if self._gen_failed and not self._probed and self.state == ControllerState.RUNNING:
            self._probe_agents()
        with self._lock:
            if not self._pending:
                return
            if time.monotonic() - self._pending[-1].noticed_at < self.cfg.debounce_s:
                return
            first = self.generation == self._first_generation
            need = self.cfg.min_workers if first else 1
            if len(self.membership.alive()) < need:
                self._move(ControllerState.WAITING, f"waiting for {need} workers")
                return
            if time.monotonic() < self._retry_at:
                return
            changes, self._pending = self._pending, []
        try:
            self._reconfigure(changes)
        except Exception as exc:  # noqa: BLE001 - a failed re-plan is an event, never silence
            self._replan_failed(changes, exc)
        else:
            self._replan_errors = 0

    def _replan_failed(self, changes: list[Change], exc: Exception) -> None:
        """Retry the re-plan with back-off (its changes queued again, no longer counted as
        failures), then FAILED with the reason: never a silent wait until --timeout."""
        self._replan_errors += 1
        reason = f"re-plan failed: {exc}" if str(exc) else f"re-plan failed: {exc!r}"
        if self._replan_errors > REPLAN_RETRIES:
            self._fail(f"{reason} ({self._replan_errors} attempts)")
            return
        delay = REPLAN_BACKOFF_S * 2 ** (self._replan_errors - 1)
        log.warning("%s; retry %d of %d in %.1f s", reason, self._replan_errors, REPLAN_RETRIES,
                    delay)  # fmt: skip
        retried = [replace(c, failure=False) for c in changes]
        with self._lock:
            self._move(ControllerState.WAITING, f"{reason}; retrying in {delay:.1f} s")
            self._pending = retried + self._pending
            self._retry_at = time.monotonic() + delay

    def _probe_agents(self) -> None:
        """After a rank failure: find the nodes that are gone (they answer nothing)."""
        alive = self.membership.alive()
        replies = self.agents.status_all([w.agent_address for w in alive])
        for w in alive:
            reply = replies.get(w.agent_address)
            if isinstance(reply, grpc.RpcError) and reply.code() in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED,
            ):
                if self.membership.mark_dead(w.worker_id):
                    self._note(Change(f"{w.worker_id} is unreachable", True, w.last_heartbeat))
        self._probed = True

    def _reconfigure(self, changes: list[Change]) -> None:
        start = time.monotonic()
        failures = [c for c in changes if c.failure]
        first = min(failures or changes, key=lambda c: c.noticed_at)
        rec = Reconfiguration(
            self.generation + 1, "; ".join(c.reason for c in changes), bool(failures)
        )
        rec.phases["detect"] = (first.noticed_at - first.evidence_at) if failures else 0.0
        rec.phases["debounce"] = start - first.noticed_at
        rec.noticed_at = first.noticed_at
        if failures and self.generation > self._first_generation:
            self.failures += 1
            if self.failures > self.cfg.max_failures:
                self._fail(f"{self.failures} failures exceed --max-failures; last: {rec.reason}")
                return
        with self._lock:
            if self.finished:  # ended (shutdown by a signal) since this tick began
                return
            was_running = self.state == ControllerState.RUNNING and not self._gen_failed
            self.state = ControllerState.RECONFIGURING
            self.message = rec.reason
        workers = self._reachable(self.membership.alive())
        inventory = live_inventory(workers)
        rec.inventory = describe_inventory(inventory)
        try:
            t = time.monotonic()
            planned = self.planner.plan(self.cfg.job, inventory, lambda: self._stop.is_set())
            rec.phases["plan"] = time.monotonic() - t
            t = time.monotonic()
            placement = place(planned.plan, workers)
            resolve_backend(self.cfg.backend, planned.plan)
            rec.phases["place"] = time.monotonic() - t
        except (NoPlanError, PlacementError, BackendError) as exc:  # the GPUs: wait
            return self._wait_for_change(f"no runnable plan on {rec.inventory}: {exc}", rec)
        if not failures and was_running and self._runs_already(planned.plan, placement):
            return self._keep_running(rec)
        rec.plan_json = planned.plan.to_json(indent=None)
        rec.predicted_iteration_s = planned.predicted_iteration_s
        t = time.monotonic()
        self._stop_old(workers)
        rec.phases["stop"] = time.monotonic() - t
        t = time.monotonic()
        rec.resumed_from_step = latest_checkpoint_step(self.cfg.checkpoint_dir)
        rec.phases["checkpoint"] = time.monotonic() - t
        self._assign(rec, planned.plan, placement, workers)

    def _reachable(self, workers: list[Worker]) -> list[Worker]:
        """``workers`` less the newcomers (never assigned) whose agent does not answer: a
        registration the controller cannot dial is dropped before it is planned onto, and it
        is no training failure (nothing ran there)."""
        newcomers = [w for w in workers if w.worker_id not in self.assigned_ever]
        replies = self.agents.status_all([w.agent_address for w in newcomers])
        gone = set()
        for w in newcomers:
            reply = replies[w.agent_address]
            if isinstance(reply, grpc.RpcError) and reply.code() in _UNREACHABLE:
                log.warning(
                    "dropped %s: its agent at %s does not answer (%s); an agent behind NAT or "
                    "on 0.0.0.0 needs --advertise-host",
                    w.worker_id, w.agent_address, reply.code().name,
                )  # fmt: skip
                self.membership.mark_dead(w.worker_id)
                self.dropped.append(w.worker_id)
                gone.add(w.worker_id)
        return [w for w in workers if w.worker_id not in gone]

    def _runs_already(self, plan: Plan, placement: Placement) -> bool:
        """True when the running generation already executes ``plan`` with ``placement``: a
        join or a leave that changes neither must not stop and restart training."""
        with self._lock:
            return (
                self.plan is not None
                and self.plan.to_json(indent=None) == plan.to_json(indent=None)
                and self.placement == placement
            )

    def _keep_running(self, rec: Reconfiguration) -> None:
        log.info("%s: the plan and placement stay the same; training continues", rec.reason)
        with self._lock:
            self.unchanged.append(rec.reason)
            self._move(
                ControllerState.RUNNING, f"generation {self.generation}: {self.plan.describe()}"
            )
            # Heartbeats ignore rank states while re-planning: look again at what they recorded.
            from ..proto import agent_pb2

            for w in self.membership.alive():
                ranks = [
                    agent_pb2.RankStatus(
                        generation=g, rank=r, state=state, exit_code=code, log_tail=tail
                    )
                    for (g, r), (state, code, tail) in w.ranks.items()
                ]
                self._check_rank_failures(w, ranks)
            self._check_done()

    def _wait_for_change(self, message: str, rec: Reconfiguration) -> None:
        log.warning("%s", message)
        with self._lock:
            self._move(ControllerState.WAITING, message)
        rec.plan_json = ""
        self.reconfigurations.append(rec)

    def _stop_old(self, workers: list[Worker]) -> None:
        replies = self.agents.stop_all({w.agent_address: w.session for w in workers}, 0)
        for w in workers:
            if isinstance(replies[w.agent_address], grpc.RpcError):
                log.warning("stop on %s failed: %s", w.worker_id, replies[w.agent_address])

    def _assign(self, rec: Reconfiguration, plan: Plan, placement: Placement, workers) -> None:
        by_id = {w.worker_id: w for w in workers}
        with self._lock:  # one step: whoever reads the generation reads its plan
            if self.finished:  # stopped (a signal) or failed while this re-plan ran
                log.info("no generation %d: the run ended (%s)", self.generation + 1, self.message)
                return
            generation = self.generation + 1
            rundir.save_generation(self.cfg.run_dir, generation)  # before any agent sees it
            self.plan, self.placement = plan, placement
            fence.write_fence(self.cfg.checkpoint_dir, generation)  # older ranks stop saving
            self.generation = generation
        sessions = {w.worker_id: w.session for w in workers}
        newcomers = set(placement) - self.assigned_ever
        self.assigned_ever.update(placement)
        assigned = [by_id[wid] for wid in placement]
        self.store_guard.allow(  # its ranks connect from where the node registered or listens
            [w.seen_from for w in assigned if w.seen_from]
            + [w.agent_address.rpartition(":")[0] for w in assigned]
        )
        msgs = build_assignments(
            self.cfg, generation, plan, placement, self.store.port, self.run_secret, sessions
        )
        self.store.drop(store_prefix(generation - 1))  # its ranks were stopped
        self._assigned_at = time.monotonic()
        replies = self.agents.assign_all({by_id[w].agent_address: m for w, m in msgs.items()})
        bad = [(w, replies[by_id[w].agent_address]) for w in msgs]
        bad = [(w, r) for w, r in bad if isinstance(r, grpc.RpcError)]
        with self._lock:
            self._gen_failed = self._probed = False
            self.reconfigurations.append(rec)
            self._move(ControllerState.RUNNING, f"generation {generation}: {plan.describe()}")
        log.info(
            "generation %d assigned: %s (resume after step %d)",
            generation,
            plan.describe(),
            rec.resumed_from_step,
        )
        for wid, err in bad:
            log.warning("assign to %s failed: %s", wid, err.details())
            if self.membership.mark_dead(wid):  # nothing ran on a newcomer: no training failure
                failure = wid not in newcomers
                self._note(Change(f"{wid} refused its assignment", failure, time.monotonic()))

    def shutdown(self, reason: str) -> None:
        """End the run now: stop every rank and answer `shutdown` (``unfinished``) to the
        agents' heartbeats (a controller stopped by a signal leaves nothing training). Not an
        error: the run stopped, and resumes from its last checkpoint when started again."""
        self._end(f"{reason} at step {self.step}", logging.INFO)

    @property
    def unfinished(self) -> bool:
        """The run ended without finishing (failed, or stopped): agents must not exit 0."""
        return self.state == ControllerState.FAILED

    def _fail(self, message: str) -> None:
        self._end(message, logging.ERROR)

    def _move(self, state: ControllerState, message: str) -> None:
        """Enter ``state`` (the caller holds the lock), unless the run has ended: a re-plan
        still running when a signal stopped the run must not bring it back to life (its
        agents would be told to train on, not that the run is over)."""
        if not self.finished:
            self.state, self.message = state, message

    def _end(self, message: str, level: int) -> None:
        log.log(level, "%s", message)
        with self._lock:
            self.state = ControllerState.FAILED
            self.message = message
        self._stop_old(self.membership.alive())

    # ---- views ---------------------------------------------------------------------------------
    @property
    def step(self) -> int:
        """The newest step reported (by the current generation once it has reported)."""
        with self._lock:
            mine = [m["step"] for m in self.metrics if m["generation"] == self.generation]
            if mine:
                return max(mine)
            return self.metrics[-1]["step"] if self.metrics else 0

    @property
    def last_loss(self) -> float:
        with self._lock:
            return self.metrics[-1]["loss"] if self.metrics else 0.0


def _listen(host: str, port: int) -> socket.socket:
    """The store's listening socket, on ``host`` only."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address[:2])
    except OSError as exc:
        sock.close()
        raise SailorRuntimeError(
            f"the rendezvous store cannot listen on {host}:{port} ({exc.strerror}); pick "
            "another --store-port",
            field="--store-port",
        ) from None
    sock.listen(128)
    return sock
