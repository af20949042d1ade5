"""Replay an availability trace: what each re-planning policy would have trained, and at what cost.

For every state of the trace (a stretch with constant availability) a policy picks a plan
(``policies.py``). A change of plan is a reconfiguration (``reconfig.ReconfigModel``): the run
stops for detect (losses without notice only) + debounce + plan + place/stop + restore + restart,
and the training done since the last checkpoint is lost (the runtime resumes from the newest
complete checkpoint). While training, a checkpoint every ``checkpoint_interval_s`` stalls it for
the save time. Throughput and $/iteration are the simulator's (``Simulator.estimate`` of the plan);
GPUs are billed at the trace's price where it gives one, else the catalog's, whenever the plan
holds them (training, checkpointing or reconfiguring); a stopped run bills nothing.

``replay_events`` yields one ``EventResult`` per (policy, state) as it goes (the gRPC Replay RPC
streams them); ``replay`` collects them with a ``PolicySummary`` per policy and the timelines.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

from sailor_sim import Job, price_per_gpu_hour

from ..errors import RequestCancelledError
from ..result import RankedPlan
from .policies import (
    EVERY_CHANGE,
    WEIGHS_SWITCH,
    Decision,
    PlanCache,
    Policy,
    fits,
    pays_off,
    same_plan,
)
from .reconfig import ReconfigModel
from .request import ReplayRequest
from .spot import SpotAdvice, advise
from .trace import AvailabilityTrace, TraceState


@dataclass(frozen=True)
class Segment:
    """A stretch of one policy's timeline with constant rates (for plots)."""

    start_s: float
    end_s: float
    kind: str
    """train | checkpoint | reconfigure | stopped"""
    samples_per_s: float
    usd_per_hour: float
    gpus: int


@dataclass(frozen=True)
class EventResult:
    """One policy over one state of the trace."""

    policy: str
    index: int
    start_s: float
    duration_s: float
    available_gpus: int
    gpus_used: int
    samples_per_s: float
    """Throughput of the plan while it trains (0 when stopped)."""
    usd_per_hour: float
    replanned: bool
    reconfigured: bool
    reconfigure_s: float
    lost_samples: float
    samples: float
    """Samples trained during this state (net of work lost at its start)."""
    usd: float
    plan: str
    segments: tuple[Segment, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("segments")
        return out


@dataclass(frozen=True)
class PolicySummary:
    policy: str
    samples: float
    tokens: float
    usd: float
    usd_per_million_tokens: float | None
    mean_samples_per_s: float
    gpu_hours: float
    replans: int
    reconfigurations: int
    reconfigure_s: float
    lost_samples: float
    checkpoint_s: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ReplayResult:
    job: Job
    trace: AvailabilityTrace
    reconfig: ReconfigModel
    summaries: tuple[PolicySummary, ...]
    events: tuple[EventResult, ...]
    replay_time_s: float
    spot: SpotAdvice | None = None
    """Expected cost under the trace's preemptions for the first policy's first plan."""

    def timeline(self, policy: str) -> list[Segment]:
        return [s for e in self.events if e.policy == policy for s in e.segments]

    def to_dict(self) -> dict:
        return {
            "job": self.job.to_dict(),
            "trace": {
                "source": self.trace.source,
                "states": len(self.trace.states),
                "duration_s": self.trace.duration_s,
                "preemptions": self.trace.preemptions,
            },
            "reconfig": self.reconfig.to_dict(),
            "policies": [s.to_dict() for s in self.summaries],
            "events": [e.to_dict() for e in self.events],
            "replay_time_s": self.replay_time_s,
            "spot": self.spot.to_dict() if self.spot else None,
        }


class _Run:
    """One policy's progress through the trace."""

    def __init__(self, job: Job, model: ReconfigModel) -> None:
        self.job, self.model = job, model
        self.plan: RankedPlan | None = None
        self.down_s = 0.0  # reconfiguration time still to serve
        self.since_ckpt_s = 0.0  # training seconds since the last checkpoint
        self.since_ckpt_samples = 0.0
        self.changes = 0  # changes of availability seen so far (for the expected horizon)
        self.pending: tuple[RankedPlan, float] | None = None  # a switch waiting for a boot
        self.delay_s = 0.0  # boot time left before ``pending`` happens

    def usd_per_hour(self, state: TraceState, training: bool) -> float:
        if self.plan is None:
            return 0.0
        gpus = sum(
            n * (state.price(g, z) or price_per_gpu_hour(g, z))
            for (g, z), n in self.plan.plan.gpu_counts().items()
        )
        e = self.plan.estimate
        egress = e.cost_breakdown_usd.get("egress", 0.0) * e.throughput_iters_per_s * 3600
        return gpus + (egress if training else 0.0)

    def advance(self, state: TraceState) -> tuple[float, float, list[Segment]]:
        """Serve the state's time: a switch waiting for joining nodes to boot (the old plan
        trains meanwhile), the reconfiguration, then training with checkpoints. Returns the
        samples trained, the samples lost by a switch made in this state, and the segments."""
        t, end = state.start_s, state.start_s + state.duration_s
        segments: list[Segment] = []
        samples = lost = 0.0
        if self.pending is not None:
            step = min(self.delay_s, end - t)
            samples += self._train(state, t, t + step, segments, self.model.booting_share)
            t, self.delay_s = t + step, self.delay_s - step
            if self.delay_s <= 1e-9:
                plan, search_s = self.pending
                self.pending = None
                lost = self.reconfigure(plan, search_s, noticed_late=False)
        if self.plan is None:
            segments.append(Segment(t, end, "stopped", 0.0, 0.0, 0))
            return samples, lost, _merge(segments)
        if self.down_s > 0 and t < end:
            step = min(self.down_s, end - t)
            cost = self.usd_per_hour(state, training=False)
            segments.append(Segment(t, t + step, "reconfigure", 0.0, cost, self.plan.plan.num_gpus))
            self.down_s -= step
            t += step
        samples += self._train(state, t, end, segments)
        return samples, lost, _merge(segments)

    def _train(
        self, state: TraceState, t: float, end: float, segments: list[Segment], share: float = 1.0
    ) -> float:
        """Train the current plan from ``t`` to ``end``, checkpointing on schedule, at ``share``
        of its throughput (less while joining nodes start on its machine)."""
        gpus, rate = self.plan.plan.num_gpus, self.plan.estimate.samples_per_s * share
        idle_cost = self.usd_per_hour(state, training=False)
        train_cost = self.usd_per_hour(state, training=True)
        save_s, samples = self.model.save_s(self.job), 0.0
        interval = self.model.checkpoint_interval_s
        while t < end - 1e-9:
            if self.since_ckpt_s == 0.0:
                costs = (train_cost, idle_cost)
                t, done = self._whole_cycles(t, end, save_s, rate, costs, segments)
                samples += done
            step = min(interval - self.since_ckpt_s, end - t)
            segments.append(Segment(t, t + step, "train", rate, train_cost, gpus))
            samples += rate * step
            self.since_ckpt_s += step
            self.since_ckpt_samples += rate * step
            t += step
            if self.since_ckpt_s >= interval - 1e-9:
                stall = min(save_s, end - t)  # a save cut short by the state's end is not counted
                segments.append(Segment(t, t + stall, "checkpoint", 0.0, idle_cost, gpus))
                t += stall
                self.since_ckpt_s, self.since_ckpt_samples = 0.0, 0.0
        return samples

    def _whole_cycles(
        self, t: float, end: float, save_s: float, rate: float, costs: tuple[float, float],
        segments: list[Segment],
    ) -> tuple[float, float]:  # fmt: skip
        """Whole (train, checkpoint) cycles but the last, from a fresh checkpoint, in closed
        form: a state may last years (a trace's last state held open), and a loop would take
        one step per checkpoint. They become one "train" segment at the cycles' mean rate and
        $/h (samples and dollars exact; a plot shows the mean). Returns (t, samples)."""
        interval = self.model.checkpoint_interval_s
        period = interval + save_s
        cycles = math.floor((end - t) / period) - 1  # the last runs step by step
        if cycles < 2:
            return t, 0.0
        gpus, (train_cost, idle_cost) = self.plan.plan.num_gpus, costs
        usd = (train_cost * interval + idle_cost * save_s) / period
        span = cycles * period
        segments.append(Segment(t, t + span, "train", rate * interval / period, usd, gpus))
        return t + span, rate * interval * cycles

    def reconfigure(self, plan: RankedPlan | None, search_s: float, noticed_late: bool) -> float:
        """Switch to ``plan`` now; returns the work lost (samples since the last checkpoint)."""
        lost = self.since_ckpt_samples if self.plan is not None else 0.0
        self.plan, self.pending = plan, None
        self.since_ckpt_s, self.since_ckpt_samples = 0.0, 0.0
        self.down_s = (
            self.model.downtime_s(self.job, search_s, noticed_late) if plan is not None else 0.0
        )
        return lost

    def reconfigure_after_boot(self, plan: RankedPlan, search_s: float) -> None:
        """Switch once the joining nodes have booted (``provision_s``); the current plan keeps
        training until then. Choosing the same plan again keeps the boot already under way."""
        if self.pending is None or not same_plan(self.pending[0], plan):
            self.delay_s = self.model.provision_s
        self.pending = (plan, search_s)


def _merge(segments: list[Segment]) -> list[Segment]:
    out: list[Segment] = []
    for s in segments:
        if s.end_s - s.start_s <= 0:
            continue
        if out and (out[-1].kind, out[-1].samples_per_s, out[-1].usd_per_hour) == (
            s.kind,
            s.samples_per_s,
            s.usd_per_hour,
        ):
            out[-1] = Segment(
                out[-1].start_s, s.end_s, s.kind, s.samples_per_s, s.usd_per_hour, s.gpus
            )
        else:
            out.append(s)
    return out


def _lost_gpus_without_notice(state: TraceState, plan: RankedPlan | None) -> bool:
    if plan is None or not state.preempted:
        return False
    used = plan.plan.gpu_counts()
    return any((g, z) in used for g, z, _ in state.preempted)


def replay_events(
    planner, request: ReplayRequest, should_stop: Callable[[], bool] | None = None
) -> Iterator[EventResult]:
    """One ``EventResult`` per (policy, state), policy by policy, in trace order.
    ``should_stop`` is asked before every state and inside every search: True (the caller
    cancelled, its deadline passed, the server stops) ends the replay with
    RequestCancelledError, dropping its plan cache."""
    cache = PlanCache(planner, request.job, request.options, should_stop)
    for name in request.policies:
        policy, run = Policy(name, cache), _Run(request.job, request.reconfig)
        previous_inventory = None
        for index, state in enumerate(request.trace.states):
            if should_stop is not None and should_stop():
                raise RequestCancelledError(
                    "the caller cancelled the replay or its deadline passed; replay stopped",
                    field="request",
                )
            yield _step(policy, run, state, index, previous_inventory, request.started)
            previous_inventory = state.inventory


def _keep_running(policy: Policy, run: _Run, state: TraceState, decision) -> bool:
    """A policy that weighs switches keeps its running plan unless the new one pays off by the
    expected time to the next change (mean of the past changes: the replay does not peek)."""
    if policy.name not in WEIGHS_SWITCH or decision.plan is None or run.plan is None:
        return False
    horizon = state.start_s / max(1, run.changes)
    down = run.model.downtime_s(run.job, decision.search_s, noticed_late=False)
    current = (run.plan.estimate.samples_per_s, run.usd_per_hour(state, training=True))
    nxt = _Run(run.job, run.model)
    nxt.plan = decision.plan
    new = (decision.plan.estimate.samples_per_s, nxt.usd_per_hour(state, training=True))
    objective = policy.cache.options.objective
    return not pays_off(objective, current, new, horizon, down, run.since_ckpt_samples)


def _step(
    policy: Policy, run: _Run, state: TraceState, index: int, previous, started: bool
) -> EventResult:
    first = previous is None
    preempted = _lost_gpus_without_notice(state, run.plan)
    changed = first or state.inventory != previous or preempted
    run.changes += changed and not first
    decision = policy.decide(state.inventory, run.plan, changed, first=first)
    lost, reconfigured = 0.0, False
    held = run.plan is not None and fits(run.plan.plan, state.inventory) and not preempted
    if (
        held
        and not same_plan(decision.plan, run.plan)
        and _keep_running(policy, run, state, decision)
    ):
        decision = Decision(run.plan, decision.searched, decision.search_s)
    restart = policy.name == EVERY_CHANGE and changed and not first
    if first and started and decision.plan is not None:
        run.plan = decision.plan  # already running when the trace starts: no start-up cost
    elif restart or not same_plan(decision.plan, run.plan) or (run.plan is not None and not held):
        reconfigured = decision.plan is not None or run.plan is not None
        if held and decision.plan is not None and run.model.provision_s > 0:
            run.reconfigure_after_boot(decision.plan, decision.search_s)
        else:
            lost = run.reconfigure(decision.plan, decision.search_s, noticed_late=preempted)
    elif changed:
        run.pending = None  # availability moved on before the joining nodes booted
    samples, lost_later, segments = run.advance(state)
    lost += lost_later
    plan = run.plan
    return EventResult(
        policy=policy.name,
        index=index,
        start_s=state.start_s,
        duration_s=state.duration_s,
        available_gpus=state.inventory.total_gpus,
        gpus_used=plan.plan.num_gpus if plan else 0,
        samples_per_s=plan.estimate.samples_per_s if plan else 0.0,
        usd_per_hour=run.usd_per_hour(state, training=True),
        replanned=decision.searched,
        reconfigured=reconfigured,
        reconfigure_s=sum(s.end_s - s.start_s for s in segments if s.kind == "reconfigure"),
        lost_samples=lost,
        samples=samples - lost,
        usd=sum((s.end_s - s.start_s) * s.usd_per_hour / 3600 for s in segments),
        plan=plan.plan.describe() if plan else "stopped",
        segments=tuple(segments),
    )


def summarize(name: str, job: Job, events: list[EventResult], duration_s: float) -> PolicySummary:
    samples = sum(e.samples for e in events)
    tokens = samples * job.sequence_length
    usd = sum(e.usd for e in events)
    segments = [s for e in events for s in e.segments]
    return PolicySummary(
        policy=name,
        samples=samples,
        tokens=tokens,
        usd=usd,
        usd_per_million_tokens=usd / (tokens / 1e6) if tokens > 0 else None,
        mean_samples_per_s=samples / duration_s if duration_s > 0 else 0.0,
        gpu_hours=sum((s.end_s - s.start_s) * s.gpus for s in segments) / 3600,
        replans=sum(e.replanned for e in events),
        reconfigurations=sum(e.reconfigured for e in events),
        reconfigure_s=sum(e.reconfigure_s for e in events),
        lost_samples=sum(e.lost_samples for e in events),
        checkpoint_s=sum(s.end_s - s.start_s for s in segments if s.kind == "checkpoint"),
    )


def replay(planner, request: ReplayRequest) -> ReplayResult:
    """Every policy over the whole trace, with a summary per policy (``replay_events`` as it
    goes); ``planner`` scores the plans (``sources.planner_for``)."""
    start = time.perf_counter()
    job, trace, model, policies = request.job, request.trace, request.reconfig, request.policies
    events = list(replay_events(planner, request))
    summaries = tuple(
        summarize(p, job, [e for e in events if e.policy == p], trace.duration_s) for p in policies
    )
    spot = _spot(job, trace, model, [e for e in events if e.policy == policies[0]])
    elapsed = time.perf_counter() - start
    return ReplayResult(job, trace, model, summaries, tuple(events), elapsed, spot)


def _spot(job: Job, trace: AvailabilityTrace, model: ReconfigModel, events) -> SpotAdvice | None:
    """Young/Daly advice for the first plan: restart = the mean measured reconfiguration."""
    if not trace.preemptions or not events or events[0].gpus_used == 0:
        return None
    restarts = [e.reconfigure_s for e in events[1:] if e.reconfigured and e.gpus_used]
    restart = sum(restarts) / len(restarts) if restarts else model.downtime_s(job, 0.0, True)
    return advise(
        preemptions=trace.preemptions,
        duration_s=trace.duration_s,
        save_s=model.save_s(job),
        restart_s=restart,
        interval_s=model.checkpoint_interval_s,
        samples_per_s=events[0].samples_per_s,
        usd_per_hour=events[0].usd_per_hour,
        sequence_length=job.sequence_length,
    )


replay_trace = replay
"""The package face's name for ``replay`` (``sailor_planner.replay`` is this subpackage)."""
