"""What each pipeline rank computes, in which order, and which p2p batches it posts between
its computations: GPipe, 1F1B, and interleaved 1F1B with virtual stages. Torch-free: the
order is data (``tests/test_pipeline_order.py`` and ``tests/test_pipeline_interleaved.py``
play every rank's batches against each other without a process group).

A compute step is ``Unit(op, micro, chunk)``: forward ('F') or backward ('B') of one
microbatch through one of the rank's model chunks (chunk 0 without interleaving). A ``Post``
is one ``batch_isend_irecv``: its messages are posted together and all waited for.

Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2.2; Megatron-LM's
``forward_backward_pipelining_with_interleaving``): with p ranks and v chunks per rank the
model is cut into p v chunks; chunk k of rank r is virtual stage ``k p + r``, so activations
go round the ring r -> r + 1 (and p - 1 -> 0 into the next chunk). Megatron's order: the
microbatch count m must be a multiple of p (``interleave_problem``, which is sailor_sim's
``spec.interleave`` rule, refuses others); virtual microbatch j (0 <= j < m v) is
microbatch ``(j // (p v)) p + j % p`` through chunk ``(j // p) % v`` forward (chunk
``v - 1 -`` that backward); rank r runs ``min(2 (p - r - 1) + (v - 1) p, m v)`` warm-up
forwards (all of them when m = p), then forward/backward pairs, then the remaining
backwards. Its p2p is Megatron's too: after each compute step one batch sends what that step
produced and receives what the neighbours send in their matching step (one step ahead), so no
rank waits in a send whose receive is not posted.

NCCL matches point-to-point messages between two ranks in the order they are posted, ignoring
tags. With p = 2 both neighbours are one rank, and one batch can carry an activation and a
gradient each way; every batch therefore lists activations before gradients, on both sides
(Megatron's own in-batch order, gradient first on the send side and activation first on the
receive side, pairs the wrong tensors there; the order test shows it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import sailor_sim as _interleave  # its face: chunk_layers, interleave_problem (spec.interleave)


class Unit(NamedTuple):
    """One compute step: forward or backward ('F' | 'B') of a microbatch through a chunk."""

    op: str
    micro: int
    chunk: int = 0


@dataclass(frozen=True)
class Msg:
    """One boundary message of one microbatch: ``what`` 'F' (activation, to the next stage)
    or 'B' (gradient, to the previous one), with the neighbour stage ``peer``; ``chunk``: this
    rank's chunk that produced it (a send) or will consume it (a receive)."""

    what: str
    micro: int
    peer: int
    chunk: int = 0


@dataclass(frozen=True)
class Post:
    """Messages posted as one batch; the rank waits for all of them before going on."""

    sends: tuple[Msg, ...]
    recvs: tuple[Msg, ...]


def schedule(kind: str, num_stages: int, stage: int, num_micro: int) -> list[tuple[str, int]]:
    """Ordered ('F' | 'B', microbatch) operations of one stage without interleaving
    (Narayanan et al. 2021, Fig. 4)."""
    if kind == "gpipe":
        return [("F", m) for m in range(num_micro)] + [("B", m) for m in range(num_micro)]
    if kind != "1f1b":
        raise ValueError(f"unknown schedule {kind!r}; use '1f1b' or 'gpipe'")
    warm = min(num_stages - stage - 1, num_micro)
    ops = [("F", m) for m in range(warm)]
    for m in range(num_micro - warm):
        ops += [("F", warm + m), ("B", m)]
    return ops + [("B", m) for m in range(num_micro - warm, num_micro)]


def boundary_steps(kind: str, num_stages: int, stage: int, num_micro: int, pair: bool = True):
    """This stage's iteration as ``Unit`` compute steps and ``Post`` batches (no interleaving).

    Megatron-LM's pairing in 1F1B (``send_forward_recv_backward`` /
    ``send_backward_recv_forward``, Narayanan et al. 2021): a send and the next receive travel
    in one batch when they are with the same neighbour, so neither side's send waits for a
    receive the other posts only after its own send; otherwise the send completes first. This
    order completes for any depth and microbatch count even when every send blocks until its
    receive is posted (NCCL, large messages), which ``tests/test_pipeline_order.py`` checks by
    playing all stages against each other. ``pair=False`` posts every send alone: the order
    that deadlocks, kept so that test shows the difference."""
    first, last = stage == 0, stage == num_stages - 1
    outgoing = None
    for op, m in schedule(kind, num_stages, stage, num_micro):
        if op == "F":
            incoming = None if first else Msg("F", m, stage - 1)
        else:
            incoming = None if last else Msg("B", m, stage + 1)
        yield from _posts(outgoing, incoming, pair)
        yield Unit(op, m)
        if op == "F":
            outgoing = None if last else Msg("F", m, stage + 1)
        else:
            outgoing = None if first else Msg("B", m, stage - 1)
    yield from _posts(outgoing, None, pair)


def _posts(outgoing: Msg | None, incoming: Msg | None, pair: bool):
    if pair and outgoing and incoming and outgoing.peer == incoming.peer:
        yield Post((outgoing,), (incoming,))
        return
    if outgoing:
        yield Post((outgoing,), ())
    if incoming:
        yield Post((), (incoming,))


# ---- interleaved 1F1B ------------------------------------------------------------------------
def _warm_up(p: int, stage: int, v: int, num_micro: int) -> int:
    """Forwards rank ``stage`` runs before its first backward (Megatron's count)."""
    total = num_micro * v
    if p == num_micro:  # Megatron: all forwards, then all backwards
        return total
    return min(2 * (p - stage - 1) + (v - 1) * p, total)


def interleaved_order(num_stages: int, stage: int, chunks: int, num_micro: int) -> list[Unit]:
    """Megatron's interleaved compute order of rank ``stage`` (module docstring)."""
    p, v, total = num_stages, chunks, num_micro * chunks
    warm = _warm_up(p, stage, v, num_micro)
    fwd = [_virtual(j, p, v, True) for j in range(total)]
    bwd = [_virtual(j, p, v, False) for j in range(total)]
    ops = fwd[:warm]
    for i in range(total - warm):
        ops += [fwd[warm + i], bwd[i]]
    return ops + bwd[total - warm :]


def _virtual(j: int, p: int, v: int, forward: bool) -> Unit:
    chunk = (j % (p * v)) // p  # Megatron's get_model_chunk_id (Python's % for j < 0 too)
    micro = (j // (p * v)) * p + j % p
    return Unit("F", micro, chunk) if forward else Unit("B", micro, v - 1 - chunk)


def interleaved_steps(num_stages: int, stage: int, chunks: int, num_micro: int):
    """Rank ``stage``'s interleaved iteration as ``Unit`` and ``Post`` steps, with
    Megatron-LM's communication: one batch after each warm-up forward, each steady
    forward+backward pair and each cool-down backward, sending what the step produced and
    receiving what the neighbours send in their matching step. A received tensor is for the
    next not yet received microbatch of its chunk (each chunk sees its microbatches in order,
    forward and backward)."""
    p, v, r = num_stages, chunks, stage
    total = num_micro * v
    first, last = r == 0, r == p - 1
    warm = _warm_up(p, r, v, num_micro)
    received: dict[tuple[str, int], int] = {}

    def recv(what: str, chunk: int) -> Msg:
        micro = received.get((what, chunk), 0)
        received[(what, chunk)] = micro + 1
        return Msg(what, micro, (r - 1) % p if what == "F" else (r + 1) % p, chunk)

    def sent(u: Unit) -> Msg | None:
        if u.op == "F":
            return None if last and u.chunk == v - 1 else Msg("F", u.micro, (r + 1) % p, u.chunk)
        return None if first and u.chunk == 0 else Msg("B", u.micro, (r - 1) % p, u.chunk)

    if not first:
        yield _batch((), (recv("F", 0),))
    for k in range(warm):
        u = _virtual(k, p, v, True)
        yield u
        next_chunk = _virtual(k + 1, p, v, True).chunk
        recvs = []
        if not (first and next_chunk == 0) and k != total - 1:
            recvs.append(recv("F", next_chunk))
        if k == warm - 1 and warm < total and not last:
            recvs.append(recv("B", v - 1))
        yield _batch((sent(u),), recvs)
    steady = total - warm
    for i in range(steady):
        f, b = _virtual(warm + i, p, v, True), _virtual(i, p, v, False)
        yield f
        yield b
        recvs = _steady_recvs(p, v, r, warm + i, i, i == steady - 1, recv)
        yield _batch((sent(f), sent(b)), recvs)
    if warm == total and not last:
        yield _batch((), (recv("B", v - 1),))
    for k in range(steady, total):
        u = _virtual(k, p, v, False)
        yield u
        next_chunk = _virtual(k + 1, p, v, False).chunk
        wanted = not (last and next_chunk == v - 1) and k != total - 1
        yield _batch((sent(u),), (recv("B", next_chunk),) if wanted else ())


def _steady_recvs(p, v, r, fk, bk, final, recv) -> list[Msg]:
    """Megatron's steady-state receives: the first rank is p - 1 forwards ahead of the last
    (and the last p - 1 backwards ahead of the first), so the ring neighbour's message of this
    step belongs to the chunk after (before) the one it ran."""
    out = []
    if r == 0:
        chunk = _virtual(fk - (p - 1), p, v, True).chunk
        wanted, chunk = chunk != v - 1, chunk + 1
    else:
        wanted, chunk = True, _virtual(fk + 1, p, v, True).chunk
    if wanted and not final:
        out.append(recv("F", chunk))
    if r == p - 1:
        chunk = _virtual(bk - (p - 1), p, v, False).chunk
        wanted, chunk = chunk != 0, chunk - 1
    else:
        wanted, chunk = True, _virtual(bk + 1, p, v, False).chunk
    if wanted:
        out.append(recv("B", chunk))
    return out


def _batch(sends, recvs) -> Post:
    """Activations before gradients on both sides (module docstring: NCCL's per-pair order)."""
    key = {"F": 0, "B": 1}
    return Post(
        tuple(sorted((s for s in sends if s), key=lambda m: key[m.what])),
        tuple(sorted((r for r in recvs if r), key=lambda m: key[m.what])),
    )


def iteration_steps(kind: str, num_stages: int, stage: int, chunks: int, num_micro: int):
    """The steps ``run_iteration`` executes: interleaved with more than one chunk, else
    ``boundary_steps``; empty ``Post`` batches are left out."""
    if chunks == 1:
        yield from boundary_steps(kind, num_stages, stage, num_micro)
        return
    for step in interleaved_steps(num_stages, stage, chunks, num_micro):
        if not isinstance(step, Post) or step.sends or step.recvs:
            yield step


# ---- which layers each chunk holds, and which plans run interleaved ----------------------
# The rule lives in sailor_sim (``sailor_sim.spec.interleave``), where the simulator and the
# planner check it too: the engine runs exactly the interleaved plans they price and propose.
def chunk_layers(stages: list[tuple[int, int]], head_layer_id: int, chunks: int):
    """Layer-id ranges ``[stage][chunk] -> (first, last)`` of an interleaved plan
    (``sailor_sim.spec.interleave.chunk_layers``): stage i keeps its layer ids, its blocks
    split as evenly as they go over v chunks (embedding in the first, head in the last), ids
    dealt chunk 0 of every stage first. Raises ValueError (``PlanError``) naming the stage
    when a chunk would hold no layer."""
    return _interleave.chunk_layers(stages, head_layer_id, chunks)


def interleave_problem(plan, head_layer_id: int, chunks: int) -> str | None:
    """Why ``plan`` cannot run interleaved with ``chunks`` virtual stages (one line naming
    the fix, prefixed with the option as ``options.unsupported_reason`` words it), or None:
    ``sailor_sim.spec.interleave.interleave_problem``, the simulator's and planner's rule."""
    problem = _interleave.interleave_problem(plan, head_layer_id, chunks)
    return None if problem is None else f"virtual_stages: {problem}"
