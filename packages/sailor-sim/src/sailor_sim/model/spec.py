"""ModelSpec: the architecture of a decoder-only transformer and its exact per-layer accounting.

Layer ids are used everywhere (plans, profiles, checkpoints, the runtime's model zoo):
0 = embedding, 1..L = transformer blocks, L+1 = final norm + LM head + loss.

Parameter counts are exact and per GPU of a tensor-parallel (TP) group, Megatron style:
column-parallel matrices (QKV, MLP up/gate, vocab rows of the embedding and the head) and their
biases are split by TP; row-parallel matrices (attention output, MLP down) are split, their
biases and every norm are replicated. Per layer, the LM head holds its own matrix even when the
model ties it to the embedding (``tie_word_embeddings``), as Megatron keeps a copy on the last
pipeline stage; the runtime's zoo does the same, and a test checks that its ``numel()`` equals
these counts. ``total_params`` counts a tied matrix once and leaves out vocabulary padding, so it
equals the published count.

The built-in catalog is ``data/models.json`` (one entry per model, with its source); any
decoder-only model can also be read from a Hugging Face ``config.json`` (``hf_config.py``).

Beyond the GPT/LLaMA block, a spec may carry: an explicit ``attention_head_dim`` (Gemma,
Qwen3: heads x head_dim != hidden), per-head q/k RMSNorms (``qk_norm``, Qwen3), Gemma-2's
norms after attention and MLP (``sandwich_norm``), BLOOM's norm after the embedding
(``embedding_norm``), a squared-ReLU MLP (``mlp='relu2'``, Nemotron-4: So et al. 2021,
"Primer", arXiv 2109.08668), latent attention (``mla``, ``mla.py``) and mixture-of-experts
blocks (``moe``, ``moe.py``; with ``bias`` every expert has its biases, gpt-oss), a parallel
attention + MLP block (``parallel_block``: GPT-J, PaLM, Phi-2, Command-R, Falcon), norms without
parameters (``norm_affine`` False, OLMo-1), q/k norms of every head's own weights or over the
whole projection (``qk_norm_kind``: Command-R+, OLMo-2), one attention-sink logit per head
(``attention_sinks``, gpt-oss) and a bias on the LM head (``lm_head_bias``, Phi-2). For MoE the
per-layer counts hold every expert; expert parallelism divides them in the memory model
(``moe.py``).

Activation memory follows Korthikanti et al., "Reducing Activation Recomputation in Large
Transformer Models" (2022), Sec. 4.1, without sequence parallelism or recomputation, one named
term per stored tensor (see ``stash_terms``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..catalog.readers import model_entries
from ..dtypes import check_dtype, dtype_bytes
from ..errors import UnknownNameError, ValidationError
from .mla import MLASpec
from .moe import MoESpec
from .rope import RopeScaling

# Labels only: the architecture is in the fields (position, norm, mlp, bias, ...).
FAMILIES = (
    "opt",
    "gpt-neo",
    "llama",
    "mistral",
    "qwen2",
    "gemma",
    "gpt-neox",
    "gpt2",
    "gpt",
    "mpt",
    "mixtral",
    "qwen3",
    "qwen2-moe",
    "qwen3-moe",
    "deepseek",
    "gemma2",
    "bloom",
    "nemotron",
    "phi3",
    "gemma3",
    "olmo",
    "olmo2",
    "starcoder2",
    "phi",
    "cohere",
    "falcon",
    "gpt-oss",
    "glm",
    "glm4",
    "dbrx",
    "stablelm",
    "exaone",
    "internlm2",
)
POSITIONS = ("learned", "rotary", "alibi")
NORMS = ("layernorm", "rmsnorm")
MLPS = ("gelu", "swiglu", "geglu", "relu2")
QK_NORM_KINDS = ("head", "per_head", "full")
# Bytes of the int64 token ids a stage 0 keeps per token (for the embedding backward).
_TOKEN_ID_BYTES = 8
MAX_LAYERS = 4096
"""Most transformer blocks a model may have: 32x the deepest in the catalog (GPT-1T, 128).
Each layer id costs work in profiles, plans and prefix sums, so a config.json with 10^9
blocks ran for hours instead of being refused."""
MAX_SIZES = {
    "hidden_size": 2**20,
    "num_heads": 2**16,
    "ffn_hidden_size": 2**22,
    "vocab_size": 2**24,
    "max_seq_len": 2**26,
}
"""Largest width, head count, vocabulary and positions a model may have, 16x or more beyond
any published one (GPT-1T hidden 25600, Gemma-3 vocabulary 262208, Llama-4-Scout 10M
positions): a config.json with hidden_size 10^30 printed 3 x 10^26 s per iteration and
3.5 x 10^28 GiB per GPU instead of being refused."""


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a decoder-only transformer (values, no hardware)."""

    name: str
    family: str
    num_layers: int
    """L, the number of transformer blocks (layer ids 1..L)."""
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    """Key/value heads; < num_heads means grouped-query attention."""
    ffn_hidden_size: int
    vocab_size: int
    """Rows of the embedding and the head, already padded (a multiple of 128 divides any TP)."""
    max_seq_len: int
    position: str = "learned"
    """'learned' (absolute position embedding in layer 0), 'rotary' or 'alibi' (no parameters)."""
    rope_base: float = 10000.0
    """Rotary base theta (``rope_theta``: 10,000 in RoFormer and LLaMA-2, 500,000 in
    LLaMA-3): numerics only, the same parameters, FLOPs and memory."""
    rotary_fraction: float = 1.0
    """Share of each head's channels that rotary positions rotate, the rest passed through
    (``partial_rotary_factor``: Phi-2 0.4, StableLM 0.25; GPT-NeoX ``rotary_pct``)."""
    rope_scaling: RopeScaling | None = None
    """The config's ``rope_scaling`` where the zoo follows its kind (``rope.py``: LLaMA-3.1's
    llama3, YaRN, linear, dynamic NTK); None: RoFormer's frequencies. Numerics only."""
    norm: str = "layernorm"
    """'layernorm' (weight + bias unless ``norm_bias`` is False) or 'rmsnorm' (weight only)."""
    mlp: str = "gelu"
    """'gelu' (up, down), 'relu2' (up, down, squared ReLU), 'swiglu' or 'geglu' (gate, up,
    down; Shazeer 2020)."""
    bias: bool = True
    """Linear layers carry biases (OPT, GPT-Neo) or not (LLaMA)."""
    dropout: float = 0.0
    """Dropout probability; > 0 adds a one-byte mask per dropped tensor to the stash."""
    attention_dropout: float | None = None
    """Dropout on the attention probabilities; None = same as ``dropout``. OPT and GPT-Neo use
    0 (their Hugging Face configs); > 0 stashes an (a, s, s) mask and the dropped copy."""
    tie_word_embeddings: bool = False
    """The LM head shares the embedding matrix (GPT-2, OPT, Gemma, MPT, Megatron GPT). Each
    pipeline stage still holds its own copy (``params`` per layer, as Megatron keeps a copy on
    the last stage and all-reduces its gradient); ``total_params`` counts it once."""
    unpadded_vocab_size: int | None = None
    """The tokenizer's vocabulary before padding (None = ``vocab_size`` is unpadded)."""
    qkv_bias: bool | None = None
    """Biases on Q, K, V only; None = same as ``bias`` (Qwen2: True with ``bias`` False)."""
    norm_bias: bool | None = None
    """LayerNorm carries a bias; None = True for 'layernorm' (MPT: False). RMSNorm never does."""
    num_position_embeddings: int | None = None
    """Rows of a learned position table; None = ``max_seq_len`` (OPT keeps 2 more rows)."""
    attention_head_dim: int | None = None
    """Width of one attention head; None = hidden_size / num_heads (Gemma-7B: 256 x 16 heads
    on a 3072 hidden state)."""
    qk_norm: bool = False
    """A norm on each head's query and key (Qwen3); its weights per ``qk_norm_kind``."""
    qk_norm_kind: str = "head"
    """'head': one head_dim weight for q and one for k, shared by the heads (Qwen3, Gemma-3);
    'per_head': a head_dim weight for every q and k head, each head normalised alone
    (Command-R+ CohereLayerNorm((heads, head_dim)), StableLM-2-12B); 'full': one norm over all
    of q (heads x head_dim) and one over all of k (OLMo-2 q_norm/k_norm): TP splits the heads,
    so each norm's statistics need an all-reduce across the TP group."""
    sandwich_norm: bool = False
    """Norms also after attention and after the MLP, 4 per block (Gemma-2)."""
    post_norms: bool = False
    """The block's two norms follow the attention and the MLP instead of preceding them,
    x + norm(attn(x)) then x + norm(mlp(x)) (OLMo-2 post_attention_layernorm and
    post_feedforward_layernorm): the same parameters, FLOPs and stashed tensors as pre-norm
    (each norm's input is kept for its backward, and the linears read the unnormalised x)."""
    embedding_norm: bool = False
    """A norm on the embedding output in layer 0 (BLOOM ``word_embeddings_layernorm``)."""
    parallel_block: bool = False
    """Attention and MLP both read the block input and their outputs are added to it together,
    y = x + attn(norm(x)) + mlp(norm'(x)) (GPT-J; PaLM, arXiv 2204.02311, Sec. 2; Phi-2,
    Command-R, Falcon). The MLP's input needs no second copy in the stash, and under TP the
    two row-parallel outputs are summed before one all-reduce (GPT-NeoX ``gpt_j_residual``)."""
    parallel_norms: int = 1
    """Norms on a parallel block's input: 1 shared by attention and MLP (Phi-2, Command-R,
    Falcon-7B) or 2 (Falcon-40B's ``ln_attn`` and ``ln_mlp``). Ignored without
    ``parallel_block``."""
    norm_affine: bool = True
    """Norms have a learned weight (and bias, ``norm_bias``); False = OLMo-1's non-parametric
    LayerNorm (``F.layer_norm`` without weight or bias: no parameters)."""
    attention_sinks: bool = False
    """One learned sink logit per attention head joins each softmax's denominator (gpt-oss
    ``sinks``): num_heads parameters per block, split by TP with the heads."""
    lm_head_bias: bool = False
    """The LM head has a bias of one value per vocabulary row (Phi-2 ``lm_head``)."""
    unmodelled_mtp_layers: int = 0
    """Multi-token-prediction modules of the config (DeepSeek-V3 ``num_nextn_predict_layers``)
    that the accounting leaves out: each is one more block, a 2h x h projection and a pass of
    the shared LM head per token, counted in no parameter, FLOP or memory figure; every
    estimate of the model says so (``capacity.mtp_note``)."""
    unmodelled_sliding_window: int = 0
    """The attention window of the config's sliding-window layers (``sliding_window``), 0 for
    none: they are timed as full causal attention, which over-counts their attention beyond
    the window; an estimate at a longer sequence says so (``capacity.window_note``)."""
    moe: MoESpec | None = None
    """Mixture-of-experts blocks (``moe.py``); None = dense."""
    mla: MLASpec | None = None
    """Multi-head latent attention (``mla.py``); None = multi-head/grouped-query attention."""

    def __post_init__(self) -> None:
        if isinstance(self.moe, dict):
            object.__setattr__(self, "moe", MoESpec(**self.moe))
        if isinstance(self.mla, dict):
            object.__setattr__(self, "mla", MLASpec(**self.mla))
        if isinstance(self.rope_scaling, dict):
            object.__setattr__(self, "rope_scaling", RopeScaling(**self.rope_scaling))
        if self.family not in FAMILIES:
            raise ValidationError(
                f"unknown family {self.family!r}; use one of {FAMILIES}", field="family"
            )
        sizes = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size")
        for field in (*sizes, "vocab_size", "max_seq_len"):
            if getattr(self, field) <= 0:
                raise ValidationError(f"must be positive, got {getattr(self, field)}", field=field)
        if self.hidden_size % self.num_heads and self.attention_head_dim is None and not self.mla:
            raise ValidationError(
                f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}",
                field="num_heads",
            )
        if self.num_heads % self.num_kv_heads:
            raise ValidationError(
                f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}",
                field="num_kv_heads",
            )
        for field, allowed in (
            ("position", POSITIONS),
            ("norm", NORMS),
            ("mlp", MLPS),
            ("qk_norm_kind", QK_NORM_KINDS),
        ):
            if getattr(self, field) not in allowed:
                raise ValidationError(
                    f"unknown {field} {getattr(self, field)!r}; use one of {allowed}", field=field
                )
        for field, most in MAX_SIZES.items():
            if getattr(self, field) > most:
                raise ValidationError(
                    f"{getattr(self, field)} is more than {most}, far beyond any published "
                    "model; check the config.json",
                    field=field,
                )
        if self.num_layers > MAX_LAYERS:
            raise ValidationError(
                f"{self.num_layers} blocks is more than {MAX_LAYERS}; check num_layers "
                "(num_hidden_layers of a config.json)",
                field="num_layers",
            )
        for field in ("unmodelled_mtp_layers", "unmodelled_sliding_window"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValidationError(f"must be a count >= 0, got {value!r}", field=field)
        self._check_vocab_and_positions()
        self._check_block_layout()
        if not 0.0 <= self.dropout < 1.0:
            raise ValidationError(f"must be in [0, 1), got {self.dropout}", field="dropout")
        if self.attention_dropout is not None and not 0.0 <= self.attention_dropout < 1.0:
            raise ValidationError(
                f"must be in [0, 1), got {self.attention_dropout}", field="attention_dropout"
            )

    def _check_vocab_and_positions(self) -> None:
        unpadded = self.unpadded_vocab_size
        if unpadded is not None and not 0 < unpadded <= self.vocab_size:
            raise ValidationError(
                f"must be in 1..vocab_size ({self.vocab_size}), got {unpadded}",
                field="unpadded_vocab_size",
            )
        self._check_rotary()
        rows = self.num_position_embeddings
        if rows is not None and rows < self.max_seq_len:
            raise ValidationError(
                f"{rows} position rows cannot hold max_seq_len {self.max_seq_len}",
                field="num_position_embeddings",
            )

    def _check_rotary(self) -> None:
        base = self.rope_base
        if isinstance(base, bool) or not isinstance(base, int | float) or not 1 < base < 1e12:
            raise ValidationError(
                f"must be a number above 1 (rope_theta), got {base!r}", field="rope_base"
            )
        share = self.rotary_fraction
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
            raise ValidationError(
                f"must be in (0, 1] (partial_rotary_factor), got {share!r}",
                field="rotary_fraction",
            )
        if (
            self.position == "rotary"
            and not self.mla
            and (self.rotary_dims < 2 or self.rotary_dims % 2)
        ):
            raise ValidationError(
                f"rotates {self.rotary_dims} of a head's {self.head_dim} channels; rotary "
                "positions rotate an even number of at least 2",
                field="rotary_fraction",
            )
        if self.position == "rotary" and self.rope_scaling is not None and not self.mla:
            self.rope_scaling.check_channels(self.rotary_dims)

    @property
    def rotary_dims(self) -> int:
        """Channels of each head that rotary positions rotate (Hugging Face:
        int(head_dim x partial_rotary_factor))."""
        return int(self.head_dim * self.rotary_fraction)

    def _check_block_layout(self) -> None:
        if self.parallel_norms not in (1, 2):
            raise ValidationError(
                f"must be 1 (one norm shared by attention and MLP) or 2, got "
                f"{self.parallel_norms!r}",
                field="parallel_norms",
            )
        if self.parallel_block and self.sandwich_norm:
            raise ValidationError(
                "a parallel block with sandwich norms is not modelled; set one of them false",
                field="parallel_block",
            )
        if self.post_norms and (self.parallel_block or self.sandwich_norm):
            raise ValidationError(
                "norms only after attention and MLP (post_norms) exclude parallel_block and "
                "sandwich_norm; set one of them false",
                field="post_norms",
            )

    # ---- shape helpers ---------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.attention_head_dim or self.hidden_size // self.num_heads

    @property
    def q_width(self) -> int:
        """Width of the queries (and of the attention output): num_heads * head_dim."""
        return self.num_heads * self.head_dim

    @property
    def qk_head_dim(self) -> int:
        return self.mla.qk_head_dim if self.mla else self.head_dim

    @property
    def v_head_dim(self) -> int:
        return self.mla.v_head_dim if self.mla else self.head_dim

    @property
    def simulated_only_features(self) -> tuple[str, ...]:
        """Architecture features the simulator accounts for but the runtime's model zoo does
        not build (it refuses such a spec rather than train a different model)."""
        features = {
            "moe": self.moe is not None,
            "mla": self.mla is not None,
            "mlp=relu2": self.mlp == "relu2",
            "attention_sinks": self.attention_sinks,
        }
        return tuple(name for name, present in features.items() if present)

    def is_moe_block(self, layer_id: int) -> bool:
        return (
            self.moe is not None
            and self.layer_kind(layer_id) == "block"
            and (self.moe.is_moe_block(layer_id))
        )

    def mlp_width(self, layer_id: int) -> float:
        """Intermediate width a token passes through in this block's MLP: the dense FFN, or
        the routed slots x expert width plus the shared experts."""
        if not self.is_moe_block(layer_id):
            return self.ffn_hidden_size
        return self.moe.routed_slots * self.moe.expert_ffn + self.moe.shared_ffn

    @property
    def kv_size(self) -> int:
        """Width of K (and of V): num_kv_heads * head_dim."""
        return self.num_kv_heads * self.head_dim

    @property
    def gated_mlp(self) -> bool:
        """Gate, up and down matrices (SwiGLU, GeGLU) instead of up and down."""
        return self.mlp in ("swiglu", "geglu")

    @property
    def qkv_has_bias(self) -> bool:
        return self.bias if self.qkv_bias is None else self.qkv_bias

    @property
    def norm_has_bias(self) -> bool:
        if self.norm == "rmsnorm":
            return False
        return True if self.norm_bias is None else self.norm_bias

    @property
    def block_norms(self) -> int:
        """Hidden-size norms per block: 2 (before attention and MLP), 4 with sandwich norms,
        ``parallel_norms`` in a parallel block."""
        if self.parallel_block:
            return self.parallel_norms
        return 4 if self.sandwich_norm else 2

    @property
    def tp_all_reduces_per_block(self) -> int:
        """All-reduces of the (b, s, h) activations per block and microbatch under TP
        (Shoeybi et al. 2019, Sec. 3): the attention's and the MLP's output in forward, the
        gradients of their inputs in backward. A parallel block sums its two outputs before
        one all-reduce; in backward each distinct branch input (one per norm) needs one."""
        if self.parallel_block:
            return 1 + self.parallel_norms
        return 4

    @property
    def tp_forward_all_reduce_share(self) -> float:
        """Share of a block's TP all-reduces that run in forward (what full recomputation
        repeats): 2 of 4, or a parallel block's 1 of 1 + ``parallel_norms``."""
        forward = 1 if self.parallel_block else 2
        return forward / self.tp_all_reduces_per_block

    @property
    def position_rows(self) -> int:
        """Rows of the learned position table (0 for rotary and ALiBi: no parameters)."""
        if self.position != "learned":
            return 0
        return self.num_position_embeddings or self.max_seq_len

    @property
    def vocab_padding(self) -> int:
        """Rows added to the tokenizer's vocabulary so that TP degrees divide it."""
        return 0 if self.unpadded_vocab_size is None else self.vocab_size - self.unpadded_vocab_size

    @property
    def num_layer_ids(self) -> int:
        """L + 2: embedding, L blocks, head."""
        return self.num_layers + 2

    @property
    def head_layer_id(self) -> int:
        return self.num_layers + 1

    def layer_kind(self, layer_id: int) -> str:
        """'embedding', 'block' or 'head'."""
        self.check_layer_id(layer_id)
        if layer_id == 0:
            return "embedding"
        return "head" if layer_id == self.head_layer_id else "block"

    def check_layer_id(self, layer_id: int, field: str = "layer_id") -> None:
        if not 0 <= layer_id <= self.head_layer_id:
            raise ValidationError(
                f"layer id {layer_id} is outside 0..{self.head_layer_id} of {self.name}",
                field=field,
            )

    def tp_degrees(self, limit: int = 64) -> list[int]:
        """Powers of two up to ``limit`` that split this model's heads, kv heads, FFN and vocab."""
        return [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= limit and self.tp_problem(t) is None]

    def tp_problem(self, tp: int) -> str | None:
        """Why ``tp`` cannot split this model, or None when it can."""
        if tp < 1:
            return f"TP degree must be >= 1, got {tp}"
        for what, size in (
            ("num_heads", self.num_heads),
            ("num_kv_heads", self.num_kv_heads),
            ("ffn_hidden_size", self.ffn_hidden_size),
            ("vocab_size", self.vocab_size),
            *((("moe.expert_ffn", self.moe.expert_ffn),) if self.moe else ()),
        ):
            if size % tp:
                return f"TP degree {tp} does not divide {what} {size} of {self.name}"
        return None

    def check_tp(self, tp: int, field: str = "tp") -> None:
        problem = self.tp_problem(tp)
        if problem:
            raise ValidationError(problem + "; choose a TP degree that divides it", field=field)

    # ---- parameters ------------------------------------------------------------------------
    def _norm_params(self) -> int:
        if not self.norm_affine:
            return 0
        return 2 * self.hidden_size if self.norm_has_bias else self.hidden_size

    def param_terms(self, layer_id: int, tp: int = 1) -> dict[str, int]:
        """Parameters per GPU of a TP group for one layer, by named tensor group."""
        self.check_tp(tp)
        h, kind = self.hidden_size, self.layer_kind(layer_id)
        if kind == "embedding":
            terms = {"word_embeddings": self.vocab_size * h // tp}
            if self.position_rows:
                terms["position_embeddings"] = self.position_rows * h
            if self.embedding_norm:
                terms["embedding_norm"] = self._norm_params()
            return terms
        if kind == "head":
            terms = {"final_norm": self._norm_params(), "lm_head": self.vocab_size * h // tp}
            if self.lm_head_bias:  # column-parallel, split with the vocabulary rows
                terms["lm_head_bias"] = self.vocab_size // tp
            return terms
        norms = self.block_norms
        terms = {"attention_norm": self._norm_params(), **self._attention_terms(tp)}
        if norms > 1:  # a parallel block's one shared norm is the attention's
            terms["mlp_norm"] = (norms - 1) * self._norm_params()
        return terms | self._mlp_terms(layer_id, tp)

    def _attention_terms(self, tp: int) -> dict[str, int]:
        h = self.hidden_size
        if self.mla:
            return self.mla.param_terms(h, self.num_heads, tp)
        qkv_out = self.q_width + 2 * self.kv_size
        terms = {"attention_qkv": qkv_out * h // tp, "attention_out": self.q_width * h // tp}
        if self.qk_norm:
            terms["attention_qk_norm"] = self._qk_norm_params(tp)
        if self.attention_sinks:
            terms["attention_sinks"] = self.num_heads // tp
        if self.qkv_has_bias:
            terms["attention_qkv_bias"] = qkv_out // tp
        if self.bias:
            terms["attention_out_bias"] = h  # row-parallel bias: replicated
        return terms

    def _qk_norm_params(self, tp: int) -> int:
        if self.qk_norm_kind == "head":  # one head_dim weight each for q and k, replicated
            return 2 * self.head_dim
        # a weight per q and k channel: each TP rank holds those of its heads
        return (self.q_width + self.kv_size) // tp

    def _mlp_terms(self, layer_id: int, tp: int) -> dict[str, int]:
        h, mlp_mats = self.hidden_size, 3 if self.gated_mlp else 2
        if not self.is_moe_block(layer_id):
            terms = {"mlp": mlp_mats * h * self.ffn_hidden_size // tp}
            if self.bias:
                terms["mlp_bias"] = self.ffn_hidden_size * (mlp_mats - 1) // tp + h
            return terms
        moe = self.moe
        terms = {
            "mlp_router": moe.num_experts * h,  # replicated: every rank routes its tokens
            "mlp_experts": moe.num_experts * mlp_mats * h * moe.expert_ffn // tp,
        }
        if moe.router_bias:
            terms["mlp_router_bias"] = moe.num_experts
        if self.bias:  # every expert's up (and gate) biases, split by TP, and its down bias
            terms["mlp_experts_bias"] = moe.num_experts * self._expert_bias(moe.expert_ffn, tp)
        if moe.shared_ffn:
            terms["mlp_shared_experts"] = mlp_mats * h * moe.shared_ffn // tp
            if self.bias:
                terms["mlp_shared_experts_bias"] = self._expert_bias(moe.shared_ffn, tp)
        if moe.shared_expert_gate:
            terms["mlp_shared_gate"] = h
        return terms

    def _expert_bias(self, ffn: int, tp: int) -> int:
        """Biases of one MLP of width ``ffn``, as a dense block's ``mlp_bias``."""
        return ffn * ((3 if self.gated_mlp else 2) - 1) // tp + self.hidden_size

    def active_matmul_params(self, layer_id: int, tp: int = 1) -> float:
        """Weights one token multiplies with in this layer (per GPU of a TP group): every
        matrix of a dense block; the router, top_k (or the capacity's) experts and the shared
        ones of a MoE block. The FLOPs per token are twice this."""
        kind = self.layer_kind(layer_id)
        if kind == "embedding":
            return 0.0
        if kind == "head":
            return self.vocab_size * self.hidden_size / tp
        terms = self.param_terms(layer_id, tp)
        attention = (
            sum(
                v for k, v in terms.items() if k in ("attention_qkv", "attention_q", "attention_kv")
            )
            + terms["attention_out"]
        )
        if not self.is_moe_block(layer_id):
            return float(attention + terms["mlp"])
        experts = terms["mlp_experts"] * self.moe.routed_slots / self.moe.num_experts
        shared = terms.get("mlp_shared_experts", 0) + terms.get("mlp_shared_gate", 0)
        return attention + terms["mlp_router"] + experts + shared

    def active_params(self) -> int:
        """Parameters one token uses (the 'activated' count of MoE papers): ``total_params``
        with each MoE block's unrouted experts left out (dropless top_k)."""
        unused = 0
        if self.moe:
            mats = 3 if self.gated_mlp else 2
            per_expert = mats * self.hidden_size * self.moe.expert_ffn
            if self.bias:
                per_expert += self._expert_bias(self.moe.expert_ffn, 1)
            blocks = sum(self.is_moe_block(i) for i in range(1, self.num_layers + 1))
            unused = blocks * (self.moe.num_experts - self.moe.top_k) * per_expert
        return self.total_params() - unused

    @lru_cache(maxsize=4096)  # noqa: B019 (specs are frozen and few; importers ask per entry)
    def params(self, layer_id: int, tp: int = 1) -> int:
        """Parameter count of one layer per GPU of a TP group (cached: importing the original
        Sailor profiles asks for every layer of each of its 441 entries)."""
        return sum(self.param_terms(layer_id, tp).values())

    def shared_head_params(self, first: int, last: int, tp: int = 1) -> int:
        """Parameters per GPU of a TP group that layer ids first..last hold once, not twice:
        a tied model's head reuses the embedding's matrix when one stage holds both (Megatron
        ``share_embeddings_and_output_weights`` with one pipeline stage, and the runtime's
        ``engine.parallel.tied``); over several stages the head keeps its own copy, which
        ``params(head)`` counts. 0 otherwise."""
        if not self.tie_word_embeddings or first > 0 or last < self.head_layer_id:
            return 0
        return self.param_terms(self.head_layer_id, tp)["lm_head"]

    def total_params(self) -> int:
        """Parameters of the model as published: the tokenizer's vocabulary (no padding rows)
        and a tied head counted once. What the GPUs hold is ``sum(params(i))``."""
        held = sum(self.params(i) for i in range(self.num_layer_ids))
        h = self.hidden_size
        if self.tie_word_embeddings:
            held -= self.vocab_size * h
        else:
            held -= self.vocab_padding * h  # the head's padding rows
        if self.lm_head_bias:
            held -= self.vocab_padding  # the head bias's padding rows
        return held - self.vocab_padding * h  # the embedding's padding rows

    def matmul_params(self) -> int:
        """Parameters that take part in a matmul per token (the N of 6N): everything but the
        input embedding lookups; a tied matrix counts once, as the head. Padded vocabulary."""
        held = sum(self.params(i) for i in range(self.num_layer_ids))
        return held - sum(self.param_terms(0).values())

    # ---- activations -----------------------------------------------------------------------
    def activation_out_bytes(
        self, layer_id: int, microbatch_size: int, seq_len: int, dtype: str
    ) -> int:
        """Bytes a layer hands to the next one (and the gradient coming back), per microbatch.

        The full hidden state is sent even under TP (every TP rank holds a replica of it).
        The head ends the model and sends nothing.
        """
        if self.layer_kind(layer_id) == "head":
            return 0
        return microbatch_size * seq_len * self.hidden_size * dtype_bytes(dtype)

    def stash_terms(
        self,
        layer_id: int,
        microbatch_size: int,
        seq_len: int,
        dtype: str,
        tp: int = 1,
        flash_attention: bool = False,
    ) -> dict[str, int]:
        """Bytes kept for backward per microbatch on one GPU of a TP group, by stored tensor
        (a new dict; cached per layer shape: a layer enters only through its kind and whether
        it is a MoE block, so a model's blocks share one entry)."""
        kind = self.layer_kind(layer_id)
        moe = kind == "block" and self.is_moe_block(layer_id)
        key = (kind, moe, microbatch_size, seq_len, dtype, tp, bool(flash_attention))
        cache = self.__dict__.get("_stash_cache")
        if cache is None:  # not a field: equality, hashing and replace() ignore it
            cache = {}
            object.__setattr__(self, "_stash_cache", cache)
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = self._stash_terms(
                layer_id, microbatch_size, seq_len, dtype, tp, flash_attention
            )
        return dict(hit)

    def _stash_terms(
        self,
        layer_id: int,
        microbatch_size: int,
        seq_len: int,
        dtype: str,
        tp: int,
        flash: bool,
    ) -> dict[str, int]:
        self.check_tp(tp)
        dtype = check_dtype(dtype)
        e, b, s, h = dtype_bytes(dtype), microbatch_size, seq_len, self.hidden_size
        sbh = s * b * h
        mask = 1 if self.dropout > 0 else 0
        kind = self.layer_kind(layer_id)
        if kind == "embedding":
            terms = {"token_ids": s * b * _TOKEN_ID_BYTES, "embedding_dropout_mask": sbh * mask}
            if self.embedding_norm:  # BLOOM's LayerNorm reads the looked-up embeddings
                terms["embedding_norm_input"] = sbh * e
            return terms
        if kind == "head":
            # Logits are kept in fp32 for a numerically sound softmax cross-entropy.
            return {
                "final_norm_input": sbh * e,
                "lm_head_input": sbh * e,
                "logits": s * b * self.vocab_size // tp * max(e, 4),
            }
        a, kv, q = self.num_heads, self.kv_size, self.q_width
        if self.mla:  # per-head q/k of qk_head_dim, values of v_head_dim, every head
            q, kv = a * self.mla.qk_head_dim, a * self.mla.v_head_dim
        if flash:  # only the log-sum-exp per row survives (Dao et al. 2022)
            scores = {"softmax_lse": a * s * b // tp * 4}
        else:
            attn_p = self.dropout if self.attention_dropout is None else self.attention_dropout
            scores = {"softmax_output": a * s * s * b // tp * e}
            if attn_p > 0:  # the mask, and the dropped probabilities the context bmm keeps
                scores["softmax_dropout_mask"] = a * s * s * b // tp
                scores["softmax_dropout_output"] = a * s * s * b // tp * e
        ffn_t = self.mlp_width(layer_id) / tp
        mlp_stored = 3 if self.gated_mlp else 2  # gate, up, act-out | act-in, act-out
        terms = {
            "attention_norm_input": sbh * e,
            "qkv_input": sbh * e,
            "query_key": s * b * (q + kv) // tp * e,
            **scores,
            "value": s * b * kv // tp * e,
            "attention_out_input": s * b * q // tp * e,
            "attention_dropout_mask": sbh * mask,
            "mlp_norm_input": sbh * e,
            "mlp_input": sbh * e,
            "mlp_hidden": int(s * b * ffn_t * mlp_stored * e),
            "mlp_dropout_mask": sbh * mask,
        }
        if self.sandwich_norm:  # the norms after attention and MLP read their outputs
            terms["attention_post_norm_input"] = sbh * e
            terms["mlp_post_norm_input"] = sbh * e
        if self.qk_norm:  # a norm's backward needs its input: q and k before their norms
            terms["qk_norm_input"] = s * b * (q + kv) // tp * e
        if self.parallel_block:
            # The MLP's norm reads the block input the attention's norm keeps already; with
            # one shared norm the MLP's input is the attention's (qkv_input) too.
            del terms["mlp_norm_input"]
            if self.parallel_norms == 1:
                del terms["mlp_input"]
        if self.is_moe_block(layer_id):
            # The router's fp32 probabilities and each routed copy of the hidden state that
            # the dispatch permutes to the experts (kept for the experts' weight gradients).
            slots = self.moe.routed_slots
            terms["moe_router_probs"] = s * b * self.moe.num_experts * 4
            terms["moe_dispatched_input"] = int(s * b * slots * h * e)
        return terms

    def activation_stash_bytes(
        self,
        layer_id: int,
        microbatch_size: int,
        seq_len: int,
        dtype: str,
        tp: int = 1,
        flash_attention: bool = False,
    ) -> int:
        """Bytes kept for backward per microbatch on one GPU of a TP group."""
        return sum(
            self.stash_terms(
                layer_id, microbatch_size, seq_len, dtype, tp, flash_attention
            ).values()
        )

    # ---- compute ---------------------------------------------------------------------------
    def forward_flops(
        self, layer_id: int, microbatch_size: int, seq_len: int, tp: int = 1
    ) -> float:
        """Matmul FLOPs of one layer's forward pass per GPU of a TP group (2 per multiply-add).

        Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
        Megatron-LM" (2021), Sec. 5.1: 2 * tokens * weights, plus attention scores and context.
        """
        kind = self.layer_kind(layer_id)
        tokens = microbatch_size * seq_len
        h = self.hidden_size
        if kind == "embedding":
            return 0.0
        if kind == "head":
            return 2.0 * tokens * h * self.vocab_size / tp
        return 2.0 * tokens * self.active_matmul_params(layer_id, tp) + self.attention_core_flops(
            microbatch_size, seq_len, tp
        )

    def attention_core_flops(self, microbatch_size: int, seq_len: int, tp: int = 1) -> float:
        """Forward FLOPs of QK^T and softmax @ V of one block per GPU of a TP group (no causal
        discount, as Narayanan et al. count): 2 b s^2 a (d_qk + d_v) / tp. The convention
        model FLOPs and MFU use; a causal kernel does ``causal_attention_flops``."""
        per_head = self.qk_head_dim + self.v_head_dim
        return 2.0 * microbatch_size * seq_len * seq_len * self.num_heads * per_head / tp

    def causal_attention_flops(self, microbatch_size: int, seq_len: int, tp: int = 1) -> float:
        """The attention core's FLOPs a causal flash kernel does: ``attention_core_flops`` on
        the tiles at or below the diagonal only (``causal_share``)."""
        return self.attention_core_flops(microbatch_size, seq_len, tp) * causal_share(seq_len)


FLASH_CAUSAL_TILE = 128
"""Query and key rows per tile of FlashAttention-2's causal kernel (Dao 2023, arXiv
2307.08691, Sec. 3.1.1 "Causal masking": a tile whose key columns all lie after its query rows
is skipped, "about 1.7-1.8x speedup" over the unmasked kernel; its forward tiles are 128 x
64 or 128 x 128 on A100/H100, Sec. 3.3). PyTorch's SDPA flash and memory-efficient kernels
and cuDNN's fused attention skip the same tiles."""


def causal_share(seq_len: int) -> float:
    """Share of the s x s attention scores a causal tiled kernel computes: the n (n + 1) / 2
    tiles at or below the diagonal of n = ceil(s / FLASH_CAUSAL_TILE) per side, 1/2 + 1/(2n):
    0.53 at 2048 tokens, 0.51 at 8192, 1 for one tile."""
    n = max(1, -(-seq_len // FLASH_CAUSAL_TILE))
    return (n + 1) / (2 * n)


DEFAULT_MAX_SEQUENCE = 8192
"""Sequence length default cap: LLaMA-3's pre-training length (Llama 3 report, Sec. 3.4). A
long-context model's 131072 positions are a capability, not the length it is trained at, so
every interface that takes no sequence length (``Job.create``, the wire's 0, the CLIs) uses
``default_sequence``."""


def default_sequence(spec: ModelSpec) -> tuple[int, str]:
    """(sequence length, reason): the model's maximum, capped at DEFAULT_MAX_SEQUENCE."""
    if spec.max_seq_len <= DEFAULT_MAX_SEQUENCE:
        return spec.max_seq_len, f"the model's maximum ({spec.max_seq_len})"
    return DEFAULT_MAX_SEQUENCE, (
        f"{DEFAULT_MAX_SEQUENCE}, not the model's maximum {spec.max_seq_len} (a training "
        "length, not the context capability; pass seq to change)"
    )


MODEL_CATALOG: dict[str, ModelSpec] = {}
MODEL_ALIASES: dict[str, str] = {}


def register_model(spec: ModelSpec, aliases: tuple[str, ...] = ()) -> ModelSpec:
    """Add (or replace) a catalog model and its aliases (matched case-insensitively)."""
    MODEL_CATALOG[spec.name] = spec
    for alias in (spec.name, *aliases):
        MODEL_ALIASES[alias.lower()] = spec.name
    return spec


def catalog_model(name: str) -> ModelSpec | None:
    """The catalog model of that name or alias (case-insensitive), else None."""
    return MODEL_CATALOG.get(name) or MODEL_CATALOG.get(MODEL_ALIASES.get(name.lower(), ""))


def model_wire_name(spec: ModelSpec) -> str:
    """What a Job sends as its model: the catalog name, or else the spec's fields as a JSON
    object, so a server builds the model from the content and never reads a client's path."""
    if catalog_model(spec.name) == spec:
        return spec.name
    return json.dumps(dataclasses.asdict(spec), sort_keys=True)


MAX_SPEC_BYTES = 64 * 1024
"""Largest model given as JSON content (a spec is a few hundred bytes)."""


_NESTED_SPECS = ("moe", "mla", "rope_scaling")
"""ModelSpec fields that are specs of their own (objects of scalars on the wire)."""


def model_from_json(text: str) -> ModelSpec:
    """A ModelSpec from the JSON object of its fields (``model_wire_name``); unknown fields,
    wrong types and bad values are refused naming the field."""
    from .. import inputs

    if len(text) > MAX_SPEC_BYTES:
        raise ValidationError(
            f"a model given as JSON has {len(text)} characters, more than {MAX_SPEC_BYTES}",
            field="model",
        )
    data = inputs.parse_json(text, "model", "the model's JSON content")
    if not isinstance(data, dict):
        raise ValidationError("JSON content must be an object of ModelSpec fields", field="model")
    known = {f.name: f for f in dataclasses.fields(ModelSpec)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValidationError(f"unknown ModelSpec field {unknown[0][:60]!r}", field="model")
    for key, value in data.items():
        nested = key in _NESTED_SPECS and isinstance(value, dict)
        if isinstance(value, dict | list) and not nested:
            raise ValidationError("must be a number, a string, a bool or null", field=key)
        if nested and not all(_wire_scalar(v) for v in value.values()):
            raise ValidationError(
                "must hold numbers, strings, bools, nulls or lists of numbers", field=key
            )
    required = [n for n, f in known.items() if _is_required(f)]
    missing = [n for n in required if n not in data]
    if missing:  # named by the spec's own field names, not a Python signature error
        raise ValidationError(
            f"JSON content lacks the ModelSpec field{'s' * (len(missing) > 1)} "
            f"{', '.join(missing)} (required: {', '.join(required)})",
            field="model",
        )
    try:
        return ModelSpec(**data)
    except TypeError as exc:  # a string where a number belongs
        raise ValidationError(f"is not a valid ModelSpec ({exc!s:.120})", field="model") from None


def _wire_scalar(value: Any) -> bool:
    """A value a nested spec may hold on the wire: a scalar, or a flat list of numbers
    (LongRoPE's per-channel factors)."""
    if isinstance(value, list):
        return all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    return not isinstance(value, dict)


def _is_required(field: dataclasses.Field) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def get_model(name: str | ModelSpec | Mapping[str, Any]) -> ModelSpec:
    """A model by catalog name or alias (case-insensitive), the JSON object of a spec's fields
    (``model_wire_name``), or a Hugging Face ``config.json`` (a path ending in .json, or a
    folder holding one; read with ``read_hf_config``; an existing one is read even where its
    path also spells a catalog name). A dict is a parsed config.json (it has ``model_type``)
    or a spec's fields."""
    if isinstance(name, ModelSpec):
        return name
    if isinstance(name, Mapping):
        return model_from_mapping(name)
    if not isinstance(name, str):
        raise UnknownNameError(
            f"must be a catalog model name, the path of a Hugging Face config.json, its parsed "
            f"dict (json.load) or a ModelSpec, got {name!r:.60}",
            field="model",
        )
    if _config_on_disk(name):  # read even where the name is also a catalog alias (below)
        return read_hf_config(name)
    spec = catalog_model(name)
    if spec is not None:
        return spec
    if name.lstrip().startswith("{"):
        return model_from_json(name)
    from .hf_config import looks_like_config_path

    if looks_like_config_path(name):
        return read_hf_config(name)
    if _is_file(name):  # a path the user meant, not a catalog name they mistyped
        raise ValidationError(
            f"{name!r} is a file but not a JSON config.json; pass the path of a Hugging Face "
            "config.json (a .json file, or a folder holding one) or a catalog model name",
            field="model",
        )
    raise UnknownNameError(
        f"unknown model {name!r}; known models: {', '.join(MODEL_CATALOG)}, or pass the path "
        "of a Hugging Face config.json",
        field="model",
    )


def model_from_mapping(data: Mapping[str, Any]) -> ModelSpec:
    """The model of a dict: a parsed Hugging Face config.json (it names its ``model_type``;
    labelled by its ``_name_or_path`` when it has one) or a ModelSpec's fields."""
    if "model_type" not in data:
        try:
            text = json.dumps(dict(data))
        except (TypeError, ValueError) as exc:  # a value JSON cannot hold (a set, an object)
            raise ValidationError(f"holds a value that is no JSON ({exc})", field="model") from None
        return model_from_json(text)
    from .hf_config import fields_from_hf_dict

    label = data.get("_name_or_path")
    if not (isinstance(label, str) and label.strip()):
        label = f"config.json dict ({str(data['model_type'])[:40]})"
    return ModelSpec(**fields_from_hf_dict(dict(data), name=label))


def _config_on_disk(name: str) -> bool:
    """Whether ``name`` is an existing config.json (a .json file, or a folder holding one).
    Such a path is what the user pointed at even when it also spells a catalog name or alias:
    'hf download mistralai/Mistral-7B-v0.3 --local-dir mistral-7b' makes a folder named like
    the catalog's Mistral-7B (v0.1, another vocabulary), which had silently replaced it."""
    try:
        path = Path(name).expanduser()
        return (path.suffix == ".json" and path.is_file()) or (path / "config.json").is_file()
    except (OSError, ValueError):  # a name too long for a path, or with a NUL
        return False


def _is_file(name: str) -> bool:
    try:
        return Path(name).expanduser().is_file()
    except (OSError, ValueError):  # a name too long for a path, or with a NUL
        return False


def read_hf_config(path) -> ModelSpec:
    """The ModelSpec of a Hugging Face ``config.json`` (or a folder holding one); see
    ``hf_config`` for what is read and refused. Cached while the file is unchanged. A dict
    is taken as the parsed config.json (``json.load``)."""
    from .hf_config import read_hf_fields

    if isinstance(path, Mapping):
        return model_from_mapping({"model_type": None, **path})  # a config, never spec fields
    if not isinstance(path, str | os.PathLike):
        raise ValidationError(
            f"must be the path of a Hugging Face config.json or its parsed dict, got {path!r:.60}",
            field="model",
        )
    return _spec_from_fields(read_hf_fields(path))


@lru_cache(maxsize=64)
def _spec_from_fields(fields: tuple[tuple[str, object], ...]) -> ModelSpec:
    return ModelSpec(**dict(fields))


def _load_catalog() -> None:
    for fields, aliases in model_entries():
        register_model(ModelSpec(**fields), aliases)


_load_catalog()
