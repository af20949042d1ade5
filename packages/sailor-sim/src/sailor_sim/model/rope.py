"""Rotary frequencies of a model: RoFormer's, or a config's ``rope_scaling`` (no torch).

The frequencies are numerics only: a scaling changes no parameter, FLOP or byte, so the
simulator never reads them. They are declared here, once, so the model zoo that trains a
config rotates q and k as the checkpoint's own code does (``rotary_frequencies``).

Kinds followed (Hugging Face's ``ROPE_INIT_FUNCTIONS`` names):
- ``linear`` (Chen et al. 2023, position interpolation): every frequency / factor;
- ``dynamic`` (dynamic NTK): the base raised to
  base x (factor s / L - (factor - 1))^(d / (d - 2)) once a sequence s exceeds the trained
  length L; RoFormer's frequencies up to L;
- ``llama3`` (LLaMA-3.1, Meta's ``apply_scaling``): wavelengths longer than
  L / low_freq_factor divided by factor, shorter than L / high_freq_factor kept, a smooth
  blend between;
- ``yarn`` (Peng et al. 2023, arXiv 2309.00071): per channel a ramp between interpolated
  (/ factor) and original frequencies over the channels whose rotations in L positions fall
  between beta_slow and beta_fast, and cos/sin scaled by 0.1 ln(factor) + 1 (or the config's
  ``attention_factor``, or DeepSeek's mscale ratio);
- ``longrope`` (Phi-3/3.5/4-mini; ``su`` its first name): every frequency divided by its
  channel's ``short_factor``, or ``long_factor`` for a sequence beyond L, and cos/sin scaled
  by sqrt(1 + ln(factor) / ln L), factor = max_position_embeddings / L.
Multimodal mrope is read but not followed: its models train with RoFormer's frequencies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ..errors import ValidationError

FOLLOWED_KINDS = ("linear", "dynamic", "llama3", "yarn", "longrope")


@dataclass(frozen=True)
class RopeScaling:
    """A config's ``rope_scaling`` of a followed kind (fields as Hugging Face names them)."""

    kind: str
    factor: float
    original_max_position_embeddings: int
    """L: the context the frequencies were trained for."""
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    """YaRN's cos/sin scale; None: from factor (and mscale / mscale_all_dim when both set)."""
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    """YaRN: the ramp's ends rounded out to whole channels (gpt-oss sets false)."""
    short_factor: tuple[float, ...] = ()
    long_factor: tuple[float, ...] = ()
    """LongRoPE: one divisor per channel pair, for sequences up to L and beyond it."""

    def __post_init__(self) -> None:
        for name in ("short_factor", "long_factor"):  # JSON gives lists: kept hashable
            value = getattr(self, name)
            if isinstance(value, list | tuple):
                object.__setattr__(self, name, tuple(value))
        if self.kind not in FOLLOWED_KINDS:
            raise ValidationError(
                f"kind {self.kind!r} is not followed; use one of {', '.join(FOLLOWED_KINDS)}",
                field="rope_scaling",
            )
        positive = {"factor": self.factor, "beta_fast": self.beta_fast}
        positive |= {"beta_slow": self.beta_slow, "low_freq_factor": self.low_freq_factor}
        positive["high_freq_factor"] = self.high_freq_factor
        positive["original_max_position_embeddings"] = self.original_max_position_embeddings
        for name, value in positive.items():
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not number or not 0 < value < math.inf:
                raise ValidationError(
                    f"'rope_scaling.{name}' must be a positive number, got {value!r:.40}",
                    field="rope_scaling",
                )
        optional = {"attention_factor": self.attention_factor, "mscale": self.mscale}
        optional["mscale_all_dim"] = self.mscale_all_dim
        for name, value in optional.items():
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0
            ):
                raise ValidationError(
                    f"'rope_scaling.{name}' must be a number >= 0 or null, got {value!r:.40}",
                    field="rope_scaling",
                )
        if not isinstance(self.truncate, bool):
            raise ValidationError(
                f"'rope_scaling.truncate' must be true or false, got {self.truncate!r:.40}",
                field="rope_scaling",
            )
        self._check_longrope()
        if self.kind == "llama3" and not self.high_freq_factor > self.low_freq_factor:
            raise ValidationError(
                f"'rope_scaling.high_freq_factor' ({self.high_freq_factor}) must exceed "
                f"low_freq_factor ({self.low_freq_factor})",
                field="rope_scaling",
            )

    def _check_longrope(self) -> None:
        lists = (self.short_factor, self.long_factor)
        if self.kind != "longrope":
            if any(lists):
                raise ValidationError(
                    f"short_factor / long_factor belong to longrope, not {self.kind}",
                    field="rope_scaling",
                )
            return
        for name, value in zip(("short_factor", "long_factor"), lists, strict=True):
            numbers = all(
                isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < math.inf
                for v in value
            )
            if not value or not isinstance(value, tuple) or not numbers:
                raise ValidationError(
                    f"'rope_scaling.{name}' must be a list of positive numbers, one per "
                    f"rotated channel pair, got {value!r:.60}",
                    field="rope_scaling",
                )
        if len(self.short_factor) != len(self.long_factor):
            raise ValidationError(
                f"'rope_scaling' short_factor has {len(self.short_factor)} entries and "
                f"long_factor {len(self.long_factor)}; give one per rotated channel pair",
                field="rope_scaling",
            )

    def check_channels(self, dims: int) -> None:
        """LongRoPE's lists hold one factor per rotated channel pair of the model's heads."""
        if self.kind == "longrope" and len(self.short_factor) != dims // 2:
            raise ValidationError(
                f"'rope_scaling' has {len(self.short_factor)} short/long factors for "
                f"{dims // 2} rotated channel pairs per head; give one per pair",
                field="rope_scaling",
            )


def rotary_frequencies(
    base: float, dims: int, scaling: RopeScaling | None = None, seq_len: int = 0
) -> tuple[tuple[float, ...], float]:
    """(the dims / 2 angular frequencies of channel pairs j and j + dims / 2, the cos/sin
    scale) of a rotary embedding of ``base`` over ``dims`` channels under ``scaling``, for
    sequences of ``seq_len`` tokens (only ``dynamic`` depends on it)."""
    return _frequencies(float(base), int(dims), scaling, int(seq_len))


@lru_cache(maxsize=256)
def _frequencies(base, dims, scaling, seq_len) -> tuple[tuple[float, ...], float]:
    if scaling is not None and scaling.kind == "dynamic":
        base = _dynamic_base(base, dims, scaling, seq_len)
    freqs = [base ** (-2 * j / dims) for j in range(dims // 2)]
    if scaling is None or scaling.kind == "dynamic":
        return tuple(freqs), 1.0
    if scaling.kind == "linear":
        return tuple(f / scaling.factor for f in freqs), 1.0
    if scaling.kind == "llama3":
        return tuple(_llama3(f, scaling) for f in freqs), 1.0
    if scaling.kind == "longrope":
        return _longrope(freqs, scaling, seq_len)
    return _yarn(freqs, base, dims, scaling)


def _dynamic_base(base: float, dims: int, s: RopeScaling, seq_len: int) -> float:
    trained = s.original_max_position_embeddings
    if seq_len <= trained:
        return base
    return base * (s.factor * seq_len / trained - (s.factor - 1)) ** (dims / (dims - 2))


def _llama3(freq: float, s: RopeScaling) -> float:
    """One frequency as Meta's llama-models ``apply_scaling`` writes it."""
    trained = s.original_max_position_embeddings
    wavelen = 2 * math.pi / freq
    if wavelen < trained / s.high_freq_factor:
        return freq
    if wavelen > trained / s.low_freq_factor:
        return freq / s.factor
    smooth = (trained / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    return (1 - smooth) * freq / s.factor + smooth * freq


def _yarn(freqs: list[float], base: float, dims: int, s: RopeScaling):
    """YaRN's "NTK-by-parts" frequencies and its attention scale (paper Eq. 19-23)."""
    trained = s.original_max_position_embeddings

    def channel(rotations: float) -> float:  # the channel pair turning `rotations` times in L
        return dims * math.log(trained / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = channel(s.beta_fast), channel(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dims - 1)
    if low == high:
        high += 0.001  # as the reference: no division by zero
    out = []
    for j, f in enumerate(freqs):
        ramp = min(max((j - low) / (high - low), 0.0), 1.0)  # 0: extrapolate, 1: interpolate
        out.append(f / s.factor * ramp + f * (1 - ramp))
    return tuple(out), _yarn_attention(s)


def _longrope(freqs: list[float], s: RopeScaling, seq_len: int):
    """LongRoPE's (Ding et al. 2024, arXiv 2402.13753) per-channel rescaled frequencies, as
    Phi-3's code picks them: the long factors once a sequence exceeds L."""
    trained = s.original_max_position_embeddings
    divisors = s.long_factor if seq_len > trained else s.short_factor
    if len(divisors) != len(freqs):
        raise ValidationError(
            f"'rope_scaling' has {len(divisors)} factors for {len(freqs)} channel pairs",
            field="rope_scaling",
        )
    scale = s.attention_factor
    if scale is None:
        scale = 1.0 if s.factor <= 1 else math.sqrt(1 + math.log(s.factor) / math.log(trained))
    return tuple(f / d for f, d in zip(freqs, divisors, strict=True)), float(scale)


def _yarn_attention(s: RopeScaling) -> float:
    if s.attention_factor is not None:
        return float(s.attention_factor)

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if s.mscale and s.mscale_all_dim:
        return mscale(s.factor, s.mscale) / mscale(s.factor, s.mscale_all_dim)
    return mscale(s.factor)
