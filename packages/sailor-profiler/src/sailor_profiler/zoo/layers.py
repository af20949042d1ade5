"""The three layer kinds of a decoder-only transformer, one module per layer id.

Input contract (what the profiler and the pipeline engine feed each layer):

- ``Embedding`` (layer id 0): ``tokens`` int64 ``[b, s]`` -> hidden ``[b, s, h]``.
- ``Block`` (layer ids 1..L): hidden ``[b, s, h]`` -> hidden ``[b, s, h]``.
- ``Head`` (layer id L+1): hidden ``[b, s, h]`` and ``labels`` int64 ``[b, s]`` -> the mean
  token cross-entropy (a scalar).

Under tensor parallelism the hidden state is replicated on every rank of the TP group (Megatron
without sequence parallelism; with it, ``sequence`` gives each rank a chunk of the tokens
between the TP regions). Families: OPT / GPT-Neo (learned positions, LayerNorm, GELU,
biases) and LLaMA (rotary positions, RMSNorm, SwiGLU, no biases, grouped-query attention),
with the shape features of newer ones: heads wider than hidden / heads (``attention_head_dim``,
Qwen3), q/k norms per head (``qk_norm``: one shared weight, Qwen3; a weight per head,
Command-R+) or over the whole projection (OLMo-2), parameter-free norms (``norm_affine``,
OLMo-1), norms after attention and MLP (``sandwich_norm``, Gemma-2/3; ``post_norms`` instead
of before, OLMo-2) and after the embedding
(BLOOM), an LM-head bias (Phi-2), ALiBi (``position='alibi'``: MPT, BLOOM) and parallel
attention + MLP blocks (``parallel_block``: GPT-J, Pythia, Phi-2, Falcon, Command-R). What
``ModelSpec.simulated_only_features`` names is refused (``StageModule``).
Dropout (``ModelSpec.dropout``) is applied only in training mode; runs that must be exactly
reproducible across plans use a spec with dropout 0 (the tiny catalog models) or eval mode.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from sailor_sim import ModelSpec, RopeScaling, rotary_frequencies

from .sequence import gathered_linears, reduce_scatter_from_tp
from .tp import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    copy_to_tp,
    reduce_from_tp,
    set_split,
    shard_parameter,
    sum_over_tp,
    vocab_parallel_cross_entropy,
)


class ParamFactory:
    """The dtype and device every layer creates its (full-size) parameters with; tensor
    parallelism is applied afterwards by ``parallelize``."""

    def __init__(self, dtype: torch.dtype, device) -> None:
        self.dtype, self.device = dtype, device

    def param(self, *shape: int) -> nn.Parameter:
        return set_split(
            nn.Parameter(torch.empty(*shape, dtype=self.dtype, device=self.device)), None
        )


class Norm(nn.Module):
    """LayerNorm (weight + bias) or RMSNorm (weight only; Zhang & Sennrich 2019), replicated."""

    def __init__(self, spec: ModelSpec, tp: ParamFactory) -> None:
        super().__init__()
        self.rms = spec.norm == "rmsnorm"
        self.eps = 1e-5
        affine = spec.norm_affine  # False: OLMo-1's LayerNorm without weight or bias
        self.weight = tp.param(spec.hidden_size) if affine else None
        self.bias = tp.param(spec.hidden_size) if affine and spec.norm_has_bias else None
        self.sequence_group = None
        """Sequence parallelism (``sequence``): this rank sees a chunk of the tokens, so its
        weight and bias gradients are partial sums (``partial_grad_params``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rms:
            return _rms(x, self.weight, self.eps)
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)

    def partial_grad_params(self) -> list[nn.Parameter]:
        """Under sequence parallelism: the weight and bias, whose gradients come from this
        rank's tokens only (summed once per step by ``tp.sync_partial_grads``)."""
        if self.sequence_group is None:
            return []
        return [p for p in (self.weight, self.bias) if p is not None]


def _rms(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019) over the last dimension."""
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x if weight is None else x * weight


class HeadNorm(nn.Module):
    """A norm of each attention head's query or key over its head_dim channels: RMSNorm, or,
    where the model's norms are LayerNorms, a LayerNorm without bias (Command-R+
    ``CohereLayerNorm``, StableLM-2's ``qk_layernorm``). ``per_head`` False (``qk_norm_kind``
    'head', Qwen3 / Gemma-3 ``q_norm``/``k_norm``): one head_dim weight shared by every head,
    replicated under TP; each TP rank normalises only its own heads, so its weight gradient is
    a partial sum (``partial_grad_params``), as a sequence-parallel norm's is, summed once per
    step. ``per_head`` True ('per_head'): a weight per head, split with the heads."""

    def __init__(self, spec: ModelSpec, tp: ParamFactory, heads: int, per_head: bool) -> None:
        super().__init__()
        self.eps = 1e-6  # Qwen3's rms_norm_eps
        self.centred = spec.norm == "layernorm"
        self.per_head = per_head
        shape = (heads, spec.head_dim) if per_head else (spec.head_dim,)
        self.weight = set_split(tp.param(*shape), (0, 1) if per_head else None)

    def parallelize(self, tp_rank: int, tp_size: int, group) -> None:
        if self.per_head:
            self.weight = shard_parameter(self.weight, tp_rank, tp_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: [b, s, heads, head_dim]."""
        if self.centred:  # a LayerNorm is an RMSNorm of the centred input
            x = x - x.mean(-1, keepdim=True)
        return _rms(x, self.weight, self.eps)

    def partial_grad_params(self) -> list[nn.Parameter]:
        """The shared weight: a partial sum over this rank's heads under TP (nothing to sum at
        TP 1: ``tp.sync_partial_grads`` does nothing without a group)."""
        return [] if self.per_head else [self.weight]


class ProjectionNorm(nn.Module):
    """RMSNorm over all of a projection's channels, heads x head_dim (``qk_norm_kind`` 'full':
    OLMo-2 ``q_norm`` / ``k_norm``, applied before the heads are split out). Its weight is split
    with the heads, as the projection is; its statistic sums over every head, so under TP the
    ranks' sums of squares are added first (``projection_norms``). Computed in fp32 and cast
    back, as ``Olmo2RMSNorm`` does."""

    def __init__(self, width: int, tp: ParamFactory) -> None:
        super().__init__()
        self.eps = 1e-6  # OLMo-2's rms_norm_eps
        self.width = width
        self.weight = set_split(tp.param(width), (0, 1))

    def parallelize(self, tp_rank: int, tp_size: int, group) -> None:
        self.weight = shard_parameter(self.weight, tp_rank, tp_size)

    def normalise(self, x: torch.Tensor, sum_sq: torch.Tensor) -> torch.Tensor:
        """``x`` [b, s, this rank's channels] scaled by the whole projection's RMS, from
        ``sum_sq`` [b, s, 1], the sum of squares over every rank's channels."""
        scale = torch.rsqrt(sum_sq / self.width + self.eps)
        return (self.weight * (_at_least_fp32(x) * scale)).to(x.dtype)


def projection_norms(norm_q, norm_k, q: torch.Tensor, k: torch.Tensor, group) -> tuple:
    """q and k through their whole-projection norms: both statistics in one all-reduce each
    way (forward sums, backward their gradients), the two small collectives per block the
    simulator charges for OLMo-2 (``timing.tp_comm_time``)."""
    sums = [_at_least_fp32(x).pow(2).sum(-1) for x in (q, k)]
    sums = sum_over_tp(torch.stack(sums, -1), group)
    return norm_q.normalise(q, sums[..., :1]), norm_k.normalise(k, sums[..., 1:])


def _at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """bf16 / fp16 upcast for a norm's statistics; fp32 and fp64 as they are."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


class Embedding(nn.Module):
    def __init__(self, spec: ModelSpec, tp: ParamFactory) -> None:
        super().__init__()
        self.p = spec.dropout
        self.word = VocabParallelEmbedding(spec.vocab_size, spec.hidden_size, tp.dtype, tp.device)
        self.position = (
            tp.param(spec.position_rows, spec.hidden_size) if spec.position_rows else None
        )
        # BLOOM's word_embeddings_layernorm on the looked-up embeddings
        self.norm = Norm(spec, tp) if spec.embedding_norm else None

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.word(tokens)
        if self.position is not None:
            x = x + self.position[: tokens.shape[1]]
        if self.norm is not None:
            x = self.norm(x)
        return F.dropout(x, self.p, self.training) if self.p else x


def _rotary(
    x: torch.Tensor, base: float, dims: int | None = None, scaling: RopeScaling | None = None
) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021, RoFormer Eq. 34), rotate-half layout, of
    base ``base`` on the first ``dims`` channels of each head (all by default; the rest pass
    through, as Hugging Face's partial rotary does), at the frequencies and cos/sin scale of
    the config's ``scaling`` (``sailor_sim.model.rope``: LLaMA-3.1's, YaRN's, ...).
    ``x``: [b, heads, s, d]."""
    s, d = x.shape[-2], dims or x.shape[-1]
    if d < x.shape[-1]:
        return torch.cat([_rotary(x[..., :d], base, None, scaling), x[..., d:]], -1)
    freqs, scale = rotary_frequencies(base, d, scaling, s)
    inv = torch.tensor(freqs, dtype=torch.float64, device=x.device)
    ang = torch.outer(torch.arange(s, dtype=torch.float64, device=x.device), inv)
    cos = (torch.cat([ang.cos(), ang.cos()], -1) * scale).to(x.dtype)
    sin = (torch.cat([ang.sin(), ang.sin()], -1) * scale).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, tp: ParamFactory) -> None:
        super().__init__()
        h, kv, b, qkv_b = spec.hidden_size, spec.kv_size, spec.bias, spec.qkv_has_bias
        args = (tp.dtype, tp.device)
        q = spec.q_width  # heads x head_dim: wider than h with attention_head_dim (Qwen3)
        self.q = ColumnParallelLinear(h, q, qkv_b, *args, enter_region=False)
        self.k = ColumnParallelLinear(h, kv, qkv_b, *args, enter_region=False)
        self.v = ColumnParallelLinear(h, kv, qkv_b, *args, enter_region=False)
        self.o = RowParallelLinear(q, h, b, *args)
        # Named norm_q / norm_k: parameter names holding ".norm" are norms to the init rule
        # (``init_std``) and to the engine's weight-decay groups.
        self.norm_q, self.norm_k = _qk_norms(spec, tp)
        self.whole_projection_norms = isinstance(self.norm_q, ProjectionNorm)
        self.heads, self.kv_heads = spec.num_heads, spec.num_kv_heads
        """Heads on this rank (all of them until ``parallelize`` splits them)."""
        self.head_dim = spec.head_dim
        self.rotary = spec.position == "rotary"
        self.rope = (spec.rope_base, spec.rotary_dims, spec.rope_scaling)
        """Rotary base, the channels of each head it rotates, the config's scaling."""
        self.alibi = spec.position == "alibi"
        self.all_heads = spec.num_heads
        self.first_head = 0
        """Index of this rank's first head among ``all_heads`` (set by ``parallelize``): its
        heads' ALiBi slopes."""
        self.p = spec.dropout
        self.group = None
        self.sequence_group = None
        """Sequence parallelism: the input is a chunk of the tokens, gathered here."""
        # Execution options, set by ``execution.apply_execution`` (never by a plan's shape):
        self.flash = True
        """Attention through ``F.scaled_dot_product_attention`` (flash/memory-efficient kernels
        where available: no (s, s) scores kept); False: the explicit math (scores stashed)."""
        self.recompute_core = False
        """Selective recomputation (Korthikanti et al. 2022, Sec. 4.2): the attention core
        (QK^T, softmax, attention over V) is recomputed in backward instead of stashed."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.o(self.context(*self._project(x)))

    def context(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """This rank's heads' attention output ``[b, s, heads x head_dim]`` from the q, k, v
        projections, before the output projection."""
        b, s, _ = q.shape
        if self.whole_projection_norms:  # before the heads are split out (Olmo2Attention)
            group = self.group if self.sequence_group is None else self.sequence_group
            q, k = projection_norms(self.norm_q, self.norm_k, q, k, group)
        q = q.view(b, s, self.heads, self.head_dim)
        k = k.view(b, s, self.kv_heads, self.head_dim)
        if self.norm_q is not None and not self.whole_projection_norms:
            q, k = self.norm_q(q), self.norm_k(k)  # per head, before the rotation (Qwen3)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.rotary:
            q, k = _rotary(q, *self.rope), _rotary(k, *self.rope)
        if self.kv_heads != self.heads:  # grouped-query attention: share each K/V head
            rep = self.heads // self.kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if self.recompute_core and torch.is_grad_enabled():
            ctx = _checkpoint(self._core, q, k, v)
        else:
            ctx = self._core(q, k, v)
        return ctx.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q, k, v of the whole sequence (under sequence parallelism ``x`` is a chunk)."""
        if self.sequence_group is not None:
            return gathered_linears(x, self.sequence_group, (self.q, self.k, self.v))
        x = copy_to_tp(x, self.group)
        return self.q(x), self.k(x), self.v(x)

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        p = self.p if self.training else 0.0
        bias = None
        if self.alibi:
            key = (self.all_heads, self.first_head, self.heads, q.shape[-2], q.dtype, q.device)
            bias = alibi_bias(*key)
        if self.flash:
            if bias is not None:  # the causal mask is in the bias (its -inf above the diagonal)
                return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return math_attention(q, k, v, p, bias)


def _qk_norms(spec: ModelSpec, tp: ParamFactory) -> tuple:
    """(q norm, k norm) of the spec's ``qk_norm_kind``, or (None, None) without q/k norms."""
    if not spec.qk_norm:
        return None, None
    if spec.qk_norm_kind == "full":
        return ProjectionNorm(spec.q_width, tp), ProjectionNorm(spec.kv_size, tp)
    per_head = spec.qk_norm_kind == "per_head"
    return (
        HeadNorm(spec, tp, spec.num_heads, per_head),
        HeadNorm(spec, tp, spec.num_kv_heads, per_head),
    )


def alibi_slopes(heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes (Press et al. 2022, Sec. 3; BLOOM's ``build_alibi_tensor``):
    the geometric sequence 2^(-8 i / n) for the largest power of two n <= heads, then every
    other term of the sequence for 2n."""
    n = 2 ** math.floor(math.log2(heads))
    slopes = [2 ** (-8 * i / n) for i in range(1, n + 1)]
    slopes += [2 ** (-8 * i / (2 * n)) for i in range(1, 2 * (heads - n), 2)]
    return torch.tensor(slopes, dtype=torch.float64)


_ALIBI: dict[tuple, torch.Tensor] = {}
"""One causal ALiBi bias per (heads, first head, heads here, length, dtype, device): every
layer of a stage reads the same tensor, so it is held (and saved for backward) once."""
_ALIBI_KEPT = 4


def alibi_bias(all_heads: int, first: int, heads: int, s: int, dtype, device) -> torch.Tensor:
    """[heads, s, s] additive attention bias of heads first..first+heads-1: -slope x (i - j)
    for key j <= query i, -inf above the diagonal (causal)."""
    key = (all_heads, first, heads, s, dtype, str(device))
    hit = _ALIBI.get(key)
    if hit is None:
        slopes = alibi_slopes(all_heads)[first : first + heads].view(heads, 1, 1)
        pos = torch.arange(s, dtype=torch.float64)
        distance = (pos.view(s, 1) - pos.view(1, s)).clamp(min=0)  # i - j on and below
        bias = -slopes * distance
        bias = bias.masked_fill(pos.view(1, s) > pos.view(s, 1), float("-inf"))
        hit = bias.to(dtype=dtype, device=device)
        while len(_ALIBI) >= _ALIBI_KEPT:  # a few lengths at once (profiler sweeps)
            _ALIBI.pop(next(iter(_ALIBI)))
        _ALIBI[key] = hit
    return hit


def is_shared_constant(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` shares storage with a constant every layer of a stage reads (an
    ALiBi bias): a layer's stash does not hold it, its stage holds it once."""
    ptr = tensor.untyped_storage().data_ptr()
    return any(t.untyped_storage().data_ptr() == ptr for t in _ALIBI.values())


def math_attention(q, k, v, dropout_p: float, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Causal attention written out (Vaswani et al. 2017, Eq. 1): softmax(QK^T / sqrt(d)) V,
    with ``bias`` (causal, e.g. ALiBi's) added to the scores instead of the causal mask.
    Keeps the (b, a, s, s) scores and probabilities for backward, as frameworks did before
    fused attention kernels; the reference that SDPA is checked against."""
    s = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if bias is not None:
        probs = (scores + bias).softmax(-1)
        if dropout_p:
            probs = F.dropout(probs, dropout_p)
        return probs @ v
    causal = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
    probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    if dropout_p:
        probs = F.dropout(probs, dropout_p)
    return probs @ v


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec, tp: ParamFactory) -> None:
        super().__init__()
        h, f, b = spec.hidden_size, spec.ffn_hidden_size, spec.bias
        args = (tp.dtype, tp.device)
        self.swiglu = spec.gated_mlp
        self.act = F.gelu if spec.mlp == "geglu" else F.silu
        self.gate = (
            ColumnParallelLinear(h, f, b, *args, enter_region=False) if self.swiglu else None
        )
        self.up = ColumnParallelLinear(h, f, b, *args, enter_region=False)
        self.down = RowParallelLinear(f, h, b, *args)
        self.group = None
        self.sequence_group = None
        """Sequence parallelism: the input is a chunk of the tokens, gathered here."""

    @property
    def inputs(self) -> tuple[ColumnParallelLinear, ...]:
        """The column-parallel linears reading the MLP's input: (gate, up) or (up,)."""
        return (self.gate, self.up) if self.swiglu else (self.up,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sequence_group is not None:  # x is a chunk of the sequence
            return self.down(self.hidden(*gathered_linears(x, self.sequence_group, self.inputs)))
        x = copy_to_tp(x, self.group)
        return self.down(self.hidden(*(m(x) for m in self.inputs)))

    def hidden(self, *projected: torch.Tensor) -> torch.Tensor:
        """The down projection's input from the ``inputs``' outputs."""
        if self.swiglu:  # Shazeer 2020, "GLU Variants Improve Transformer", Eq. 6
            gate, up = projected
            return self.act(gate) * up
        return F.gelu(projected[0])


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x)); with
    ``post_norms`` x + norm(attn(x)), then x + norm(mlp(x)) (OLMo-2); with ``parallel_block``,
    x + attn(norm1(x)) + mlp(norm2(x)) (norm2 is norm1 when the spec has one norm per
    block)."""

    def __init__(self, spec: ModelSpec, tp: ParamFactory) -> None:
        super().__init__()
        self.parallel = spec.parallel_block
        self.post_norms = spec.post_norms
        """norm1 and norm2 follow the attention and the MLP instead of preceding them."""
        self.norm1, self.attn = Norm(spec, tp), Attention(spec, tp)
        one_norm = self.parallel and spec.parallel_norms == 1
        self.norm2 = None if one_norm else Norm(spec, tp)
        self.mlp = MLP(spec, tp)
        # Gemma-2/3's norms on the attention's and the MLP's outputs (``sandwich_norm``)
        sandwich = spec.sandwich_norm
        self.norm_post_attn = Norm(spec, tp) if sandwich else None
        self.norm_post_mlp = Norm(spec, tp) if sandwich else None
        self.p = spec.dropout
        self.recompute_full = False
        """Full recomputation: only the block's input is stashed; its forward runs again in
        backward (``torch.utils.checkpoint``, non-reentrant: RNG and autocast state restored,
        so the recomputed values are the same bits). Set by ``execution.apply_execution``."""

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, self.p, self.training) if self.p else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute_full and torch.is_grad_enabled():
            return _checkpoint(self._forward, x)
        return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.parallel:
            return x + self._drop(self._parallel_branches(x))
        if self.post_norms:  # OLMo-2: x + norm(attn(x)), then x + norm(mlp(x))
            x = x + self._drop(self.norm1(self.attn(x)))
            return x + self._drop(self.norm2(self.mlp(x)))
        x = x + self._drop(_maybe(self.norm_post_attn, self.attn(self.norm1(x))))
        return x + self._drop(_maybe(self.norm_post_mlp, self.mlp(self.norm2(x))))

    def _parallel_branches(self, x: torch.Tensor) -> torch.Tensor:
        """attn(norm1(x)) + mlp(norm2(x)) with the TP collectives of one region: the two
        row-parallel partial sums are added before one all-reduce (reduce-scatter under
        sequence parallelism), and each distinct norm output enters the region once, so
        backward all-reduces one input gradient per norm (GPT-NeoX ``gpt_j_residual``;
        ``ModelSpec.tp_all_reduces_per_block``: 1 + norms, not 4). Dropout, if any, drops
        the sum (one mask, where a framework may draw one per branch)."""
        attn, mlp, seq = self.attn, self.mlp, self.attn.sequence_group
        a_in = self.norm1(x)
        m_in = a_in if self.norm2 is None else self.norm2(x)
        a_lin, m_lin = (attn.q, attn.k, attn.v), mlp.inputs
        if seq is not None:  # chunks of the sequence: one all-gather per distinct input
            if m_in is a_in:
                out = gathered_linears(a_in, seq, a_lin + m_lin)
                qkv, up = out[:3], out[3:]
            else:
                qkv, up = gathered_linears(a_in, seq, a_lin), gathered_linears(m_in, seq, m_lin)
        else:
            a_in = copy_to_tp(a_in, attn.group)
            m_in = a_in if self.norm2 is None else copy_to_tp(m_in, attn.group)
            qkv, up = tuple(m(a_in) for m in a_lin), tuple(m(m_in) for m in m_lin)
        partial = F.linear(attn.context(*qkv), attn.o.weight)
        partial = partial + F.linear(mlp.hidden(*up), mlp.down.weight)
        if seq is not None:
            y = reduce_scatter_from_tp(partial, seq)
        else:
            y = reduce_from_tp(partial, attn.group)
        for bias in (attn.o.bias, mlp.down.bias):  # replicated: added once, after the sum
            if bias is not None:  # under SP a partial gradient (RowParallelLinear's)
                y = y + bias
        return y


def _maybe(norm: nn.Module | None, x: torch.Tensor) -> torch.Tensor:
    return x if norm is None else norm(x)


class Head(nn.Module):
    """Final norm, untied vocabulary-parallel LM head and the loss (mean over tokens)."""

    def __init__(self, spec: ModelSpec, tp: ParamFactory) -> None:
        super().__init__()
        self.norm = Norm(spec, tp)
        self.lm_head = ColumnParallelLinear(  # a bias split with the vocabulary rows (Phi-2)
            spec.hidden_size, spec.vocab_size, spec.lm_head_bias, tp.dtype, tp.device
        )
        self.tp_rank, self.tp_size, self.group = 0, 1, None
        """Where the vocabulary shard of ``lm_head`` sits (set by ``parallelize``)."""
        self.sequence_group = None
        """Sequence parallelism: ``x`` is a chunk of the tokens, gathered for ``lm_head``."""

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.sequence_group is not None:
            (logits,) = gathered_linears(self.norm(x), self.sequence_group, (self.lm_head,))
        else:
            logits = self.lm_head(self.norm(x))
        return vocab_parallel_cross_entropy(logits, labels, self.tp_rank, self.tp_size, self.group)


def _checkpoint(fn, *args):
    # Imported here: torch.utils.checkpoint is only needed when recomputation is on.
    from torch.utils.checkpoint import checkpoint

    return checkpoint(fn, *args, use_reentrant=False)


def init_std(name: str, spec: ModelSpec) -> float | None:
    """Initial value rule: None = constant (norm weights 1, biases 0), else the normal's std.

    GPT-2 (Radford et al. 2019, Sec. 2.3): std 0.02, residual output projections scaled by
    1/sqrt(2L)."""
    if name.endswith("bias") or ".norm" in f".{name}":
        return None
    if name.endswith("o.weight") or name.endswith("down.weight"):
        return 0.02 / math.sqrt(2 * spec.num_layers)
    return 0.02
