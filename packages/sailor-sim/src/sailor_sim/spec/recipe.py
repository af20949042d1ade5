"""The training recipe: learning-rate schedule, AdamW settings, weight-decay groups and gradient
clipping, declared once (torch-free) as ``Recipe``, the ``recipe`` part of ``RunSpec`` (flags,
config file and wire message all come from it); ``LRSchedule`` and ``OptimConfig`` are what
the engine uses, built from it.

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
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..errors import ValidationError

SCHEDULE_KINDS = ("cosine", "linear", "wsd", "constant")
_FLAT_NAMES = {"kind": "schedule", "max_lr": "lr", "betas": "beta1/beta2"}
"""LRSchedule / OptimConfig field -> the Recipe field (flag) that sets it, where they differ."""
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
        _check(0 < self.eps < math.inf, "eps", "> 0 and finite", self.eps)
        wd, clip = self.weight_decay, self.clip_norm
        _check(0 <= wd < math.inf, "weight_decay", ">= 0 and finite", wd)
        _check(0 <= clip < math.inf, "clip_norm", ">= 0 and finite (0: off)", clip)
        bad = [g for g in self.no_decay if g not in NO_DECAY_GROUPS]
        _check(not bad, "no_decay", f"a subset of {NO_DECAY_GROUPS}", list(self.no_decay))

    def to_dict(self) -> dict:
        return dict(asdict(self), betas=list(self.betas), no_decay=list(self.no_decay))


@dataclass(frozen=True)
class Recipe:
    """How a run optimizes, flat: the ``recipe`` part of ``RunSpec`` (its fields are the flags
    of every CLI that trains and the ``[recipe]`` table of a run's ``--config`` file). The
    engine gets ``schedule_for(steps)`` and ``optim()`` from it."""

    lr: float = 1e-3
    """Peak learning rate, reached at the end of the warm-up."""
    min_lr: float | None = None
    """Learning rate at the end of the decay, at most lr (default: lr / 10)."""
    warmup_steps: int = 2
    """Linear warm-up steps."""
    decay_steps: int | None = None
    """The step the decay ends at (default: the run's steps)."""
    schedule: str = "cosine"
    """Learning-rate schedule: cosine, linear, wsd or constant."""
    wsd_decay_fraction: float = 0.2
    """WSD: share of decay_steps spent decaying at the end."""
    weight_decay: float = 0.1
    """AdamW decoupled weight decay."""
    no_decay: str = ",".join(NO_DECAY_GROUPS)
    """Comma-separated groups without weight decay, of norm, bias, embedding ("": none)."""
    clip_norm: float = 1.0
    """Global gradient-norm clip (0: off)."""
    beta1: float = 0.9
    """AdamW beta1."""
    beta2: float = 0.95
    """AdamW beta2."""
    eps: float = 1e-8
    """AdamW epsilon."""

    def __post_init__(self) -> None:
        self.schedule_for(self.decay_steps or 1)  # each value checked, named by its field
        self.optim()

    def no_decay_groups(self) -> tuple[str, ...]:
        return tuple(g.strip() for g in self.no_decay.split(",") if g.strip())

    def schedule_for(self, steps: int) -> LRSchedule:
        """The learning-rate schedule of a run of ``steps`` iterations."""
        decay = steps if self.decay_steps is None else self.decay_steps
        return _named(lambda: LRSchedule(
            max_lr=self.lr, min_lr=self.lr / 10 if self.min_lr is None else self.min_lr,
            warmup_steps=self.warmup_steps,
            decay_steps=decay, kind=self.schedule, wsd_decay_fraction=self.wsd_decay_fraction,
        ))  # fmt: skip

    def optim(self) -> OptimConfig:
        return _named(lambda: OptimConfig(
            betas=(self.beta1, self.beta2), eps=self.eps, weight_decay=self.weight_decay,
            clip_norm=self.clip_norm, no_decay=self.no_decay_groups(),
        ))  # fmt: skip

    def with_engine(
        self, schedule: LRSchedule | None = None, optim: OptimConfig | None = None
    ) -> Recipe:
        """This recipe with the fields an engine-shaped ``schedule`` / ``optim`` set (the
        inverse of ``schedule_for`` / ``optim``: ``schedule_for(schedule.decay_steps)`` and
        ``optim()`` of the result give them back)."""
        out: dict[str, Any] = {}
        if schedule is not None:
            out.update(
                lr=schedule.max_lr, min_lr=schedule.min_lr, warmup_steps=schedule.warmup_steps,
                decay_steps=schedule.decay_steps, schedule=schedule.kind,
                wsd_decay_fraction=schedule.wsd_decay_fraction,
            )  # fmt: skip
        if optim is not None:
            out.update(
                beta1=optim.betas[0], beta2=optim.betas[1], eps=optim.eps,
                weight_decay=optim.weight_decay, clip_norm=optim.clip_norm,
                no_decay=",".join(optim.no_decay),
            )  # fmt: skip
        return replace(self, **out)


def _named(build):
    """Build an LRSchedule / OptimConfig; its errors named by the Recipe field (the flag)."""
    try:
        return build()
    except ValidationError as exc:
        key = _FLAT_NAMES.get(exc.field or "", exc.field)
        raise ValidationError(str(exc).split(": ", 1)[-1], field=key) from None


def _check(ok: bool, name: str, rule: str, value: Any) -> None:
    if not ok:
        raise ValidationError(f"must be {rule}, got {value!r}", field=name)
