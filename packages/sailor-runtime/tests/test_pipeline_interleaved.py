"""Interleaved 1F1B's p2p order is NCCL-legal: every rank's batches, played against each other
under NCCL's rules, pair every send with the receive of the same tensor and never deadlock.

NCCL's rules, modelled here without torch: messages between two ranks match in the order each
side posts them (tags are ignored); a rank waits in a batch until every message of it has met
its partner, which may be in the partner rank's current batch only (it too waits in one); a
send may block until its receive is posted. ``_play`` raises on a mismatch (the wrong tensor
would arrive: silent corruption on NCCL) and returns False on a deadlock (a hang on NCCL).
The gloo equivalence tests cannot see either: gloo matches by tag and its isend never blocks.
"""

from __future__ import annotations

import pytest

from sailor_runtime.engine.parallel.schedule import (
    Msg,
    Post,
    Unit,
    _batch,
    chunk_layers,
    interleave_problem,
    interleaved_order,
    interleaved_steps,
    iteration_steps,
)
from sailor_sim import Plan, Replica, Stage


def _identity(rank: int, p: int, msg: Msg, sending: bool) -> tuple[str, int, int]:
    """(kind, microbatch, virtual stage that sent it): the tensor a message carries."""
    own = msg.chunk * p + rank
    if sending:
        return msg.what, msg.micro, own
    return msg.what, msg.micro, own - 1 if msg.what == "F" else own + 1


def _play(steps_of, p: int) -> bool:
    posts = [[s for s in steps_of(r) if isinstance(s, Post)] for r in range(p)]
    at, waiting = [0] * p, [0] * p
    sent: dict[tuple[int, int], list] = {}  # (src, dst) -> posted, unmatched sends, in order
    wanted: dict[tuple[int, int], list] = {}

    def post(r: int) -> None:
        if at[r] < len(posts[r]):
            batch = posts[r][at[r]]
            for m in batch.sends:
                sent.setdefault((r, m.peer), []).append((_identity(r, p, m, True), r))
            for m in batch.recvs:
                wanted.setdefault((m.peer, r), []).append((_identity(r, p, m, False), r))
            waiting[r] = len(batch.sends) + len(batch.recvs)

    for r in range(p):
        post(r)
    while any(at[r] < len(posts[r]) for r in range(p)):
        progress = False
        for pair in set(sent) | set(wanted):
            out, inc = sent.get(pair, []), wanted.get(pair, [])
            while out and inc:
                (got, a), (want, b) = out.pop(0), inc.pop(0)
                assert got == want, f"{pair}: sends {got} where the receiver expects {want}"
                waiting[a] -= 1
                waiting[b] -= 1
                progress = True
        for r in range(p):
            if at[r] < len(posts[r]) and waiting[r] == 0:
                at[r] += 1
                post(r)
                progress = True
        if not progress:
            return False
    return all(not q for q in sent.values()) and all(not q for q in wanted.values())


def _arrives_before_use(p: int, r: int, v: int, m: int) -> None:
    """Every compute step's input was received in an earlier batch."""
    have = set()
    for step in interleaved_steps(p, r, v, m):
        if isinstance(step, Post):
            have |= {(x.what, x.micro, x.chunk) for x in step.recvs}
            continue
        virtual = step.chunk * p + r
        needs = virtual != 0 if step.op == "F" else virtual != p * v - 1
        assert not needs or tuple(step) in have, (p, r, v, m, step)


@pytest.mark.parametrize("p", [2, 3, 4])
@pytest.mark.parametrize("v", [1, 2, 3])
def test_every_rank_pairs_and_completes(p, v):
    for m in (p, 2 * p, 3 * p, 5 * p):
        assert _play(lambda r, m=m: iteration_steps("1f1b", p, r, v, m), p), (p, v, m)
        if v > 1:
            for r in range(p):
                _arrives_before_use(p, r, v, m)


def test_order_is_megatrons_and_runs_everything_once():
    """Each rank runs every (microbatch, chunk) forward once and its backward after it; the
    first rank's warm-up is Megatron's 2 (p - 1) + (v - 1) p forwards."""
    p, v, m = 4, 2, 8
    for r in range(p):
        order = interleaved_order(p, r, v, m)
        every = {Unit(op, mb, c) for op in "FB" for mb in range(m) for c in range(v)}
        assert sorted(order) == sorted(every)
        for i, u in enumerate(order):
            if u.op == "B":
                assert Unit("F", u.micro, u.chunk) in order[:i]
    first, warm = interleaved_order(p, 0, v, m), 2 * (p - 1) + (v - 1) * p
    assert [u.op for u in first[: warm + 2]] == ["F"] * (warm + 1) + ["B"]
    assert first[:5] == [Unit("F", mb, 0) for mb in range(4)] + [Unit("F", 0, 1)]
    assert first[warm + 1] == Unit("B", 0, v - 1)  # the first backward leaves the last chunk


def test_megatrons_in_batch_order_pairs_wrong_tensors_with_two_stages():
    """Megatron's batches list the gradient first on the send side and the activation first on
    the receive side. With p = 2 both go to one rank, so under NCCL's per-pair order the check
    above catches it pairing a gradient with an activation: the check can fail."""

    def megatron_order(r):
        for step in interleaved_steps(2, r, 2, 4):
            if isinstance(step, Post):
                step = Post(
                    tuple(sorted(step.sends, key=lambda x: x.what != "B")),
                    _batch((), step.recvs).recvs,
                )
            yield step

    with pytest.raises(AssertionError, match="sends"):
        _play(megatron_order, 2)


def test_chunks_deal_layers_round_robin():
    """tiny-gpt (layer ids 0..7, 6 blocks) on 2 stages of 4 ids each, 2 chunks: the blocks of
    each stage split evenly, embedding first, head last, ids dealt chunk 0 of every stage first."""
    assert chunk_layers([(0, 3), (4, 7)], 7, 2) == [[(0, 2), (5, 5)], [(3, 4), (6, 7)]]
    assert chunk_layers([(0, 3), (4, 7)], 7, 1) == [[(0, 3)], [(4, 7)]]
    with pytest.raises(ValueError, match="stage 0 holds 2 layer ids"):
        chunk_layers([(0, 1), (2, 7)], 7, 3)


def test_plans_the_schedule_cannot_run_are_refused_with_the_fix():
    def plan(n):
        r = Replica("CPU", "local", 1, 8 // n, n)
        return Plan((Stage(0, 3, (r,)), Stage(4, 7, (r,))))

    assert interleave_problem(plan(4), 7, 2) is None
    assert "not a multiple of its 2 stages" in interleave_problem(plan(1), 7, 2)
    assert "use fewer virtual stages" in interleave_problem(plan(4), 7, 4)
    one = Plan((Stage(0, 7, (Replica("CPU", "local", 1, 2, 4),)),))
    assert ">= 2 pipeline stages" in interleave_problem(one, 7, 2)


def test_engine_refuses_interleaving_it_cannot_run_with_the_field_and_fix():
    from sailor_runtime.engine import EngineError, TrainConfig
    from sailor_runtime.engine.examples import PP2, interleaved_job
    from sailor_runtime.engine.options import describe, unsupported_reason
    from sailor_sim import ExecutionOptions, SailorError

    v2 = ExecutionOptions(virtual_stages=2)
    assert unsupported_reason(v2, interleaved_job(2), PP2) is None
    assert "the job was planned with 1" in unsupported_reason(v2, interleaved_job(1), PP2)
    with pytest.raises(EngineError, match="schedule: is 'gpipe'; interleaved 1F1B"):
        TrainConfig.for_job(interleaved_job(2), PP2, steps=1, options=v2, schedule="gpipe")
    with pytest.raises(EngineError, match="options: virtual_stages: the run asks 2"):
        TrainConfig.for_job(interleaved_job(1), PP2, steps=1, options=v2)
    with pytest.raises(SailorError, match="virtual_stages: must be an integer >= 1"):
        ExecutionOptions(virtual_stages=0)
    assert describe(v2).endswith("interleaved 1F1B x2")


def test_the_engine_refuses_exactly_what_the_simulator_refuses(monkeypatch):
    """One rule: the engine's ``interleave_problem`` is sailor_sim's (``spec.interleave``),
    which the simulator's ``Simulator.check`` and the planner's search apply. Replacing
    sailor_sim's function changes the engine's verdict; and over a set of plans the engine
    refuses a plan exactly when the simulator does, with the same words."""
    from sailor_runtime.engine.options import unsupported_reason
    from sailor_runtime.engine.parallel import schedule
    from sailor_sim import ExecutionOptions as SimOptions
    from sailor_sim import Job, PlanError, Simulator
    from sailor_sim.spec import interleave

    monkeypatch.setattr(interleave, "interleave_problem", lambda plan, head, v: f"sentinel {v}")
    assert schedule.interleave_problem(None, 7, 3) == "virtual_stages: sentinel 3"
    monkeypatch.undo()

    def plan(bounds, counts):
        reps = tuple(Replica("CPU", "local", 1, 1, c) for c in counts)
        return Plan(tuple(Stage(a, b, reps) for a, b in bounds))

    sim = Simulator()
    plans = [
        plan(((0, 3), (4, 7)), [4, 4]),
        plan(((0, 3), (4, 7)), [3, 5]),
        plan(((0, 1), (2, 7)), [4, 4]),
        plan(((0, 2), (3, 5), (6, 7)), [6, 2]),
        plan(((0, 2), (3, 5), (6, 7)), [3, 5]),
        plan(((0, 7),), [8]),
    ]
    refused = 0
    for v in (1, 2, 3):
        job = Job.create("tiny-gpt", 8, 32, options=SimOptions(virtual_stages=v))
        for p in plans:
            engine = unsupported_reason(SimOptions(virtual_stages=v), job, p)
            try:
                sim.estimate(job, p)
                simulator = None
            except PlanError as exc:
                simulator = str(exc).removeprefix("options.")
                refused += 1
            assert engine == simulator, (v, p.describe())
    assert refused == 10  # all but the first plan, at v = 2 and at v = 3
