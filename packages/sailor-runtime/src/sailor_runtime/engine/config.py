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
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from sailor_sim import (
    ExecutionOptions,
    Job,
    LRSchedule,
    OptimConfig,
    Plan,
    Recipe,
    RunSpec,
    SailorError,
    SailorSimError,
    specs,
)

from ..topology import Topology
from .options import (
    OptionsError,
    options_from_dict,
    precision_problem,
    unsupported_option,
    unsupported_reason,
)

BACKENDS = ("gloo", "nccl")
SCHEDULES = ("1f1b", "gpipe")
DTYPES = ("fp32", "fp64", "bf16", "fp16")
OPTIMIZER_IMPLS = ("auto", "sailor", "torch-fused")
RANK_ENV = "RANK"
"""The rank of a process started with a TrainConfig file (as torchrun sets it)."""


ON_SAVE_ERROR = ("stop", "continue")
"""What the ranks do when a checkpoint cannot be written (``savefaults``)."""
FATAL_EXIT = 3
"""Exit status of a rank that stopped on a condition a restart cannot fix (a checkpoint that
cannot be written): the controller ends the run FAILED instead of re-planning."""


class EngineError(SailorError):
    """Bad engine input (names the field and the fix)."""


class RunViews:
    """Read-only views of a config's ``run`` (RunSpec), the one place a run's settings live:
    the rank's (``TrainConfig``), the controller's and the local run's configs read them here
    and never store them again."""

    run: RunSpec

    @property
    def steps(self) -> int:
        """Train until this global step count (a resumed run continues from its checkpoint)."""
        return self.run.steps

    @property
    def checkpoint_every(self) -> int:
        """Save every K steps (0: only at the last step); no saves without a directory."""
        return self.run.checkpoint_every

    @property
    def seed(self) -> int:
        """Initial weights and data order."""
        return self.run.seed

    @property
    def lr(self) -> float:
        """The peak learning rate (``run.recipe.lr``)."""
        return self.run.recipe.lr

    @property
    def lr_schedule(self) -> LRSchedule:
        """The engine's learning-rate schedule of the run (``RunSpec.lr_schedule``)."""
        return self.run.lr_schedule()

    @property
    def optim(self) -> OptimConfig:
        """The engine's AdamW settings of the run (``Recipe.optim``)."""
        return self.run.recipe.optim()

    @property
    def precision(self) -> str | None:
        """fp32, or bf16 / fp16 mixed precision with fp32 master weights
        (``RunSpec.precision``); None: the job's dtype."""
        return self.run.precision

    @property
    def options(self) -> ExecutionOptions:
        """The simulator's execution options (``RunSpec.options``): recomputation, attention
        kernel, ZeRO stage, sequence parallelism, virtual stages; ``options`` says which run."""
        return self.run.options


ENGINE_RECIPE = Recipe().with_engine(LRSchedule(), OptimConfig())
"""The recipe of a config built from a job alone (``TrainConfig.for_job`` without ``run``):
the engine's ``LRSchedule()`` and ``OptimConfig()`` (decay over 1000 steps, every parameter
decays), as its equivalence baselines were recorded."""
ENGINE_SHAPED = ("lr", "optim")
"""Settings ``TrainConfig.for_job`` takes in the engine's shape (an ``LRSchedule``, an
``OptimConfig``) and writes into the run's recipe."""


@dataclass(frozen=True)
class TrainConfig(RunViews):
    job: Job
    plan: Plan
    """The plan every rank runs; its layout (``Topology``) gives the world size."""
    run: RunSpec
    """The run's settings, the one place steps, checkpointing, seed, learning-rate schedule,
    optimizer, precision and options are read from (``steps`` ... ``options`` are views of
    it, ``RunViews``), with any field a ``RunSpec`` subclass added. Build one from a job with
    ``for_job`` (tests, benches, ``launch_local``) or from a received spec with ``from_run``."""
    checkpoint_dir: str | None = None
    metrics_path: str | None = None
    """JSON lines, one per step, written by the metrics rank (``Topology.metrics_rank``)."""
    backend: str = "gloo"
    schedule: str = "1f1b"
    dtype: str | None = None
    """Override the job's dtype ('fp64' for bit-tight equivalence checks); the training
    precision is the run's (``precision``)."""
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
    """The rendezvous store's namespace of this run (one per generation or run): every key of
    its ranks lives there, and they see no other (``engine.storeserver``)."""
    store_key: str = field(default_factory=lambda: secrets.token_hex(32), repr=False)
    """The namespace's key (64 hex digits), which the store requires of every client; ranks
    that share a config share it (the default: a fresh one)."""
    store_is_external: bool = False
    """The store is hosted by someone else (the launcher, the controller); else rank 0 hosts
    it."""
    timeout_s: float = 300.0
    data_dir: str | None = None
    """A folder of token shards from ``sailor data prepare`` (its ``train`` split is trained,
    its ``val`` split evaluated); None: the generated byte corpus of ``data``."""
    eval_every: int = 0
    """Validation loss every this many steps and at the last step (0: never; needs
    ``data_dir``)."""
    eval_batches: int = 2
    """Global batches of the validation split each evaluation reads (the same ones each
    time)."""
    sample_log_path: str | None = None
    """Append, per step and replica, the sample ids the replica trained (JSON lines, written by
    TP rank 0 of the replica's first stage; an audit of the exactly-once order)."""
    generation: int = 0
    """The controller generation these ranks belong to; with a checkpoint directory, a save
    happens only while the run fence names it (``fence``); 0 = not fenced."""
    on_save_error: str = "stop"
    """A checkpoint that cannot be written (a full disk): 'stop' every rank with one line and
    exit status 3, or 'continue' training without saving (``savefaults``)."""

    @classmethod
    def from_run(cls, run: RunSpec, job: Job, plan: Plan, **rest: Any) -> TrainConfig:
        """The config of a rank of ``run``: its settings from the spec (a precision or options
        the engine does not run refused, naming the field), the rest (rendezvous, paths) from
        ``rest``."""
        return cls.for_job(job, plan, run=run, **rest)

    @classmethod
    def for_job(
        cls, job: Job, plan: Plan, *, run: RunSpec | None = None, **settings: Any
    ) -> TrainConfig:
        """A rank config of ``job`` on ``plan``. ``settings`` that name fields of the run's
        spec (``steps``, ``checkpoint_every``, ``seed``, ``precision``, ``options``, ``recipe``,
        a subclass's own) replace them in ``run``, ``lr`` (an ``LRSchedule``) and ``optim``
        (an ``OptimConfig``) replace the recipe's fields they set, the rest are this config's
        own fields. Without ``run``: a RunSpec of the job's model, batch and sequence with the
        engine's defaults (``ENGINE_RECIPE``, default options). Bad values raise
        ``EngineError`` naming the field."""
        base = run if run is not None else _job_run(job)
        names = set(type(base).__dataclass_fields__) if is_dataclass(base) else set()
        changes = {k: settings.pop(k) for k in list(settings) if k in names}
        shaped = {k: settings.pop(k) for k in ENGINE_SHAPED if k in settings}
        for name, kind in (("lr", LRSchedule), ("optim", OptimConfig)):
            if name in shaped and not isinstance(shaped[name], kind):
                raise EngineError(f"must be {_RULE_NAMES[name]}, got {shaped[name]!r}", field=name)
        if not isinstance(base, RunSpec):
            raise EngineError(f"must be a RunSpec, got {base!r:.60}", field="run")
        if shaped:
            recipe = changes.get("recipe", base.recipe)
            if not isinstance(recipe, Recipe):
                raise EngineError(f"must be a Recipe, got {recipe!r:.60}", field="recipe")
            changes["recipe"] = recipe.with_engine(shaped.get("lr"), shaped.get("optim"))
        spec = _spec(lambda: replace(base, **changes)) if changes else base
        return cls(job=job, plan=plan, run=spec, **settings)

    def __post_init__(self) -> None:
        for name, (kind, ok, rule) in _RULES.items():
            value = getattr(self, name)
            if not _is(value, kind) or not ok(value):
                raise EngineError(f"must be {rule}, got {value!r}", field=name)
        problem = precision_problem(self.precision)
        if problem is not None:
            raise EngineError(problem.split(": ", 1)[1], field="precision")
        reason = unsupported_option(self.options)
        reason = reason or unsupported_reason(self.options, self.job, self.plan)
        if reason is not None:  # the plan this option cannot run on, before any rank starts
            raise EngineError(reason, field="options")
        if self.options.virtual_stages > 1 and self.schedule != "1f1b":
            raise EngineError(
                f"is {self.schedule!r}; interleaved 1F1B (virtual_stages "
                f"{self.options.virtual_stages}) is a 1f1b schedule: use '1f1b' or "
                "virtual_stages 1",
                field="schedule",
            )

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
            run=specs.to_json(self.run, _run_message()),
        )
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, data: Any) -> TrainConfig:
        """A config of ``to_dict``'s keys; the run's settings may instead (or over ``run``) be
        given as keys of their own, as a ``launch_many`` run or a file of before holds them
        (``SETTING_KEYS``: ``lr`` and ``optim`` in the engine's shape, ``options`` as the
        simulator's or the engine's old options dict)."""
        if not isinstance(data, Mapping):
            raise EngineError(f"must be a JSON object, got {type(data).__name__}", field="config")
        own = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - own - set(SETTING_KEYS))
        if unknown:
            known = sorted(own | set(SETTING_KEYS))
            raise EngineError(f"unknown keys {unknown}; known: {known}", field="config")
        missing = [k for k in ("job", "plan") if k not in data]
        if missing or ("run" not in data and "steps" not in data):
            field = missing[0] if missing else "steps"
            raise EngineError("is missing (required: job, plan, and run or steps)", field=field)
        values = {k: v for k, v in data.items() if k in own}
        job = _parse("job", lambda: Job.from_dict(data["job"]))
        values.update(
            job=job,
            plan=_parse("plan", lambda: Plan.from_dict(data["plan"]).check(job)),
            run=_parse("run", lambda: _run(data.get("run"))),
        )
        if values["run"] is None:
            del values["run"]
        return cls.for_job(**values, **_settings(data))

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise EngineError(f"is not valid JSON ({exc})", field="config") from None
        return cls.from_dict(data)

    def write(self, path: str | Path) -> Path:
        """Write atomically (a rank never reads half a file), readable by its owner only (it
        holds the store key)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(self.to_json())
        os.replace(tmp, path)
        return path

    @classmethod
    def read(cls, path: str | Path) -> TrainConfig:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise EngineError(f"cannot read {path} ({exc.strerror})", field="config") from None
        return cls.from_json(text)


TRAINING_KEYS = ("lr", "optim", "seed", "data_dir", "eval_every", "eval_batches", "sample_log_path")
"""The keys of a ``training`` JSON object: the data (what a controller sends every node in
the assignment's ``training`` field) and, for ``launch_local``, the recipe in the engine's
shape and the seed (``TrainConfig.for_job`` settings, written into the run's spec)."""


def training_overrides(data: Any) -> dict[str, Any]:
    """TrainConfig keyword arguments from a ``training`` JSON object (``TRAINING_KEYS`` only),
    each parsed and checked as ``TrainConfig.from_dict`` does; raises ``EngineError``."""
    if not isinstance(data, Mapping):
        raise EngineError(f"must be a JSON object, got {type(data).__name__}", field="training")
    unknown = sorted(set(data) - set(TRAINING_KEYS))
    if unknown:
        raise EngineError(f"unknown keys {unknown}; known: {list(TRAINING_KEYS)}", field="training")
    out = {k: v for k, v in data.items() if k not in SETTING_KEYS}
    for name, value in out.items():
        kind, ok, rule = _RULES[name]
        if not _is(value, kind) or not ok(value):
            raise EngineError(f"must be {rule}, got {value!r}", field=f"training.{name}")
    out.update(_settings({k: v for k, v in data.items() if k in SETTING_KEYS}))
    return out


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


def _hex_key(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)


_RULES: dict[str, tuple[type | str, Callable[[Any], bool], str]] = {
    "job": (Job, lambda v: True, "a Job"),
    "plan": (Plan, lambda v: True, "a Plan"),
    "run": (RunSpec, lambda v: True, "a RunSpec"),
    "checkpoint_dir": ("str?", _optional_str, "a directory path or null"),
    "metrics_path": ("str?", _optional_str, "a file path or null"),
    "backend": (str, lambda v: v in BACKENDS, f"one of {BACKENDS}"),
    "schedule": (str, lambda v: v in SCHEDULES, f"one of {SCHEDULES}"),
    "dtype": ("str?", lambda v: v is None or v in DTYPES, f"null or one of {DTYPES}"),
    "optimizer_impl": (str, lambda v: v in OPTIMIZER_IMPLS, f"one of {OPTIMIZER_IMPLS}"),
    "memory_probe_step": (int, _nonneg, "an integer >= 0 (0: never)"),
    "master_addr": (str, lambda v: v != "", "a host name or address"),
    "master_port": (int, lambda v: 1 <= v <= 65535, "a TCP port 1..65535"),
    "store_prefix": (str, lambda v: v != "", "a non-empty string"),
    "store_key": (str, _hex_key, "64 hex digits"),
    "store_is_external": (bool, lambda v: True, "true or false"),
    "timeout_s": (float, lambda v: v > 0, "a number of seconds > 0"),
    "data_dir": ("str?", _optional_str, "a folder path or null"),
    "eval_every": (int, _nonneg, "an integer >= 0 (0: never)"),
    "eval_batches": (int, lambda v: v >= 1, "an integer >= 1"),
    "sample_log_path": ("str?", _optional_str, "a file path or null"),
    "generation": (int, _nonneg, "an integer >= 0 (0: not fenced)"),
    "on_save_error": (str, lambda v: v in ON_SAVE_ERROR, f"one of {ON_SAVE_ERROR}"),
}
_RULE_NAMES = {"lr": "an LRSchedule", "optim": "an OptimConfig"}
SETTING_KEYS = ("steps", "checkpoint_every", "seed", "lr", "optim", "precision", "options")
"""Keys of a config dict that set the run's spec (``TrainConfig.from_dict``), not the config."""


def _job_run(job: Job) -> RunSpec:
    """The run of a config built from a job alone: its model, batch, sequence and execution
    options, and the engine's recipe (``ENGINE_RECIPE``)."""
    return _spec(lambda: RunSpec(
        model=job.model.name, global_batch_size=job.global_batch_size,
        seq_len=job.sequence_length, options=job.options, recipe=ENGINE_RECIPE,
    ))  # fmt: skip


def _spec(build: Callable[[], RunSpec]) -> RunSpec:
    """Build a RunSpec; its errors become ``EngineError``s naming the same field."""
    try:
        return build()
    except SailorSimError as exc:
        message = str(exc).split(": ", 1)[-1] if exc.field else str(exc)
        raise EngineError(message, field=exc.field or "run") from None


def _settings(data: Mapping[str, Any]) -> dict[str, Any]:
    """The run settings of a config dict given as keys of their own (``SETTING_KEYS``), each
    parsed (``lr``/``optim`` into the engine's shapes, an old options dict read with its
    precision); their ranges are the RunSpec's to check."""
    out: dict[str, Any] = {}
    for name in ("steps", "checkpoint_every", "seed"):
        if name in data:
            if not _is(data[name], int):
                raise EngineError(f"must be an integer, got {data[name]!r}", field=name)
            out[name] = data[name]
    if "lr" in data:
        out["lr"] = _parse("lr", lambda: _strict(LRSchedule, data["lr"], "lr"))
    if "optim" in data:
        out["optim"] = _parse("optim", lambda: _optim(data["optim"]))
    if "options" in data:
        precision, out["options"] = _parse("options", lambda: options_from_dict(data["options"]))
        if precision is not None and "precision" not in data:  # a file of before: the
            out["precision"] = precision  # precision among the options
    if "precision" in data:
        if not _is(data["precision"], "str?"):
            value = data["precision"]
            raise EngineError(f"must be null or a name, got {value!r}", field="precision")
        out["precision"] = data["precision"]
    return out


def _run_message():
    from sailor_sim.proto import job_pb2

    return job_pb2.RunSpec()


def _run(data: Any) -> RunSpec | None:
    return None if data is None else specs.from_json(RunSpec, data, _run_message())


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
        default = getattr(cls(), key)
        kind = str if isinstance(default, str) else int if isinstance(default, int) else float
        if not _is(value, kind):
            raise EngineError(f"must be a {kind.__name__}, got {value!r}", field=f"{name}.{key}")
    return cls(**data)


def _optim(data: Any) -> OptimConfig:
    if not isinstance(data, Mapping):
        raise EngineError(f"must be a JSON object, got {type(data).__name__}", field="optim")
    lists = ("betas", "no_decay")
    base = _strict(OptimConfig, {k: v for k, v in data.items() if k not in lists}, "optim")
    no_decay = data.get("no_decay", [])
    if not (isinstance(no_decay, list | tuple) and all(isinstance(g, str) for g in no_decay)):
        raise EngineError(f"must be a list of names, got {no_decay!r}", field="optim.no_decay")
    base = replace(base, no_decay=tuple(no_decay))
    if "betas" not in data:
        return base
    betas = data["betas"]
    pair = isinstance(betas, list | tuple) and len(betas) == 2
    if not (pair and all(_is(b, float) for b in betas)):
        raise EngineError(f"must be two numbers, got {betas!r}", field="optim.betas")
    return replace(base, betas=(float(betas[0]), float(betas[1])))
