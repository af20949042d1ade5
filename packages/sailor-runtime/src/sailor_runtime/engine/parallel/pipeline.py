"""Pipeline execution of one iteration on one rank: 1F1B, GPipe or interleaved 1F1B (virtual
stages: ``ChunkedStage``) with p2p between stages; the order of compute steps and p2p batches
is ``schedule``'s.

Links between stages of different TP degree (Megatron's scatter/gather, Narayanan et al. 2021,
Sec. 4.1, generalized to unequal degrees): the hidden state is replicated on every rank of the
sending TP group (size a); the receiving group (size b) needs it on every rank too. The flat
tensor is cut into b equal chunks; receiver rank k gets only chunk k, from sender rank k mod a,
and the receivers all-gather the chunks inside their TP group. Gradients flow back the same way
with the roles of a and b swapped. Every boundary transfer goes through
``torch.distributed.batch_isend_irecv`` and is waited for before the compute that follows;
the batches are Megatron-LM's (``schedule.boundary_steps``, ``schedule.interleaved_steps``),
which cannot deadlock for any depth, chunk count or microbatch count even where a send blocks
until its receive is posted (NCCL with large messages).

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

from .schedule import Msg, Post, Unit, boundary_steps, iteration_steps, schedule
from .topology import Slot, Topology

__all__ = [
    "ChunkedStage",
    "Link",
    "Microbatches",
    "Msg",
    "Post",
    "Unit",
    "boundary_steps",
    "chunks_of",
    "exchange",
    "run_iteration",
    "schedule",
]

TAGS = {"F": 11, "B": 12}  # activations, gradients (gloo matches p2p by tag)


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


class ChunkedStage(torch.nn.Module):
    """The v model chunks of one pipeline rank under interleaved 1F1B, seen by the rest of the
    engine as one stage: ``layers`` holds every chunk's layers by layer id (parameter names
    ``layers.<id>.…`` as in a ``StageModule``, so checkpoints, weight-decay groups and tied
    copies find them the same way), ``layer_ids`` / ``layer_params`` / ``spec`` / ``tp_rank``
    / ``tp_size`` as a stage has them. ``chunks`` (not registered: each parameter is counted
    once) run the forward of their own layers."""

    def __init__(self, chunks: list) -> None:
        super().__init__()
        self.chunks = tuple(chunks)
        self.layers = torch.nn.ModuleDict(
            {lid: layer for chunk in chunks for lid, layer in chunk.layers.items()}
        )
        self.spec = chunks[0].spec
        self.tp_rank, self.tp_size = chunks[0].tp_rank, chunks[0].tp_size

    @property
    def layer_ids(self) -> list[int]:
        return sorted(int(lid) for lid in self.layers)

    @property
    def has_head(self) -> bool:
        return self.chunks[-1].has_head

    def layer_params(self, layer_id: int) -> dict:
        return dict(self.layers[str(layer_id)].named_parameters())


def chunks_of(stage_module) -> tuple:
    """The model chunks of a rank, in chunk order (one: a plain stage)."""
    return getattr(stage_module, "chunks", (stage_module,))


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
    step, with the gradient norm), else None. A ``ChunkedStage`` runs interleaved 1F1B over
    its chunks (``schedule.interleaved_steps``); the first virtual stage (chunk 0 of stage 0)
    reads the token ids, the last (the last chunk of the last stage) the labels.

    ``autocast``: the forward runs under ``torch.autocast`` in that dtype (mixed precision;
    backward outside it, as torch recommends). Stage boundaries stay in the parameters' dtype
    (fp32): the residual stream is fp32 under autocast, so p2p sends what one process keeps."""
    topo, slot = link.topo, link.slot
    chunks = chunks_of(stage_module)
    v = len(chunks)
    p = next(stage_module.parameters())
    hidden = (batch.mbs, batch.seq_len, stage_module.spec.hidden_size)
    weight = batch.mbs / global_batch * loss_scale
    stash: dict[tuple[int, int], tuple] = {}  # (micro, chunk) -> (input, output) until backward
    to_send: dict[tuple[str, int, int], torch.Tensor] = {}
    received: dict[tuple[str, int, int], Transfer] = {}
    loss_sum = None
    steps = iteration_steps(kind, topo.num_stages, slot.stage, v, batch.num_micro)
    for step in steps:
        if isinstance(step, Post):
            sends = [
                link.send(to_send.pop((s.what, s.micro, s.chunk)), s.peer, TAGS[s.what])
                for s in step.sends
            ]
            recvs = [link.recv(hidden, p.dtype, p.device, r.peer, TAGS[r.what]) for r in step.recvs]
            exchange(*sends, *recvs)
            received.update(
                {(r.what, r.micro, r.chunk): t for r, t in zip(step.recvs, recvs, strict=True)}
            )
            continue
        op, m, c = step
        first = slot.stage == 0 and c == 0
        last = slot.stage == topo.num_stages - 1 and c == v - 1
        if op == "F":
            if first:
                x = batch.inputs[m]
            else:
                x = received.pop(("F", m, c)).result().requires_grad_(True)
            with _autocast(p.device.type, autocast):
                out = chunks[c](x, batch.labels[m] if last else None)
            out = out.to(p.dtype)
            if last:
                out = out * weight
                loss = out.detach().double()
                loss_sum = loss if loss_sum is None else loss_sum + loss
            else:
                to_send[("F", m, c)] = out
            stash[(m, c)] = (x, out)
            continue
        x, out = stash.pop((m, c))
        out.backward(None if last else received.pop(("B", m, c)).result())
        if not first:
            to_send[("B", m, c)] = x.grad
    return loss_sum
