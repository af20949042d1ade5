"""Build one pipeline stage (a contiguous range of layer ids) of a catalog model.

Layers live in ``StageModule.layers``, a ModuleDict keyed by ``str(layer_id)``, so parameter
names (``layers.3.attn.q.weight``) are the same whatever the plan: checkpoints key on them.

Initial weights do not depend on the plan: every parameter's *full* tensor is drawn from its own
generator, seeded by (seed, layer id, parameter name), and each TP rank keeps its chunk. So a
stage of any plan starts from the same weights as the single-process model.
"""

from __future__ import annotations

import zlib

import torch
from torch import nn

from sailor_sim import ModelSpec, ValidationError, get_model

from .layers import MLP, Attention, Block, Embedding, Head, Norm, ParamFactory, init_std
from .parallelize import materialize, parallelize
from .sequence import gather_sequence, split_sequence
from .tp import RowParallelLinear, _active, get_split


class StageModule(nn.Module):
    """Layers ``first_layer..last_layer`` of ``spec``; ``forward`` runs them in order.

    Input: token ids ``[b, s]`` when the stage holds layer 0, else hidden ``[b, s, h]``;
    ``labels`` ``[b, s]`` when it holds the head. Output: hidden, or the mean loss.
    Built full size (TP 1); ``parallelize`` shards it.
    """

    def __init__(
        self, spec: ModelSpec, first_layer: int, last_layer: int, factory: ParamFactory
    ) -> None:
        super().__init__()
        missing = ", ".join(spec.simulated_only_features)
        if missing:
            raise ValidationError(
                f"{spec.name}: the model zoo does not build {missing} yet (the simulator and "
                "planner do); profile or train a dense model",
                field="model",
            )
        spec.check_layer_id(first_layer, "first_layer")
        spec.check_layer_id(last_layer, "last_layer")
        if last_layer < first_layer:
            raise ValueError(f"last_layer {last_layer} < first_layer {first_layer}")
        self.spec, self.first_layer, self.last_layer = spec, first_layer, last_layer
        self.tp_rank, self.tp_size = 0, 1
        self.sequence_group = None
        """The TP group when sequence parallelism is on (``sequence``), else None."""
        self.layers = nn.ModuleDict(
            {str(i): make_layer(spec, i, factory) for i in range(first_layer, last_layer + 1)}
        )

    @property
    def layer_ids(self) -> range:
        return range(self.first_layer, self.last_layer + 1)

    @property
    def has_head(self) -> bool:
        return self.last_layer == self.spec.head_layer_id

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        chunked = False  # sequence parallelism: blocks and head see this rank's chunk
        for lid, layer in self.layers.items():
            if self.sequence_group is not None and not chunked and not isinstance(layer, Embedding):
                x, chunked = split_sequence(x, self.sequence_group), True
            if int(lid) == self.spec.head_layer_id:
                if labels is None:
                    raise ValueError("the stage holds the head: pass labels")
                return layer(x, labels)
            x = layer(x)
        return gather_sequence(x, self.sequence_group) if chunked else x

    def layer_params(self, layer_id: int) -> dict[str, nn.Parameter]:
        """Parameters of one layer, by name within the layer."""
        return dict(self.layers[str(layer_id)].named_parameters())

    def example_input(self, layer_id: int, mbs: int, seq: int) -> tuple[torch.Tensor, ...]:
        p = next(self.parameters())
        return example_input(self.spec, layer_id, mbs, seq, p.dtype, p.device)


def make_layer(spec: ModelSpec, layer_id: int, tp: ParamFactory) -> nn.Module:
    kind = spec.layer_kind(layer_id)
    if kind == "embedding":
        return Embedding(spec, tp)
    if kind == "head":
        return Head(spec, tp)
    return Block(spec, tp)


def build_stage(
    spec: ModelSpec | str,
    first_layer: int,
    last_layer: int,
    tp_rank: int = 0,
    tp_size: int = 1,
    tp_group=None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int | None = 0,
) -> StageModule:
    """Layers ``first_layer..last_layer`` (inclusive layer ids) for one rank of a TP group.

    ``seed=None`` (or the meta device) leaves the weights uninitialized, e.g. to count
    parameters of a large model on ``torch.device('meta')``.
    """
    spec = get_model(spec)
    if not 0 <= tp_rank < tp_size:
        raise ValueError(f"tp_rank {tp_rank} is outside 0..{tp_size - 1}")
    # Full size on the meta device (no memory), then this rank's shard, then real storage.
    stage = StageModule(spec, first_layer, last_layer, ParamFactory(dtype, "meta"))
    parallelize(stage, tp_rank, tp_size, tp_group)
    materialize(stage, device)
    tie_embeddings(stage)
    if seed is not None and torch.device(device).type != "meta":
        init_parameters(stage, seed)
    return stage


def full_shape(param: torch.Tensor) -> tuple[int, ...]:
    """Shape of the full (unsharded) tensor a TP shard belongs to."""
    shape = list(param.shape)
    split = get_split(param)
    if split is not None:
        shape[split[0]] *= split[1]
    return tuple(shape)


def shard(full: torch.Tensor, split, tp_rank: int) -> torch.Tensor:
    """The ``tp_rank``-th chunk of ``full`` under ``split`` (a contiguous copy)."""
    if split is None:
        return full.contiguous()
    dim, size = split
    return full.chunk(size, dim)[tp_rank].contiguous()


TIED_EMBEDDING = (0, "word.weight")
"""(layer id, name) of the input embedding matrix, which a tied LM head shares."""
TIED_HEAD_NAME = "lm_head.weight"


def is_tied_head(spec: ModelSpec, layer_id: int, name: str) -> bool:
    """Whether (layer id, name) is the LM head of a model that ties it to the embedding."""
    return spec.tie_word_embeddings and layer_id == spec.head_layer_id and name == TIED_HEAD_NAME


def tie_embeddings(stage: StageModule) -> None:
    """A tied model (``tie_word_embeddings``) whose stage holds both the embedding and the head
    uses one matrix for both (the head's is the embedding's Parameter: counted, updated and
    checkpointed once per layer id). A stage with only one of them keeps its own copy, as
    Megatron does on the last pipeline stage; both copies start equal (``init_parameters``)
    and the engine adds their gradients every step (``engine.parallel.tied``)."""
    head = stage.spec.head_layer_id
    if stage.spec.tie_word_embeddings and 0 in stage.layer_ids and head in stage.layer_ids:
        stage.layers[str(head)].lm_head.weight = stage.layers["0"].word.weight


def param_seed(seed: int, layer_id: int, name: str) -> int:
    return (seed * 1_000_003 + layer_id * 7919 + zlib.crc32(name.encode())) % (2**63)


@torch.no_grad()
def init_parameters(stage: StageModule, seed: int) -> None:
    """Plan-independent initialization (see module docstring)."""
    for lid in stage.layer_ids:
        for name, p in stage.layer_params(lid).items():
            std = init_std(name, stage.spec)
            if std is None:
                p.fill_(0.0 if name.endswith("bias") else 1.0)
                continue
            # A tied head starts as the embedding (the same seed), on any stage.
            seed_of = TIED_EMBEDDING if is_tied_head(stage.spec, lid, name) else (lid, name)
            gen = torch.Generator(device="cpu").manual_seed(param_seed(seed, *seed_of))
            full = torch.randn(full_shape(p), generator=gen, dtype=torch.float32) * std
            p.copy_(shard(full, get_split(p), stage.tp_rank).to(p.dtype))


def example_input(
    spec: ModelSpec | str,
    layer_id: int,
    mbs: int,
    seq: int,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> tuple[torch.Tensor, ...]:
    """Arguments for one layer's forward (see the contract in ``layers``): ``(tokens,)``,
    ``(hidden,)`` with ``requires_grad`` so its backward can be timed, or ``(hidden, labels)``."""
    spec = get_model(spec)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    kind = spec.layer_kind(layer_id)
    tokens = torch.randint(0, spec.vocab_size, (mbs, seq), generator=gen).to(device)
    if kind == "embedding":
        return (tokens,)
    hidden = torch.randn(mbs, seq, spec.hidden_size, generator=gen).to(device, dtype)
    hidden.requires_grad_(True)
    return (hidden,) if kind == "block" else (hidden, tokens)


def layer_forward_backward(layer: nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Run one layer's forward and backward standalone (what the profiler times).

    The backward of a block or the embedding uses an all-ones output gradient."""
    out = layer(*inputs)
    out.backward(None if out.dim() == 0 else torch.ones_like(out))
    return out.detach()


def enable_sequence_parallel(stage: nn.Module, group) -> nn.Module:
    """Switch a parallelized stage's blocks and head to sequence parallelism over ``group``
    (its TP group; None or one rank: nothing changes). Returns ``stage``."""
    if not _active(group):
        return stage
    stage.sequence_group = group
    for layer in stage.modules():
        if isinstance(layer, Block | Head):
            for module in layer.modules():
                if isinstance(module, Attention | MLP | RowParallelLinear | Norm | Head):
                    module.sequence_group = group
    return stage
