"""Multi-head latent attention (MLA; DeepSeek-V2, arXiv 2405.04434, Sec. 2.1; DeepSeek-V3).

Queries and keys/values are projected through low-rank latents: q = W_qb norm(W_qa x) (or one
W_q when ``q_lora_rank`` is None), [c_kv, k_rope] = W_kva x, [k_nope, v] = W_kvb norm(c_kv).
Each head's query/key is ``qk_nope_head_dim + qk_rope_head_dim`` wide, its value
``v_head_dim``. Under TP (Megatron-Core ``MLASelfAttention``) the down projections W_qa, W_kva
and their norms are replicated; W_qb, W_kvb (column-parallel) and the output (row-parallel)
are split by heads.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ValidationError


@dataclass(frozen=True)
class MLASpec:
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None
    """None: queries use one full-rank projection (DeepSeek-V2-Lite)."""

    def __post_init__(self) -> None:
        for field in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(
                    f"must be an integer >= 1, got {value!r}", field=f"mla.{field}"
                )
        if self.q_lora_rank is not None and self.q_lora_rank < 1:
            raise ValidationError("must be >= 1 or null", field="mla.q_lora_rank")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def param_terms(self, hidden: int, heads: int, tp: int) -> dict[str, int]:
        """Attention parameters of one block per GPU of a TP group, by named tensor group."""
        q = heads * self.qk_head_dim
        if self.q_lora_rank is None:
            terms = {"attention_q": hidden * q // tp}
        else:
            r = self.q_lora_rank
            terms = {"attention_q": hidden * r + r * q // tp, "attention_q_norm": r}
        kv_up = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim) // tp
        terms |= {
            "attention_kv": hidden * (self.kv_lora_rank + self.qk_rope_head_dim) + kv_up,
            "attention_kv_norm": self.kv_lora_rank,
            "attention_out": heads * self.v_head_dim * hidden // tp,
        }
        return terms
