"""Pipeline execution of one iteration on one rank: 1F1B (or GPipe) with p2p between stages.

Links between stages of different TP degree (Megatron's scatter/gather, Narayanan et al. 2021,
Sec. 4.1, generalized to unequal degrees): the hidden state is replicated on every rank of the
sending TP group (size a); the receiving group (size b) needs it on every rank too. The flat
tensor is cut into b equal chunks; receiver rank k gets only chunk k, from sender rank k mod a,
and the receivers all-gather the chunks inside their TP group. Gradients flow back the same way
with the roles of a and b swapped. Every boundary transfer goes through
``torch.distributed.batch_isend_irecv`` and is waited for before the compute that follows;
a send is paired with the next receive from the same neighbour in one batch (``_post``), the
order Megatron-LM uses in 1F1B, which cannot deadlock for any depth or microbatch count even
where a send blocks until its receive is posted (NCCL with large messages).

Loss weighting: a microbatch of ``mbs`` samples contributes ``loss_mb * mbs / global_batch``,
so the summed gradients over all microbatches and replicas are those of the mean loss over the
whole global batch, whatever the microbatch sizes.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .topology import Slot, Topology

TAGS = {"F": 11, "B": 12}  # activations, gradients (gloo matches p2p by tag)


def schedule(kind: str, num_stages: int, stage: int, num_micro: int) -> list[tuple[str, int]]:
    """Ordered ('F' | 'B', microbatch) operations of one stage (Narayanan et al. 2021, Fig. 4)."""
    if kind == "gpipe":
        return [("F", m) for m in range(num_micro)] + [("B", m) for m in range(num_micro)]
    if kind != "1f1b":
        raise ValueError(f"unknown schedule {kind!r}; use '1f1b' or 'gpipe'")
    warm = min(num_stages - stage - 1, num_micro)
    ops = [("F", m) for m in range(warm)]
    for m in range(num_micro - warm):
        ops += [("F", warm + m), ("B", m)]
    return ops + [("B", m) for m in range(num_micro - warm, num_micro)]


@dataclass
class Transfer:
    """One boundary transfer of this rank: its point-to-point ops, and for a receive the
    buffer and how to finish it (the all-gather inside the TP group)."""

    peer_stage: int
    ops: list
    finish: object = None

    def result(self) -> torch.Tensor:
        return self.finish()


@dataclass
class Link:
    """This rank's p2p endpoints in its pipeline."""

    topo: Topology
    slot: Slot
    tp_group: object | None

    def _peers(self, stage: int) -> list[int]:
        return self.topo.tp_ranks(stage, self.slot.replica)

    def send(self, tensor: torch.Tensor, to_stage: int, tag: int) -> Transfer:
        """This rank's share of ``tensor`` (replicated in our TP group) for ``to_stage``."""
        flat = tensor.detach().contiguous().reshape(-1)
        receivers = self._peers(to_stage)
        mine = self.topo.tp(self.slot.stage, self.slot.replica)
        chunks = flat.chunk(len(receivers))
        ops = [
            dist.P2POp(dist.isend, chunks[k], dst, tag=tag)
            for k, dst in enumerate(receivers)
            if k % mine == self.slot.tp_rank
        ]
        return Transfer(to_stage, ops)

    def recv(self, shape, dtype, device, from_stage: int, tag: int) -> Transfer:
        """Our chunk from ``from_stage``; ``result()`` all-gathers the full tensor in our TP
        group once the transfer has completed."""
        senders = self._peers(from_stage)
        mine = self.topo.tp(self.slot.stage, self.slot.replica)
        # mbs * seq * hidden: hidden is divisible by every TP degree (TP divides the heads)
        chunk = torch.empty(math.prod(shape) // mine, dtype=dtype, device=device)
        src = senders[self.slot.tp_rank % len(senders)]

        def finish() -> torch.Tensor:
            if mine == 1:
                return chunk.view(shape)
            parts = [torch.empty_like(chunk) for _ in range(mine)]
            dist.all_gather(parts, chunk, group=self.tp_group)
            return torch.cat(parts).view(shape)

        return Transfer(from_stage, [dist.P2POp(dist.irecv, chunk, src, tag=tag)], finish)


def exchange(*transfers: Transfer | None) -> None:
    """Post the transfers as one ``batch_isend_irecv`` (one NCCL group) and wait for all."""
    ops = [op for t in transfers if t is not None for op in t.ops]
    if ops:
        for req in dist.batch_isend_irecv(ops):
            req.wait()


@dataclass(frozen=True)
class Msg:
    """One boundary message of one microbatch: ``what`` 'F' (activation, to the next stage)
    or 'B' (gradient, to the previous one), with the neighbour stage ``peer``."""

    what: str
    micro: int
    peer: int


@dataclass(frozen=True)
class Post:
    """Messages posted as one batch; the rank waits for all of them before going on."""

    sends: tuple[Msg, ...]
    recvs: tuple[Msg, ...]


def boundary_steps(kind: str, num_stages: int, stage: int, num_micro: int, pair: bool = True):
    """This stage's iteration as ('F' | 'B', microbatch) compute steps and ``Post`` batches.

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
        yield op, m
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


def _autocast(device_type: str, dtype: torch.dtype | None):
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=dtype)


@dataclass(frozen=True)
class Microbatches:
    """What one rank feeds its stage in one iteration: token ids for the first stage, labels
    for the last (None elsewhere), each a list of ``[mbs, seq]`` tensors."""

    mbs: int
    num_micro: int
    seq_len: int
    inputs: list | None = None
    labels: list | None = None


def run_iteration(
    stage_module,
    link: Link,
    batch: Microbatches,
    global_batch: int,
    kind: str = "1f1b",
    autocast: torch.dtype | None = None,
    loss_scale: float = 1.0,
) -> torch.Tensor | None:
    """Forward and backward of every microbatch of this rank's replica (gradients accumulate
    in ``.grad``: gradient accumulation over the replica's microbatches); returns the weighted
    (and ``loss_scale``-scaled) loss sum on the last stage as a tensor (read back once per
    step, with the gradient norm), else None.

    ``autocast``: the forward runs under ``torch.autocast`` in that dtype (mixed precision;
    backward outside it, as torch recommends). Stage boundaries stay in the parameters' dtype
    (fp32): the residual stream is fp32 under autocast, so p2p sends what one process keeps."""
    topo, slot = link.topo, link.slot
    first, last = slot.stage == 0, slot.stage == topo.num_stages - 1
    p = next(stage_module.parameters())
    hidden = (batch.mbs, batch.seq_len, stage_module.spec.hidden_size)
    weight = batch.mbs / global_batch * loss_scale
    stash: dict[int, tuple] = {}  # microbatch -> (stage input, stage output) until its backward
    to_send: dict[tuple[str, int], torch.Tensor] = {}
    received: dict[tuple[str, int], Transfer] = {}
    loss_sum = None
    for step in boundary_steps(kind, topo.num_stages, slot.stage, batch.num_micro):
        if isinstance(step, Post):
            sends = [
                link.send(to_send.pop((s.what, s.micro)), s.peer, TAGS[s.what]) for s in step.sends
            ]
            recvs = [link.recv(hidden, p.dtype, p.device, r.peer, TAGS[r.what]) for r in step.recvs]
            exchange(*sends, *recvs)
            received.update({(r.what, r.micro): t for r, t in zip(step.recvs, recvs, strict=True)})
            continue
        op, m = step
        if op == "F":
            x = batch.inputs[m] if first else received.pop(("F", m)).result().requires_grad_(True)
            with _autocast(p.device.type, autocast):
                out = stage_module(x, batch.labels[m] if last else None)
            out = out.to(p.dtype)
            if last:
                out = out * weight
                loss = out.detach().double()
                loss_sum = loss if loss_sum is None else loss_sum + loss
            else:
                to_send[("F", m)] = out
            stash[m] = (x, out)
            continue
        x, out = stash.pop(m)
        out.backward(None if last else received.pop(("B", m)).result())
        if not first:
            to_send[("B", m)] = x.grad
    return loss_sum
