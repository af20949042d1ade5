"""Plan: pipeline stages over contiguous layer-id ranges, each with its data-parallel replicas.

A plan with D replicas per stage runs D pipelines: pipeline j is replica j of every stage, so
replica j has the same microbatch size and microbatch count on every stage, while its GPU type,
zone and TP degree may differ from stage to stage. Replicas of one stage may differ in all of
them (heterogeneous data parallelism); their samples per iteration add up to the global batch.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..catalog.gpus import get_gpu
from ..catalog.zones import get_zone
from ..errors import PlanError, SailorSimError, ValidationError
from ..inputs import integral, parse_json
from .job import Job, _reject_unknown


class StageSlice(NamedTuple):
    """What one replica of a stage computes: layer ids first..last (inclusive) on a TP group
    of ``tp`` GPUs of ``gpu_type`` at microbatch ``mbs``. Stage times and range memory depend
    on nothing else of the plan (besides the job), so the simulator's caches are keyed by it;
    a plain tuple, so it hashes and compares in C."""

    first: int
    last: int
    gpu_type: str
    tp: int
    mbs: int

    @classmethod
    def of(cls, stage: Stage, replica: Replica) -> StageSlice:
        return cls(stage.first_layer, stage.last_layer, replica.gpu_type, replica.tp,
                   replica.microbatch_size)  # fmt: skip


@dataclass(frozen=True)
class Replica:
    """One data-parallel replica of a stage: a TP group of ``tp`` GPUs of one type in one zone."""

    gpu_type: str
    zone: str
    tp: int
    microbatch_size: int
    num_microbatches: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpu_type", get_gpu(self.gpu_type).name)
        get_zone(self.zone)
        self._validate()
        # The fields as a plain tuple, hashed once: a dataclass hash of five fields is a Python
        # call per lookup, and plans are compared and hashed in the planner's inner loop. (The
        # simulator's caches key on small ids they assign to these tuples: ``ComponentCache``.)
        key = (self.gpu_type, self.zone, self.tp, self.microbatch_size, self.num_microbatches)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Replica:
            return NotImplemented
        return self is other or (self._hash == other._hash and self._key == other._key)

    def _validate(self) -> None:
        if self.tp < 1 or self.tp & (self.tp - 1):
            raise ValidationError(f"must be a power of two >= 1, got {self.tp}", field="tp")
        gpus_per_node = get_gpu(self.gpu_type).gpus_per_node
        if self.tp > gpus_per_node:
            raise ValidationError(
                f"TP {self.tp} exceeds the {gpus_per_node} GPUs of a {self.gpu_type} node; "
                "TP stays within a node",
                field="tp",
            )
        if self.microbatch_size < 1:
            raise ValidationError(
                f"must be >= 1, got {self.microbatch_size}", field="microbatch_size"
            )
        if self.num_microbatches < 1:
            raise ValidationError(
                f"must be >= 1, got {self.num_microbatches}", field="num_microbatches"
            )

    @property
    def samples(self) -> int:
        """Samples this replica processes per iteration."""
        return self.microbatch_size * self.num_microbatches


@dataclass(frozen=True)
class Stage:
    """A contiguous range of layer ids (inclusive) and its replicas."""

    first_layer: int
    last_layer: int
    replicas: tuple[Replica, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "replicas", tuple(self.replicas))
        if self.first_layer < 0 or self.last_layer < self.first_layer:
            raise ValidationError(
                f"layer range {self.first_layer}..{self.last_layer} is empty or negative",
                field="layers",
            )
        if not self.replicas:
            raise ValidationError("a stage needs at least one replica", field="replicas")
        # The replicas' field tuples in one plain tuple: hashed and compared in C where the
        # simulator assigns the stage its cache id (``ComponentCache.stage_id``).
        object.__setattr__(self, "_rkeys", tuple(r._key for r in self.replicas))
        object.__setattr__(self, "_samples", sum(r.samples for r in self.replicas))

    @property
    def layer_ids(self) -> range:
        return range(self.first_layer, self.last_layer + 1)

    @property
    def num_gpus(self) -> int:
        return sum(r.tp for r in self.replicas)


@dataclass(frozen=True)
class Plan:
    stages: tuple[Stage, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        if not self.stages:
            raise PlanError("a plan needs at least one stage", field="plan.stages")
        expected_first = 0
        for i, stage in enumerate(self.stages):
            if stage.first_layer != expected_first:
                raise PlanError(
                    f"starts at layer {stage.first_layer} but layer {expected_first} is next; "
                    "layer ranges must be contiguous and cover every layer exactly once",
                    field=f"plan.stages[{i}].first_layer",
                )
            expected_first = stage.last_layer + 1
        counts = [len(s.replicas) for s in self.stages]
        odd = next((i for i, n in enumerate(counts) if n != counts[0]), None)
        if odd is not None:
            raise PlanError(
                f"stages have {counts} replicas; every stage needs the same number of replicas "
                "(replica j of each stage forms pipeline j)",
                field=f"plan.stages[{odd}].replicas",
            )
        for j in range(self.num_pipelines):
            first = self.stages[0].replicas[j]
            for i, stage in enumerate(self.stages[1:], start=1):
                r = stage.replicas[j]
                if (r.microbatch_size, r.num_microbatches) != (
                    first.microbatch_size,
                    first.num_microbatches,
                ):
                    raise PlanError(
                        f"microbatch {r.microbatch_size}x{r.num_microbatches} differs from "
                        f"stage 0's "
                        f"{first.microbatch_size}x{first.num_microbatches}; a pipeline keeps one "
                        "microbatch size and count across its stages",
                        field=f"plan.stages[{i}].replicas[{j}]",
                    )

    # ---- shape -----------------------------------------------------------------------------
    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def num_pipelines(self) -> int:
        """Data-parallel degree: replicas per stage."""
        return len(self.stages[0].replicas)

    @property
    def last_layer(self) -> int:
        return self.stages[-1].last_layer

    @property
    def num_gpus(self) -> int:
        return sum(s.num_gpus for s in self.stages)

    @property
    def gradient_accumulation_steps(self) -> int:
        """Microbatches each replica accumulates gradients over per iteration (the most of
        any replica; replicas may differ): gradient accumulation is this, not an option."""
        return max(r.num_microbatches for s in self.stages for r in s.replicas)

    @property
    def samples_per_iteration(self) -> int:
        return sum(r.samples for r in self.stages[0].replicas)

    def pipeline(self, j: int) -> tuple[Replica, ...]:
        """Replica j of every stage."""
        return tuple(stage.replicas[j] for stage in self.stages)

    def gpu_counts(self) -> dict[tuple[str, str], int]:
        """GPUs used per (GPU type, zone)."""
        counts: Counter[tuple[str, str]] = Counter()
        for stage in self.stages:
            for r in stage.replicas:
                counts[(r.gpu_type, r.zone)] += r.tp
        return dict(counts)

    def unlike_group(
        self, size: int, alike: Callable[[Replica], Any]
    ) -> tuple[int, int | None] | None:
        """The first stage whose replicas do not form groups of ``size`` consecutive replicas
        equal under ``alike`` (a context- or expert-parallel group runs in lock step):
        (stage index, first replica of its first unlike group, or None where ``size`` does not
        divide the stage's replica count); None when every stage does."""
        for i, stage in enumerate(self.stages):
            replicas = stage.replicas
            if len(replicas) % size:
                return i, None
            for start in range(0, len(replicas), size):
                if len({alike(r) for r in replicas[start : start + size]}) > 1:
                    return i, start
        return None

    def stage_of_layer(self, layer_id: int) -> int:
        for i, stage in enumerate(self.stages):
            if stage.first_layer <= layer_id <= stage.last_layer:
                return i
        raise ValidationError(f"layer {layer_id} is in no stage", field="layer_id")

    def describe(self) -> str:
        """A one-line shape, e.g. 'PP2 [0-12: 2x A100-40/tp2 mbs4] [13-25: ...]'."""
        parts = []
        for s in self.stages:
            reps = Counter(f"{r.gpu_type}/tp{r.tp} mbs{r.microbatch_size}" for r in s.replicas)
            parts.append(
                f"[{s.first_layer}-{s.last_layer}: "
                + ", ".join(f"{n}x {k}" for k, n in reps.items())
                + "]"
            )
        return f"PP{self.num_stages} DP{self.num_pipelines} " + " ".join(parts)

    # ---- against a job ---------------------------------------------------------------------
    def check(self, job: Job) -> Plan:
        """Raise PlanError unless this plan can run ``job``; returns self for chaining."""
        model = job.model
        if self.last_layer != model.head_layer_id:
            raise PlanError(
                f"the last stage ends at layer {self.last_layer} but {model.name} has layer ids "
                f"0..{model.head_layer_id}; layer ranges must cover every layer exactly once",
                field=f"plan.stages[{self.num_stages - 1}].last_layer",
            )
        checked: set[tuple[int, str]] = set()  # a 1M-GPU plan repeats a few (tp, GPU) pairs
        for i, stage in enumerate(self.stages):
            for j, r in enumerate(stage.replicas):
                if (r.tp, r.gpu_type) in checked:
                    continue
                checked.add((r.tp, r.gpu_type))
                problem = model.tp_problem(r.tp)
                if problem:
                    raise PlanError(problem, field=f"plan.stages[{i}].replicas[{j}].tp")
                problem = get_gpu(r.gpu_type).dtype_problem(job.dtype)
                if problem:
                    raise PlanError(problem, field=f"plan.stages[{i}].replicas[{j}].gpu_type")
        if self.samples_per_iteration != job.sample_slots:
            per = [r.samples for r in self.stages[0].replicas]
            cp = job.options.context_parallel
            want = f"the global batch is {job.global_batch_size}" + (
                f" x context_parallel {cp}" if cp > 1 else ""
            )
            raise PlanError(
                f"replicas process {per} samples (sum {self.samples_per_iteration}) per iteration, "
                f"but {want}; adjust microbatch sizes or counts",
                field="plan.stages[0].replicas[*].num_microbatches",  # a pipeline's: stage 0's
            )
        return self

    # ---- serialization ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "stages": [
                {
                    "first_layer": s.first_layer,
                    "last_layer": s.last_layer,
                    "replicas": [
                        {
                            "gpu_type": r.gpu_type,
                            "zone": r.zone,
                            "tp": r.tp,
                            "microbatch_size": r.microbatch_size,
                            "num_microbatches": r.num_microbatches,
                        }
                        for r in s.replicas
                    ],
                }
                for s in self.stages
            ]
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        _reject_unknown(data, {"stages"}, "plan")
        stages = []
        for i, s in enumerate(_required(data, "stages", "plan")):
            where = f"plan.stages[{i}]"
            _reject_unknown(s, {"first_layer", "last_layer", "replicas"}, where)
            replicas = []
            for j, r in enumerate(_required(s, "replicas", where)):
                _reject_unknown(
                    r,
                    {"gpu_type", "zone", "tp", "microbatch_size", "num_microbatches"},
                    f"{where}.replicas[{j}]",
                )
                replicas.append(
                    _at(
                        f"{where}.replicas[{j}]",
                        lambda r=r: Replica(
                            str(r["gpu_type"]),
                            str(r["zone"]),
                            integral(r.get("tp", 1), "tp"),
                            integral(r["microbatch_size"], "microbatch_size"),
                            integral(r["num_microbatches"], "num_microbatches"),
                        ),
                    )
                )
            stages.append(
                _at(
                    where,
                    lambda s=s, replicas=replicas: Stage(
                        integral(s["first_layer"], "first_layer", minimum=0),
                        integral(s["last_layer"], "last_layer", minimum=0),
                        tuple(replicas),
                    ),
                )
            )
        return cls(tuple(stages))

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        data = parse_json(text, "plan", "the plan", error=PlanError)
        return cls.from_dict(data)

    def to_proto(self):
        from ..proto import plan_pb2

        return plan_pb2.Plan(
            stages=[
                plan_pb2.Stage(
                    first_layer=s.first_layer,
                    last_layer=s.last_layer,
                    replicas=[
                        plan_pb2.Replica(
                            gpu_type=r.gpu_type,
                            zone=r.zone,
                            tp=r.tp,
                            microbatch_size=r.microbatch_size,
                            num_microbatches=r.num_microbatches,
                        )
                        for r in s.replicas
                    ],
                )
                for s in self.stages
            ]
        )

    @classmethod
    def from_proto(cls, msg) -> Plan:
        """Errors name the full path of the field, e.g. ``plan.stages[0].replicas[1].tp``."""
        stages = []
        for i, s in enumerate(msg.stages):
            where = f"plan.stages[{i}]"
            replicas = tuple(
                _at(
                    f"{where}.replicas[{j}]",
                    lambda r=r: Replica(
                        r.gpu_type, r.zone, r.tp, r.microbatch_size, r.num_microbatches
                    ),
                )
                for j, r in enumerate(s.replicas)
            )
            stages.append(
                _at(
                    where,
                    lambda s=s, replicas=replicas: Stage(s.first_layer, s.last_layer, replicas),
                )
            )
        return cls(tuple(stages))

    # ---- construction helpers --------------------------------------------------------------
    @classmethod
    def uniform(
        cls,
        job: Job,
        gpu_type: str,
        zone: str,
        *,
        pp: int = 1,
        dp: int = 1,
        tp: int = 1,
        microbatch_size: int = 1,
        layer_split: Sequence[int] | None = None,
    ) -> Plan:
        """A homogeneous plan: ``pp`` stages x ``dp`` identical replicas, checked against ``job``.

        ``layer_split`` gives the number of layer ids per stage (default: as even as possible).
        """
        dp, microbatch_size = integral(dp, "dp"), integral(microbatch_size, "microbatch_size")
        if job.sample_slots % (dp * microbatch_size):
            raise PlanError(
                f"global batch {job.global_batch_size} (x context_parallel "
                f"{job.options.context_parallel}) is not divisible by dp {dp} x "
                f"microbatch size {microbatch_size}",
                field="dp",
            )
        sizes = list(layer_split) if layer_split else even_split(job.model.num_layer_ids, pp)
        if len(sizes) != pp or sum(sizes) != job.model.num_layer_ids or min(sizes) < 1:
            raise PlanError(
                f"{sizes} does not split {job.model.num_layer_ids} layer ids into {pp} "
                "non-empty stages",
                field="layer_split",
            )
        num_micro = job.sample_slots // (dp * microbatch_size)
        replica = Replica(gpu_type, zone, tp, microbatch_size, num_micro)
        stages, first = [], 0
        for size in sizes:
            stages.append(Stage(first, first + size - 1, (replica,) * dp))
            first += size
        return cls(tuple(stages)).check(job)


def as_plan(plan: Plan | Mapping[str, Any]) -> Plan:
    """``plan``, or the Plan of its dict (``Plan.to_dict``, a plan file's ``plan``); anything
    else is refused naming what to pass."""
    if isinstance(plan, Plan):
        return plan
    if isinstance(plan, Mapping):
        return Plan.from_dict(plan)
    raise PlanError(
        f"must be a Plan (Plan.uniform, Plan.from_dict) or its dict, got {plan!r:.60}",
        field="plan",
    )


def even_split(num_layer_ids: int, pp: int) -> list[int]:
    """Layer ids per stage, as even as possible, larger stages first."""
    if not 1 <= pp <= num_layer_ids:
        raise PlanError(f"pipeline depth {pp} must be between 1 and {num_layer_ids}", field="pp")
    base, extra = divmod(num_layer_ids, pp)
    return [base + (1 if i < extra else 0) for i in range(pp)]


def _required(data: Mapping[str, Any], key: str, where: str):
    if key not in data:
        raise PlanError(f"missing '{key}'", field=where)
    if not isinstance(data[key], list):
        raise PlanError(f"must be a list, got {data[key]!r:.40}", field=f"{where}.{key}")
    return data[key]


def _at(where: str, build):
    """Run ``build`` and prefix any validation error's field with ``where``."""
    try:
        return build()
    except SailorSimError as exc:
        raise type(exc)(
            str(exc).split(": ", 1)[-1] if exc.field else str(exc),
            field=f"{where}.{exc.field}" if exc.field else where,
        ) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise PlanError(f"malformed entry ({exc!r})", field=where) from None
