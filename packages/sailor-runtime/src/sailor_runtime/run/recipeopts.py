"""The data a run trains on, as the ``training`` JSON object every rank receives (the data keys
of ``engine.config.TRAINING_KEYS``). The recipe and the seed are the run's ``RunSpec``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..data import DataError


def training_json(
    data_dir: Path | None, eval_every: int, eval_batches: int, model_vocab: int, seq_len: int
) -> dict[str, Any]:
    """The data half of a run's training settings (``engine.config.TRAINING_KEYS``), checked
    now, before anything starts: both `sailor run` and `sailor controller` call it."""
    if eval_every < 0:
        raise DataError(f"must be >= 0 (0: no evaluation), got {eval_every}", field="--eval-every")
    if eval_batches < 1:
        raise DataError(f"must be >= 1, got {eval_batches}", field="--eval-batches")
    out: dict[str, Any] = {}
    if data_dir is not None:
        from ..data.shards import check_folder

        # Refuse a folder that is not prepared, has a shard missing or short, no sample of
        # seq_len, or a vocabulary the model lacks, now (not in every rank after the planner
        # ran, the same failure each generation until --max-failures).
        vocab = check_folder(data_dir, seq_len, "--data")["vocab_size"]
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
