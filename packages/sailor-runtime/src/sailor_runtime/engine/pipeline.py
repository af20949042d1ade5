"""Pipeline execution of one iteration on one rank: 1F1B (or GPipe) with p2p between stages.

Links between stages of different TP degree (Megatron's scatter/gather, Narayanan et al. 2021,
Sec. 4.1, generalized to unequal degrees): the hidden state is replicated on every rank of the
sending TP group (size a); the receiving group (size b) needs it on every rank too. The flat
tensor is cut into b equal chunks; receiver rank k gets only chunk k, from sender rank k mod a,
and the receivers all-gather the chunks inside their TP group. Gradients flow back the same way
with the roles of a and b swapped. Sends are non-blocking (kept until the iteration ends),
receives block; with the 1F1B order this cannot deadlock.

Loss weighting: a microbatch of ``mbs`` samples contributes ``loss_mb * mbs / global_batch``,
so the summed gradients over all microbatches and replicas are those of the mean loss over the
whole global batch, whatever the microbatch sizes.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from .topology import Slot, Topology

TAG_FORWARD, TAG_BACKWARD = 11, 12


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
class Link:
    """This rank's p2p endpoints in its pipeline."""

    topo: Topology
    slot: Slot
    tp_group: object | None
    pending: list = field(default_factory=list)

    def _peers(self, stage: int) -> list[int]:
        return self.topo.tp_ranks(stage, self.slot.replica)

    def send(self, tensor: torch.Tensor, to_stage: int, tag: int) -> None:
        """Send this rank's share of ``tensor`` (replicated in our TP group) to ``to_stage``."""
        flat = tensor.detach().contiguous().reshape(-1)
        receivers = self._peers(to_stage)
        mine = self.topo.tp(self.slot.stage, self.slot.replica)
        chunks = flat.chunk(len(receivers))
        for k, dst in enumerate(receivers):
            if k % mine == self.slot.tp_rank:
                buf = chunks[k].clone()
                self.pending.append((dist.isend(buf, dst, tag=tag), buf))

    def recv(self, shape, dtype, device, from_stage: int, tag: int) -> torch.Tensor:
        """Receive our chunk from ``from_stage`` and all-gather the full tensor in our TP group."""
        senders = self._peers(from_stage)
        mine = self.topo.tp(self.slot.stage, self.slot.replica)
        # mbs * seq * hidden: hidden is divisible by every TP degree (TP divides the heads)
        chunk = torch.empty(math.prod(shape) // mine, dtype=dtype, device=device)
        dist.recv(chunk, senders[self.slot.tp_rank % len(senders)], tag=tag)
        if mine == 1:
            return chunk.view(shape)
        parts = [torch.empty_like(chunk) for _ in range(mine)]
        dist.all_gather(parts, chunk, group=self.tp_group)
        return torch.cat(parts).view(shape)

    def wait_all(self) -> None:
        for work, _ in self.pending:
            work.wait()
        self.pending.clear()


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
    stash: dict[int, tuple] = {}
    loss_sum = None
    for op, m in schedule(kind, topo.num_stages, slot.stage, batch.num_micro):
        if op == "F":
            if first:
                x = batch.inputs[m]
            else:
                x = link.recv(hidden, p.dtype, p.device, slot.stage - 1, TAG_FORWARD)
                x.requires_grad_(True)
            with _autocast(p.device.type, autocast):
                out = stage_module(x, batch.labels[m] if last else None)
            out = out.to(p.dtype)
            if last:
                out = out * weight
                loss = out.detach().double()
                loss_sum = loss if loss_sum is None else loss_sum + loss
            else:
                link.send(out, slot.stage + 1, TAG_FORWARD)
            stash[m] = (x, out)
            continue
        x, out = stash.pop(m)
        if last:
            out.backward()
        else:
            out.backward(link.recv(hidden, p.dtype, p.device, slot.stage + 1, TAG_BACKWARD))
        if not first:
            link.send(x.grad, slot.stage - 1, TAG_BACKWARD)
    link.wait_all()
    return loss_sum
