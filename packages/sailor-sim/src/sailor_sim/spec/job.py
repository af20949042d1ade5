"""Job (what to train) and Inventory (what can be allocated)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import inputs
from ..catalog.gpus import get_gpu
from ..catalog.zones import get_zone
from ..dtypes import check_dtype
from ..errors import SailorSimError, UnknownNameError, ValidationError
from ..model.moe import check_expert_parallel
from ..model.spec import ModelSpec, default_sequence, get_model, model_wire_name
from ..simulate.features.context_parallel import check_context_parallel
from .interleave import FIELD as VIRTUAL_STAGES_FIELD
from .interleave import model_problem as interleave_model_problem
from .options import ExecutionOptions, check_options

OPTIMIZERS = ("adam", "adamw", "sgd")
MAX_POOL_GPUS = 2**62
"""The most GPUs one pool may hold: ``inputs.integral``'s bound, on every way in (an inventory
file, ``--gpus``, a pool built in Python)."""
FP8_PRECISION = "fp8"
"""The precision name that means bf16 training with FP8 GEMMs (``ExecutionOptions.fp8``)."""
_JOB_IDS: dict[tuple, int] = {}


def check_fp8_precision(dtype, options) -> None:
    """dtype 'fp8' with options (a mapping, as a user writes them) stating fp8 'none'
    contradict each other: the dtype turns the recipe on ('delayed'), so the stated 'none'
    was overruled silently. The CLIs' flags: ``RunSpec.check_given``."""
    fp8 = isinstance(dtype, str) and dtype.lower() == FP8_PRECISION
    if fp8 and isinstance(options, Mapping) and options.get("fp8") == "none":
        raise ValidationError(
            "'none' contradicts dtype 'fp8' (bf16 with FP8 GEMMs, recipe 'delayed' unless "
            "another is set); drop options['fp8'] or train in dtype 'bf16'",
            field="options.fp8",
        )


_NEXT_JOB_ID = itertools.count()
"""Interned ``Job.cache_id`` per distinct (model, sequence, dtype, optimizer, options)."""
_TIMING_IDS: dict[int, int] = {}
"""``Job.cache_id`` -> ``Job.timing_id``."""


@dataclass(frozen=True)
class Job:
    """A model and how to train it: global batch, sequence length, dtype, optimizer."""

    model: ModelSpec
    global_batch_size: int
    sequence_length: int
    dtype: str = "fp32"
    optimizer: str = "adam"
    options: ExecutionOptions = ExecutionOptions()
    """Precision policy, flash attention, recomputation, sharding, SP, interleaving."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", get_model(self.model))
        self._fp8_precision()
        object.__setattr__(self, "dtype", check_dtype(self.dtype))
        for name in ("global_batch_size", "sequence_length"):  # integral, not truncated
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValidationError(f"must be a positive integer, got {value!r:.40}", field=name)
        if self.model.position == "learned" and self.sequence_length > self.model.max_seq_len:
            raise ValidationError(
                f"{self.sequence_length} exceeds the {self.model.max_seq_len} learned positions of "
                f"{self.model.name}; use a sequence length <= {self.model.max_seq_len}",
                field="sequence_length",
            )
        if not isinstance(self.optimizer, str):
            raise ValidationError(f"must be a name, got {self.optimizer!r:.40}", field="optimizer")
        optimizer = self.optimizer.lower()
        if optimizer not in OPTIMIZERS:
            raise ValidationError(
                f"unknown optimizer {self.optimizer!r}; use one of {OPTIMIZERS}", field="optimizer"
            )
        object.__setattr__(self, "optimizer", optimizer)
        if isinstance(self.options, Mapping) or self.options is None:
            object.__setattr__(self, "options", ExecutionOptions.from_dict(self.options))
        if not isinstance(self.options, ExecutionOptions):
            raise ValidationError("must be ExecutionOptions or a dict of them", field="options")
        check_options(self.options, self.dtype)
        problem = interleave_model_problem(
            self.options.virtual_stages, self.model.num_layers, self.model.name
        )
        if problem is not None:  # before a search builds tables per chunk
            raise ValidationError(problem, field=VIRTUAL_STAGES_FIELD)
        check_expert_parallel(self.model.moe, self.options.expert_parallel, self.model.name)
        check_context_parallel(self.options.context_parallel, self.sequence_length)
        # Equal jobs (up to the global batch, which no cached component depends on) share one
        # small int: the simulator's caches key on it instead of hashing a ModelSpec per lookup.
        self._intern()

    @property
    def local_sequence_length(self) -> int:
        """Tokens of a sample one replica processes: the sequence / ``context_parallel``."""
        return self.sequence_length // self.options.context_parallel

    @property
    def sample_slots(self) -> int:
        """Samples the replicas of a stage process per iteration together: the global batch
        x ``context_parallel`` (each sample is split over cp replicas)."""
        return self.global_batch_size * self.options.context_parallel

    def _fp8_precision(self) -> None:
        """dtype 'fp8' (``--precision fp8``) is bf16 training with FP8 GEMMs, as Transformer
        Engine runs it: dtype bf16, ``options.fp8`` 'delayed' unless a recipe is set."""
        if not (isinstance(self.dtype, str) and self.dtype.lower() == FP8_PRECISION):
            return
        object.__setattr__(self, "dtype", "bf16")
        options = self.options
        check_fp8_precision(FP8_PRECISION, options)
        if isinstance(options, Mapping) or options is None:
            options = ExecutionOptions.from_dict(options)
        if isinstance(options, ExecutionOptions) and options.fp8 == "none":
            options = dataclasses.replace(options, fp8="delayed")
        object.__setattr__(self, "options", options)

    def _intern(self) -> None:
        what = (self.model, self.sequence_length, self.dtype, self.optimizer, self.options)
        found = _JOB_IDS.get(what)
        if found is None:
            found = _JOB_IDS.setdefault(what, next(_NEXT_JOB_ID))  # atomic under the GIL
        object.__setattr__(self, "cache_id", found)

    @property
    def timing_id(self) -> int:
        """The ``cache_id`` of this job with its ZeRO stage reduced to its execution style
        (``profiles.trust.execution_style``): jobs that share it have equal
        ``Simulator.stage_time`` for every slice. ZeRO enters a slice's per-microbatch time
        only through that style (the framework share of analytic profiles); its traffic and
        its optimizer shard are ``Simulator.sharded_time``'s and ``ring_sync``'s. The
        planner's option search reads one set of time tables for the stages it tries."""
        found = _TIMING_IDS.get(self.cache_id)
        if found is None:
            from ..profiles.trust import SHARDED_ZERO

            zero = "zero3" if self.options.zero in SHARDED_ZERO else "none"
            what = (self.model, self.sequence_length, self.dtype, self.optimizer)
            what += (dataclasses.replace(self.options, zero=zero),)
            found = _JOB_IDS.get(what)
            if found is None:
                found = _JOB_IDS.setdefault(what, next(_NEXT_JOB_ID))
            found = _TIMING_IDS.setdefault(self.cache_id, found)
        return found

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled in another process: its own interned id, not the sender's."""
        self.__dict__.update(state)
        self._intern()

    @classmethod
    def create(
        cls,
        model: str | ModelSpec,
        global_batch_size: int,
        sequence_length: int | None = None,
        dtype: str = "fp32",
        optimizer: str = "adam",
        options: ExecutionOptions | Mapping[str, Any] | None = None,
    ) -> Job:
        """Build a job by model name; the sequence length defaults to the model's maximum,
        capped at ``DEFAULT_MAX_SEQUENCE`` (``model.spec.default_sequence``, as every CLI)."""
        spec = get_model(model)
        seq = sequence_length or default_sequence(spec)[0]
        return cls(spec, global_batch_size, seq, dtype, optimizer, options or ExecutionOptions())

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.name,
            "global_batch_size": self.global_batch_size,
            "sequence_length": self.sequence_length,
            "dtype": self.dtype,
            "optimizer": self.optimizer,
            "options": self.options.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Job:
        _reject_unknown(
            data,
            {"model", "global_batch_size", "sequence_length", "dtype", "optimizer", "options"},
            "job",
        )
        if "model" not in data or "global_batch_size" not in data:
            raise ValidationError("needs 'model' and 'global_batch_size'", field="job")
        return cls.create(
            data["model"],
            inputs.integral(data["global_batch_size"], "job.global_batch_size"),
            _optional_int(data.get("sequence_length"), "job.sequence_length"),
            data.get("dtype", "fp32"),
            data.get("optimizer", "adam"),
            ExecutionOptions.from_dict(data.get("options")),
        )

    def to_proto(self):
        from ..proto import job_pb2

        fields = self.to_dict()
        fields["model"] = model_wire_name(self.model)  # a spec by content, never a local path
        options = fields.pop("options")
        if options["flash_attention"] is None:
            del options["flash_attention"]  # optional field left unset: the default
        return job_pb2.Job(**fields, options=job_pb2.ExecutionOptions(**options))

    @classmethod
    def from_proto(cls, msg) -> Job:
        if not msg.model:
            raise ValidationError("is empty; name a catalog model", field="job.model")
        return cls.create(
            msg.model,
            msg.global_batch_size,
            msg.sequence_length or None,
            msg.dtype or "fp32",
            msg.optimizer or "adam",
            options_from_proto(msg.options),
        )


@dataclass(frozen=True)
class GpuPool:
    """``count`` GPUs of one type available in one zone."""

    gpu_type: str
    zone: str
    count: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpu_type", get_gpu(self.gpu_type).name)
        get_zone(self.zone)
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise ValidationError(
                f"must be >= 0, got {self.count} for {self.gpu_type}@{self.zone}", field="count"
            )
        if self.count > MAX_POOL_GPUS:  # what an inventory file may hold (``_count``)
            raise ValidationError(
                f"must be <= {MAX_POOL_GPUS}, got {self.count} for {self.gpu_type}@{self.zone}",
                field="count",
            )


@dataclass(frozen=True)
class Inventory:
    """What can be allocated: GPUs per (type, zone). A (type, zone) listed twice is refused:
    summing would plan on GPUs a copy-pasted line counts twice."""

    pools: tuple[GpuPool, ...]

    def __post_init__(self) -> None:
        merged: dict[tuple[str, str], int] = {}
        for pool in self.pools:
            key = (pool.gpu_type, pool.zone)
            if key in merged:
                raise ValidationError(
                    f"{pool.gpu_type}@{pool.zone} is listed twice ({merged[key]} and "
                    f"{pool.count} GPUs); list each pool once with its total count",
                    field="pools",
                )
            merged[key] = pool.count
        object.__setattr__(
            self, "pools", tuple(GpuPool(g, z, c) for (g, z), c in sorted(merged.items()) if c > 0)
        )

    @classmethod
    def of(cls, counts: Mapping[tuple[str, str], int] | Iterable[GpuPool]) -> Inventory:
        """From pools, or from counts per (GPU type, zone): counts already summed by their
        keys, so two spellings of one type (e.g. what two workers report) add up."""
        if isinstance(counts, Mapping):
            summed: dict[tuple[str, str], int] = {}
            for (g, z), c in counts.items():
                pool = GpuPool(g, z, c)
                key = (pool.gpu_type, pool.zone)
                summed[key] = summed.get(key, 0) + pool.count
            return cls(tuple(GpuPool(g, z, c) for (g, z), c in summed.items()))
        return cls(tuple(counts))

    @classmethod
    def parse(cls, specs: Iterable[str]) -> Inventory:
        """Parse 'TYPE@ZONE=COUNT' strings (the CLI's --gpus)."""
        pools = []
        for spec in specs:
            try:
                left, count = spec.split("=")
                gpu_type, zone = left.split("@")
                pools.append(GpuPool(gpu_type.strip(), zone.strip(), int(count)))
            except (ValidationError, UnknownNameError) as exc:  # named after the flag's value
                raise type(exc)(f"{spec!r}: {exc}", field="gpus") from None
            except ValueError:
                raise ValidationError(
                    f"{spec!r} is not TYPE@ZONE=COUNT, e.g. A100-40@us-central1-a=8", field="gpus"
                ) from None
        return cls(tuple(pools))

    def count(self, gpu_type: str, zone: str) -> int:
        return next((p.count for p in self.pools if (p.gpu_type, p.zone) == (gpu_type, zone)), 0)

    @property
    def total_gpus(self) -> int:
        return sum(p.count for p in self.pools)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({p.gpu_type for p in self.pools}))

    @property
    def zones(self) -> tuple[str, ...]:
        return tuple(sorted({p.zone for p in self.pools}))

    def to_dict(self) -> dict[str, Any]:
        return {
            "pools": [
                {"gpu_type": p.gpu_type, "zone": p.zone, "count": p.count} for p in self.pools
            ]
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Inventory:
        """Read {'pools': [{gpu_type, zone, count}]} or the original Sailor quota layout
        {gpu_type: {zone: count}}."""
        if not isinstance(data, Mapping):
            raise ValidationError(
                f"must be an object, got {type(data).__name__}", field="inventory"
            )
        if "pools" in data:
            _reject_unknown(data, {"pools"}, "inventory")
            if not isinstance(data["pools"], list):
                raise ValidationError("must be a list of pools", field="inventory.pools")
            pools = []
            for i, p in enumerate(data["pools"]):
                _reject_unknown(p, {"gpu_type", "zone", "count"}, f"inventory.pools[{i}]")
                if {"gpu_type", "zone", "count"} - set(p):
                    raise ValidationError(
                        "needs gpu_type, zone and count", field=f"inventory.pools[{i}]"
                    )
                pools.append(
                    GpuPool(p["gpu_type"], p["zone"], _count(p["count"], f"inventory.pools[{i}]"))
                )
            return cls(tuple(pools))
        return cls(
            tuple(
                GpuPool(g, z, _count(c, f"inventory.{g}.{z}"))
                for g, zones in data.items()
                for z, c in _object(zones, f"inventory.{g}").items()
            )
        )

    @classmethod
    def from_json_file(cls, path) -> Inventory:
        return cls.from_dict(inputs.load_json(path, "inventory"))

    def to_proto(self):
        from ..proto import job_pb2

        return job_pb2.Inventory(
            pools=[
                job_pb2.GpuPool(gpu_type=p.gpu_type, zone=p.zone, count=p.count) for p in self.pools
            ]
        )

    @classmethod
    def from_proto(cls, msg) -> Inventory:
        return cls(tuple(_pool_at(i, p) for i, p in enumerate(msg.pools)))


def as_job(job: Job | Mapping[str, Any]) -> Job:
    """``job``, or the Job of its dict (``Job.to_dict``, a plan file's ``job``); anything else
    is refused naming what to pass (a dict was a raw AttributeError deep in the simulator)."""
    if isinstance(job, Job):
        return job
    if isinstance(job, Mapping):
        return Job.from_dict(job)
    raise ValidationError(
        f"must be a Job (Job.create, sailor_sim.make_job) or its dict, got {job!r:.60}",
        field="job",
    )


def _pool_at(i: int, msg) -> GpuPool:
    """The wire's pool ``i``; an error names it (``pools[1].gpu_type``): a request of many
    pools said only ``gpu_type``."""
    try:
        return GpuPool(msg.gpu_type, msg.zone, msg.count)
    except SailorSimError as exc:
        message = str(exc).split(": ", 1)[1] if exc.field else str(exc)
        raise type(exc)(message, field=f"pools[{i}].{exc.field or 'count'}") from None


def options_from_proto(msg) -> ExecutionOptions:
    """Empty strings and 0 are the proto's unset: the defaults."""
    default = ExecutionOptions()
    return ExecutionOptions(
        grad_dtype=msg.grad_dtype or default.grad_dtype,
        flash_attention=msg.flash_attention if msg.HasField("flash_attention") else None,
        recompute=msg.recompute or default.recompute,
        zero=msg.zero or default.zero,
        sequence_parallel=msg.sequence_parallel,
        virtual_stages=msg.virtual_stages or 1,
        p2p_scatter_gather=(msg.p2p_scatter_gather if msg.HasField("p2p_scatter_gather") else True),
        fused_loss=msg.fused_loss if msg.HasField("fused_loss") else True,
        fp8=msg.fp8 or default.fp8,
        expert_parallel=msg.expert_parallel or 1,
        context_parallel=msg.context_parallel or 1,
    )


def _optional_int(value: Any, where: str) -> int | None:
    return None if value is None else inputs.integral(value, where)


def _count(value: Any, where: str) -> int:
    return inputs.integral(value, f"{where}.count", minimum=0, maximum=MAX_POOL_GPUS)


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError(f"must be an object, got {value!r}", field=where)
    return value


def _reject_unknown(data: Mapping[str, Any], allowed: set[str], where: str) -> None:
    if not isinstance(data, Mapping):
        raise ValidationError(f"must be an object, got {type(data).__name__}", field=where)
    unknown = set(data) - allowed
    if unknown:
        raise ValidationError(
            f"unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}", field=where
        )
