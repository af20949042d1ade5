"""``TrainConfig``: everything one rank needs, as one value and one JSON file.

Whoever starts ranks (``launch.start_local``, ``launch.launch_many``, the agent's
``RankRunner``) builds one ``TrainConfig``, writes it once with ``write``, and starts every
rank as ``python -m sailor_runtime.engine.worker CONFIG.json`` with its rank in the ``RANK``
environment variable (the torch.distributed convention; the rest is the same for every rank,
so one file serves them all). The rank reads it back with ``TrainConfig.read``: unknown or
missing keys and values of the wrong type or range are refused with an ``EngineError`` that
names the field and the rule, before any process group exists.

Torch-free on purpose: the agent writes these files and must not pay torch's import.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from sailor_sim.errors import SailorSimError
from sailor_sim.job import Job
from sailor_sim.plan import Plan

from ..topology import Topology
from .options import ExecutionOptions, OptionsError, unsupported_reason

BACKENDS = ("gloo", "nccl")
SCHEDULES = ("1f1b", "gpipe")
DTYPES = ("fp32", "fp64", "bf16", "fp16")
OPTIMIZER_IMPLS = ("auto", "sailor", "torch-fused")
RANK_ENV = "RANK"
"""The rank of a process started with a TrainConfig file (as torchrun sets it)."""


class EngineError(ValueError):
    """Bad engine input (names the field and the fix)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


@dataclass(frozen=True)
class LRSchedule:
    """Linear warm-up to ``max_lr`` over ``warmup_steps``, then cosine decay to ``min_lr`` at
    ``decay_steps`` (Loshchilov & Hutter 2017, SGDR, without restarts); constant after."""

    max_lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 2
    decay_steps: int = 1000

    def lr(self, step: int) -> float:
        """Learning rate of optimizer step ``step`` (0-based)."""
        if step < self.warmup_steps:
            return self.max_lr * (step + 1) / self.warmup_steps
        if step >= self.decay_steps:
            return self.min_lr
        t = (step - self.warmup_steps) / max(1, self.decay_steps - self.warmup_steps)
        return self.min_lr + 0.5 * (self.max_lr - self.min_lr) * (1 + math.cos(math.pi * t))

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class OptimConfig:
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    clip_norm: float = 1.0


@dataclass(frozen=True)
class TrainConfig:
    job: Job
    plan: Plan
    """The plan every rank runs; its layout (``Topology``) gives the world size."""
    steps: int
    """Train until this global step count (a resumed run continues from its checkpoint)."""
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    """Save every K steps (0: only at the last step); no saves without a directory."""
    metrics_path: str | None = None
    """JSON lines, one per step, written by the metrics rank (``Topology.metrics_rank``)."""
    seed: int = 0
    """Initial weights and data order."""
    backend: str = "gloo"
    schedule: str = "1f1b"
    lr: LRSchedule = field(default_factory=LRSchedule)
    optim: OptimConfig = field(default_factory=OptimConfig)
    dtype: str | None = None
    """Override the job's dtype ('fp64' for bit-tight equivalence checks)."""
    options: ExecutionOptions = field(default_factory=ExecutionOptions)
    """Precision, recomputation, attention kernel, ZeRO stage (``options``)."""
    optimizer_impl: str = "auto"
    """AdamW implementation (``optim.make_optimizer``): auto = torch's fused kernel on CUDA,
    ours on CPU; ``sailor`` or ``torch-fused`` to choose."""
    memory_probe_step: int = 0
    """Measure the tensor memory of the Nth step this process runs (1-based, counted from the
    start or the resume; 0: never) with ``memprobe``; every rank writes
    ``METRICS.rankR.memory.json`` (needs ``metrics_path``)."""
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    store_prefix: str = "sailor"
    """Every rendezvous key lives under this prefix (one per generation or run)."""
    store_is_external: bool = False
    """The TCPStore is hosted by someone else (the launcher); else rank 0 hosts it."""
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        for name, (kind, ok, rule) in _RULES.items():
            value = getattr(self, name)
            if not _is(value, kind) or not ok(value):
                raise EngineError(f"must be {rule}, got {value!r}", field=name)
        reason = unsupported_reason(self.options, self.job, self.plan)
        if reason is not None:  # the plan this option cannot run on, before any rank starts
            raise EngineError(reason, field="options")

    @property
    def world_size(self) -> int:
        return Topology(self.plan).world_size

    def preload_modules(self) -> tuple[str, ...]:
        """Modules a rank of this config imports lazily during its first step, which a parent
        that forks ranks (the agent's zygote) can import once for all of them. Recomputation
        runs through ``torch.utils.checkpoint``, whose first call imports ``torch._dynamo``
        (about 900 modules: 3.5 s of CPU on the 2-core dev VM, and 5-7 s of every rank's
        first step after a restart of ``make demo``, which recomputes)."""
        return ("torch._dynamo",) if self.options.recompute != "none" else ()

    # ---- JSON ------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(
            job=self.job.to_dict(),
            plan=self.plan.to_dict(),
            lr=self.lr.to_dict(),
            optim=asdict(self.optim),
            options=self.options.to_dict(),
        )
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, data: Any) -> TrainConfig:
        if not isinstance(data, Mapping):
            raise EngineError(f"must be a JSON object, got {type(data).__name__}", field="config")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise EngineError(f"unknown keys {unknown}; known: {sorted(known)}", field="config")
        missing = [k for k in ("job", "plan", "steps") if k not in data]
        if missing:
            raise EngineError("is missing (required: job, plan, steps)", field=missing[0])
        values = dict(data)
        job = _parse("job", lambda: Job.from_dict(data["job"]))
        values.update(
            job=job,
            plan=_parse("plan", lambda: Plan.from_dict(data["plan"]).check(job)),
            lr=_parse("lr", lambda: _strict(LRSchedule, data.get("lr", {}), "lr")),
            optim=_parse("optim", lambda: _optim(data.get("optim", {}))),
            options=_parse("options", lambda: ExecutionOptions.from_dict(data.get("options"))),
        )
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise EngineError(f"is not valid JSON ({exc})", field="config") from None
        return cls.from_dict(data)

    def write(self, path: str | Path) -> Path:
        """Write atomically (a rank never reads half a file)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.to_json())
        os.replace(tmp, path)
        return path

    @classmethod
    def read(cls, path: str | Path) -> TrainConfig:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise EngineError(f"cannot read {path} ({exc.strerror})", field="config") from None
        return cls.from_json(text)


def rank_from_env(world_size: int, env: Mapping[str, str] = os.environ) -> int:
    """This process's rank, from ``RANK`` (set by whoever started it)."""
    text = env.get(RANK_ENV)
    if text is None:
        raise EngineError(
            f"is not set; the launcher sets {RANK_ENV}=0..{world_size - 1} per rank", field="rank"
        )
    if not text.isdigit() or int(text) >= world_size:
        raise EngineError(f"{RANK_ENV}={text!r} is outside 0..{world_size - 1}", field="rank")
    return int(text)


# ---- validation ------------------------------------------------------------------------------
def _nonneg(v: int) -> bool:
    return v >= 0


def _optional_str(v: Any) -> bool:
    return v is None or (isinstance(v, str) and v != "")


_RULES: dict[str, tuple[type | str, Callable[[Any], bool], str]] = {
    "job": (Job, lambda v: True, "a Job"),
    "plan": (Plan, lambda v: True, "a Plan"),
    "steps": (int, _nonneg, "an integer >= 0"),
    "checkpoint_dir": ("str?", _optional_str, "a directory path or null"),
    "checkpoint_every": (int, _nonneg, "an integer >= 0 (0: save only at the last step)"),
    "metrics_path": ("str?", _optional_str, "a file path or null"),
    "seed": (int, _nonneg, "an integer >= 0"),
    "backend": (str, lambda v: v in BACKENDS, f"one of {BACKENDS}"),
    "schedule": (str, lambda v: v in SCHEDULES, f"one of {SCHEDULES}"),
    "lr": (LRSchedule, lambda v: True, "an LRSchedule"),
    "optim": (OptimConfig, lambda v: True, "an OptimConfig"),
    "dtype": ("str?", lambda v: v is None or v in DTYPES, f"null or one of {DTYPES}"),
    "options": (ExecutionOptions, lambda v: True, "ExecutionOptions"),
    "optimizer_impl": (str, lambda v: v in OPTIMIZER_IMPLS, f"one of {OPTIMIZER_IMPLS}"),
    "memory_probe_step": (int, _nonneg, "an integer >= 0 (0: never)"),
    "master_addr": (str, lambda v: v != "", "a host name or address"),
    "master_port": (int, lambda v: 1 <= v <= 65535, "a TCP port 1..65535"),
    "store_prefix": (str, lambda v: v != "", "a non-empty string"),
    "store_is_external": (bool, lambda v: True, "true or false"),
    "timeout_s": (float, lambda v: v > 0, "a number of seconds > 0"),
}


def _is(value: Any, kind: type | str) -> bool:
    """Type check that JSON cannot fool: a bool is not an int, an int is a float."""
    if kind == "str?":
        return value is None or isinstance(value, str)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, kind)  # type: ignore[arg-type]


def _parse(name: str, build: Callable[[], Any]) -> Any:
    """Build a nested value; its errors name the field."""
    try:
        return build()
    except EngineError:
        raise  # already names its field (``lr.max_lr``)
    except OptionsError as exc:
        raise EngineError(str(exc), field=name) from None
    except (SailorSimError, ValueError, TypeError, KeyError) as exc:
        raise EngineError(f"{exc}", field=name) from None


def _strict(cls: type, data: Any, name: str) -> Any:
    """A flat dataclass of numbers from a JSON object: unknown keys and non-numbers refused."""
    if not isinstance(data, Mapping):
        raise EngineError(f"must be a JSON object, got {type(data).__name__}", field=name)
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise EngineError(f"unknown keys {unknown}; known: {sorted(known)}", field=name)
    for key, value in data.items():
        kind = int if isinstance(getattr(cls(), key), int) else float
        if not _is(value, kind):
            raise EngineError(f"must be a number, got {value!r}", field=f"{name}.{key}")
    return cls(**data)


def _optim(data: Any) -> OptimConfig:
    if not isinstance(data, Mapping):
        raise EngineError(f"must be a JSON object, got {type(data).__name__}", field="optim")
    base = _strict(OptimConfig, {k: v for k, v in data.items() if k != "betas"}, "optim")
    if "betas" not in data:
        return base
    betas = data["betas"]
    pair = isinstance(betas, list | tuple) and len(betas) == 2
    if not (pair and all(_is(b, float) for b in betas)):
        raise EngineError(f"must be two numbers, got {betas!r}", field="optim.betas")
    return replace(base, betas=(float(betas[0]), float(betas[1])))
