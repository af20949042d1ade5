"""RunSpec: what to train and how, declared once.

Every run setting a user chooses (model, batch, sequence, precision, execution options, steps,
checkpointing, seed, the optimizer's recipe) is one field here, with its help text under it.
The CLIs take their flags from these fields (``specs.with_spec``), a run can be given as a
TOML file of the same names (``--config``), it crosses the wire as ``sailor.v1.RunSpec``
(``specs.to_proto``), and the engine reads it back as the same value. A subclass may add
fields: they are flags and config keys at once, and travel in the message's ``extensions``
(``specs.to_proto``), so the engine receives them with no other declaration. Torch-free: the
simulator, the planner and the runtime all use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import inputs
from ..dtypes import check_dtype
from ..errors import ValidationError
from .job import FP8_PRECISION, OPTIMIZERS, Job
from .options import ExecutionOptions
from .recipe import Recipe

MAX_SEED = 2**32 - 1
"""numpy's seed range (torch accepts more; the data order uses numpy)."""


TRAINING_FIELDS = ("steps", "checkpoint_every", "seed", *Recipe.__dataclass_fields__)
"""RunSpec fields only a training run uses: not flags of a prediction or a plan search."""


@dataclass(frozen=True)
class RunSpec:
    """One training run's settings (see the module docstring)."""

    model: str = "tiny-llama"
    """Catalog model name, or the path of a Hugging Face config.json."""
    global_batch_size: int = 16
    """Samples per iteration, over all data-parallel replicas."""
    seq_len: int | None = None
    """Tokens per sample (default: the model's maximum, at most 8192)."""
    precision: str | None = None
    """Training dtype: fp32, bf16 or fp16 mixed precision, or fp8 (bf16 with FP8 GEMMs; the
    simulator only) (default: the config's torch_dtype, else fp32)."""
    optimizer: str = "adamw"
    """adam, adamw or sgd."""
    options: ExecutionOptions = field(default_factory=ExecutionOptions)
    steps: int = 100
    """Train until this many iterations (a resumed run continues from its checkpoint)."""
    checkpoint_every: int = 0
    """Save a checkpoint every K iterations; training needs K >= 1 (a re-plan resumes from
    the last one: `sailor run` and `sailor controller` refuse 0)."""
    seed: int = 0
    """Seed of the initial weights and the data order (0 .. 2**32-1)."""
    recipe: Recipe = field(default_factory=Recipe)

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValidationError("must name a catalog model or a config.json", field="model")
        inputs.integral(self.global_batch_size, "global_batch_size")
        if self.seq_len is not None:
            inputs.integral(self.seq_len, "seq_len")
        if self.precision not in (None, FP8_PRECISION):
            check_dtype(self.precision, "precision")
        if self.optimizer not in OPTIMIZERS:
            raise ValidationError(
                f"unknown optimizer {self.optimizer!r}; use one of {OPTIMIZERS}", field="optimizer"
            )
        if not isinstance(self.options, ExecutionOptions):
            raise ValidationError("must be ExecutionOptions", field="options")
        inputs.integral(self.steps, "steps")
        inputs.integral(self.checkpoint_every, "checkpoint_every", minimum=0)
        inputs.integral(self.seed, "seed", minimum=0, maximum=MAX_SEED)
        if not isinstance(self.recipe, Recipe):
            raise ValidationError("must be a Recipe", field="recipe")

    def check_given(self, given: frozenset[str]) -> None:
        """Fields valid alone that contradict each other as given (``given``: the leaf names
        a flag or the config file set): precision fp8 is bf16 with FP8 GEMMs, so an fp8
        recipe of none stated with it was overruled silently (it trained 'delayed')."""
        if self.precision == FP8_PRECISION and "fp8" in given and self.options.fp8 == "none":
            raise ValidationError(
                "none contradicts precision fp8 (bf16 with FP8 GEMMs, recipe 'delayed' unless "
                "another is set); drop the fp8 setting or train in precision bf16",
                field="fp8",
            )

    def lr_schedule(self):
        """The engine's LRSchedule (a decay over the run's steps unless ``decay_steps``)."""
        return self.recipe.schedule_for(self.steps)

    def job(self) -> Job:
        """The simulator's Job (defaults for seq/precision as ``capacity.make_job`` states)."""
        from ..capacity import make_job

        return make_job(
            self.model, self.global_batch_size, self.seq_len, self.precision, self.optimizer,
            self.options,
        )[0]  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        from .derive import to_dict

        return to_dict(self)

    @classmethod
    def from_dict(cls, data: Any) -> RunSpec:
        from .derive import from_dict

        return from_dict(cls, data, where="run")

    def to_proto(self):
        from ..proto import job_pb2
        from .derive import to_proto

        return to_proto(self, job_pb2.RunSpec())

    @classmethod
    def from_proto(cls, message) -> RunSpec:
        from .derive import from_proto

        return from_proto(cls, message)
