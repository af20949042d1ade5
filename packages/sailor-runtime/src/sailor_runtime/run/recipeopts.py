"""What `sailor run` trains with: the recipe (``sailor_sim.spec.recipe.Recipe``) from the
``--config`` TOML file and the flags (a flag given wins over the file), and the data folder;
as the ``training`` JSON object every rank receives (``engine.config.TRAINING_KEYS``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sailor_sim import Recipe

from ..data import DataError


def build_recipe(config: Path | None, flags: dict[str, Any], steps: int) -> Recipe:
    """The file's recipe, then the flags that were given (not None); ``decay_steps`` set
    nowhere is the run's ``steps`` (the schedule ends with the run)."""
    recipe = Recipe.from_toml(config) if config else Recipe()
    given = {k: v for k, v in flags.items() if v is not None}
    in_file = config is not None and "decay_steps" in _toml_keys(config)
    if "decay_steps" not in given and not in_file:
        given["decay_steps"] = steps
    return recipe.with_values(given, origin="flags")


def _toml_keys(path: Path) -> set[str]:
    import tomllib

    return set(tomllib.loads(path.read_text()))


def training_json(
    recipe: Recipe, data_dir: Path | None, eval_every: int, eval_batches: int, model_vocab: int
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "lr": recipe.schedule.to_dict(),
        "optim": recipe.optimizer.to_dict(),
        "seed": recipe.seed,
    }
    if data_dir is not None:
        from ..data.shards import read_manifest

        # Refuse a folder that is not prepared, or a vocabulary the model lacks, now (not in
        # every rank after the planner ran).
        vocab = read_manifest(data_dir, "--data")["vocab_size"]
        if vocab > model_vocab:
            raise DataError(
                f"{data_dir} has a vocabulary of {vocab} tokens, the model only {model_vocab}; "
                "use a model with a larger vocab_size or prepare with a smaller --vocab-size",
                field="--data",
            )
        out.update(data_dir=str(data_dir.resolve()), eval_every=eval_every,
                   eval_batches=eval_batches)  # fmt: skip
    elif eval_every:
        raise DataError("needs --data (a folder from `sailor data prepare`)", field="--eval-every")
    return out
