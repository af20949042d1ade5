"""The training recipe: learning-rate schedule, AdamW settings, weight-decay groups, gradient
clipping and seed, declared once (torch-free) for the runtime's engine, its CLI flags and the
run config file (TOML; ``Recipe.from_toml``), and for a run spec to carry.

Schedules (``LRSchedule.kind``), after a linear warm-up to ``max_lr`` over ``warmup_steps``:
- ``cosine``: cosine decay to ``min_lr`` at ``decay_steps`` (Loshchilov & Hutter 2017, SGDR,
  without restarts);
- ``linear``: linear decay to ``min_lr`` at ``decay_steps``;
- ``wsd``: warm-up, stable at ``max_lr``, then a linear decay to ``min_lr`` over the last
  ``wsd_decay_fraction`` of ``decay_steps`` (Hu et al. 2024, MiniCPM, Sec. 4.1);
- ``constant``: ``max_lr`` after the warm-up.
Constant ``min_lr`` after ``decay_steps``.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ValidationError

SCHEDULE_KINDS = ("cosine", "linear", "wsd", "constant")
_FLAT_NAMES = {"kind": "schedule", "max_lr": "lr", "betas": "beta1/beta2"}
"""Field name -> the flag / TOML key that sets it (``Recipe.flat``), where they differ."""
NO_DECAY_GROUPS = ("norm", "bias", "embedding")
"""Parameter groups that may be exempt from weight decay (``OptimConfig.no_decay``)."""


@dataclass(frozen=True)
class LRSchedule:
    max_lr: float = 1e-3
    """Peak learning rate, reached at the end of the warm-up."""
    min_lr: float = 1e-4
    """Learning rate at and after ``decay_steps``."""
    warmup_steps: int = 2
    """Linear warm-up steps (step s gets max_lr * (s+1) / warmup_steps)."""
    decay_steps: int = 1000
    """The step at which the decay reaches ``min_lr``."""
    kind: str = "cosine"
    """cosine, linear, wsd or constant (module docstring)."""
    wsd_decay_fraction: float = 0.2
    """WSD: share of ``decay_steps`` spent decaying at the end."""

    def __post_init__(self) -> None:
        _check(self.kind in SCHEDULE_KINDS, "kind", f"one of {SCHEDULE_KINDS}", self.kind)
        _check(0 < self.max_lr < math.inf, "max_lr", "> 0 and finite", self.max_lr)
        _check(0 <= self.min_lr <= self.max_lr, "min_lr", "in [0, max_lr]", self.min_lr)
        _check(self.warmup_steps >= 0, "warmup_steps", ">= 0", self.warmup_steps)
        _check(self.decay_steps >= 0, "decay_steps", ">= 0", self.decay_steps)
        frac = self.wsd_decay_fraction
        _check(0 < frac <= 1, "wsd_decay_fraction", "in (0, 1]", frac)

    def lr(self, step: int) -> float:
        """Learning rate of optimizer step ``step`` (0-based)."""
        if step < self.warmup_steps:
            return self.max_lr * (step + 1) / self.warmup_steps
        if self.kind == "constant":
            return self.max_lr
        if step >= self.decay_steps:
            return self.min_lr
        start = self.warmup_steps
        if self.kind == "wsd":
            start = max(start, round(self.decay_steps * (1 - self.wsd_decay_fraction)))
            if step < start:
                return self.max_lr
        t = (step - start) / max(1, self.decay_steps - start)
        if self.kind == "linear" or self.kind == "wsd":
            return self.max_lr + (self.min_lr - self.max_lr) * t
        return self.min_lr + 0.5 * (self.max_lr - self.min_lr) * (1 + math.cos(math.pi * t))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class OptimConfig:
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW (beta1, beta2)."""
    eps: float = 1e-8
    weight_decay: float = 0.1
    """Decoupled weight decay (AdamW) of the parameters not exempt by ``no_decay``."""
    clip_norm: float = 1.0
    """Clip the global gradient norm to this (0: no clipping)."""
    no_decay: tuple[str, ...] = ()
    """Groups exempt from weight decay, of ``NO_DECAY_GROUPS``. The engine's own default is
    none (every parameter decays, as its equivalence baselines were recorded); ``Recipe``
    exempts all three, the usual choice (GPT-2/nanoGPT, Megatron)."""

    def __post_init__(self) -> None:
        b1, b2 = self.betas
        _check(0 <= b1 < 1 and 0 <= b2 < 1, "betas", "two numbers in [0, 1)", self.betas)
        _check(self.eps > 0, "eps", "> 0", self.eps)
        _check(self.weight_decay >= 0, "weight_decay", ">= 0", self.weight_decay)
        _check(self.clip_norm >= 0, "clip_norm", ">= 0 (0: off)", self.clip_norm)
        bad = [g for g in self.no_decay if g not in NO_DECAY_GROUPS]
        _check(not bad, "no_decay", f"a subset of {NO_DECAY_GROUPS}", list(self.no_decay))

    def to_dict(self) -> dict:
        return dict(asdict(self), betas=list(self.betas), no_decay=list(self.no_decay))


@dataclass(frozen=True)
class Recipe:
    """Everything about how a run optimizes, as the flags of ``sailor run`` and the keys of its
    ``--config`` TOML file (flat: ``lr``, ``min_lr``, ``warmup_steps``, ``decay_steps``,
    ``schedule``, ``wsd_decay_fraction``, ``weight_decay``, ``no_decay``, ``clip_norm``,
    ``beta1``, ``beta2``, ``eps``, ``seed``)."""

    schedule: LRSchedule = field(default_factory=LRSchedule)
    optimizer: OptimConfig = field(default_factory=lambda: OptimConfig(no_decay=NO_DECAY_GROUPS))
    seed: int = 0
    """Initial weights and the data order."""

    def flat(self) -> dict[str, Any]:
        """The flat key -> value view (the TOML keys and the flag names)."""
        s, o = self.schedule, self.optimizer
        return {
            "lr": s.max_lr, "min_lr": s.min_lr, "warmup_steps": s.warmup_steps,
            "decay_steps": s.decay_steps, "schedule": s.kind,
            "wsd_decay_fraction": s.wsd_decay_fraction, "weight_decay": o.weight_decay,
            "no_decay": list(o.no_decay), "clip_norm": o.clip_norm, "beta1": o.betas[0],
            "beta2": o.betas[1], "eps": o.eps, "seed": self.seed,
        }  # fmt: skip

    def with_values(self, values: Mapping[str, Any], origin: str = "recipe") -> Recipe:
        """A copy with some flat keys replaced; unknown keys and wrong types are refused with
        a ``ValidationError`` naming ``origin.key``."""
        flat = self.flat()
        for key, value in values.items():
            if key not in flat:
                raise ValidationError(
                    f"unknown key; known: {sorted(flat)}", field=f"{origin}.{key}"
                )
            flat[key] = _typed(value, flat[key], f"{origin}.{key}")
        try:
            return Recipe(
                schedule=LRSchedule(
                    max_lr=flat["lr"], min_lr=min(flat["min_lr"], flat["lr"]),
                    warmup_steps=flat["warmup_steps"], decay_steps=flat["decay_steps"],
                    kind=flat["schedule"], wsd_decay_fraction=flat["wsd_decay_fraction"],
                ),
                optimizer=OptimConfig(
                    betas=(flat["beta1"], flat["beta2"]), eps=flat["eps"],
                    weight_decay=flat["weight_decay"], clip_norm=flat["clip_norm"],
                    no_decay=tuple(flat["no_decay"]),
                ),
                seed=flat["seed"],
            )  # fmt: skip
        except ValidationError as exc:  # named by the flat key the user wrote
            key = _FLAT_NAMES.get(exc.field or "", exc.field)
            message = str(exc).split(": ", 1)[-1]
            raise ValidationError(message, field=f"{origin}.{key}") from None

    @classmethod
    def from_toml(cls, path: str | Path, base: Recipe | None = None) -> Recipe:
        try:
            data = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise ValidationError(f"cannot read {path} ({exc.strerror})", field="config") from None
        except tomllib.TOMLDecodeError as exc:
            raise ValidationError(f"{path} is not valid TOML ({exc})", field="config") from None
        return (base or cls()).with_values(data, origin=str(path))


def _typed(value: Any, like: Any, name: str) -> Any:
    """``value`` checked against the type of the default ``like`` (an int is a float, a bool is
    neither)."""
    if isinstance(like, bool) or isinstance(value, bool):
        ok = isinstance(value, bool) and isinstance(like, bool)
    elif isinstance(like, int):
        ok = isinstance(value, int)
    elif isinstance(like, float):
        ok = isinstance(value, int | float)
        value = float(value) if ok else value
    elif isinstance(like, list):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:
        ok = isinstance(value, type(like))
    if not ok:
        raise ValidationError(f"must be like {like!r}, got {value!r}", field=name)
    return value


def _check(ok: bool, name: str, rule: str, value: Any) -> None:
    if not ok:
        raise ValidationError(f"must be {rule}, got {value!r}", field=name)
