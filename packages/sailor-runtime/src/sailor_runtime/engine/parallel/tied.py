"""Tied input embedding and LM head across pipeline stages.

When one stage holds both, the zoo shares one Parameter (``zoo.stage.tie_embeddings``) and
autograd adds both uses' gradients. When the embedding (stage 0) and the head (last stage)
live on different ranks, each keeps a copy, both initialized alike; after the data-parallel
reduction every copy's gradient is replaced by the sum of the two (Megatron's embedding group,
Shoeybi et al. 2019), so both copies take the same AdamW step and stay equal.

Where each replica has the same TP degree on both stages, TP rank t of a replica holds the
same vocabulary rows in both copies: the two ranks all-reduce their shard between themselves
(``topology.tied_group_ranks``), 1/tp of the matrix, and no other rank takes part. The stages
may also use different TP degrees (a vocabulary shard of one is not a shard of the other);
then the sum is formed in full-vocabulary coordinates: replica 0's ranks of the two stages add
their shard into a zero [vocab, hidden] buffer at their rows, one all-reduce over the ranks of
the two stages adds them (ranks without a shard of replica 0 add zeros), and each copy reads
its rows back. Only tied models with more than one stage sync at all.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from sailor_profiler import TIED_EMBEDDING, TIED_HEAD_NAME
from sailor_sim import Plan

from .topology import Slot


def syncs_tied_copies(spec, plan: Plan) -> bool:
    """Whether this run keeps two copies (a tied model, ``spec`` its ModelSpec, over more than
    one stage); the same answer on every rank."""
    return spec.tie_word_embeddings and len(plan.stages) > 1


def tied_copies(model) -> list[torch.nn.Parameter]:
    """The copies of the tied matrix this rank holds (0 or 1 when stages differ)."""
    out = []
    lid, name = TIED_EMBEDDING
    head = model.spec.head_layer_id
    if lid in model.layer_ids:
        out.append(model.layer_params(lid)[name])
    if head in model.layer_ids:
        out.append(model.layer_params(head)[TIED_HEAD_NAME])
    return out


def head_copy(model) -> torch.nn.Parameter | None:
    """The head's copy on a rank without the embedding (left out of the gradient norm, so the
    shared matrix counts once, as in one process)."""
    head = model.spec.head_layer_id
    if head in model.layer_ids and 0 not in model.layer_ids:
        return model.layer_params(head)[TIED_HEAD_NAME]
    return None


def sync_tied_gradients(model, slot: Slot, groups) -> None:
    """Every copy's gradient becomes the sum of both copies' (a collective over ``groups.tied``;
    nothing on a rank outside the two stages)."""
    if groups.tied is None:
        return
    copies = tied_copies(model)
    if groups.tied_pairs:  # the same rows on both ranks of the pair
        for p in copies:
            dist.all_reduce(p.grad, group=groups.tied)
        return
    spec = model.spec
    ref = copies[0]
    full = torch.zeros(spec.vocab_size, spec.hidden_size, dtype=ref.dtype, device=ref.device)
    rows = _rows(model, spec.vocab_size)
    if slot.replica == 0:  # every replica holds the same reduced gradient: count it once
        for p in copies:
            full[rows].add_(p.grad)
    dist.all_reduce(full, group=groups.tied)
    for p in copies:
        p.grad.copy_(full[rows])


def _rows(model, vocab: int) -> slice:
    """This rank's vocabulary rows (the zoo splits the vocabulary in contiguous chunks)."""
    per = vocab // model.tp_size
    return slice(model.tp_rank * per, (model.tp_rank + 1) * per)
