"""`sailor data prepare`: tokenize local text / JSONL / Parquet into token shards."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sailor_sim import SailorError

from .data.prepare import PrepareConfig

data_app = typer.Typer(no_args_is_help=True, help="Prepare training data (token shards).")


@data_app.callback()
def main() -> None:
    # A callback keeps `sailor data` a command group.
    pass


@data_app.command()
def prepare(
    inputs: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Text (.txt/.md), JSONL or Parquet files, or folders of them; none: the "
            "bundled public-domain Shakespeare corpus."
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="Output folder (shards, manifest, tokenizer).")] = Path(
        "data/shakespeare"
    ),
    tokenizer: Annotated[
        Path | None,
        typer.Option(help="A local Hugging Face tokenizer.json; none: train a byte-level BPE."),
    ] = None,
    vocab_size: int = typer.Option(4096, help="Entries of the trained BPE."),
    val_fraction: float = typer.Option(0.1, help="Share of tokens (the tail) for validation."),
    shard_tokens: int = typer.Option(1 << 24, help="Most tokens per shard file."),
    text_field: str = typer.Option("text", help="JSONL field / Parquet column of the text."),
) -> None:
    """Tokenize documents into flat uint16/uint32 shards plus manifest.json (token counts and
    SHA-256 of every shard and source); `sailor run --data FOLDER` trains on them."""
    from .data import BUNDLED_CORPUS
    from .data.prepare import prepare as run_prepare

    cfg = PrepareConfig(
        inputs=tuple(inputs or [BUNDLED_CORPUS]),
        out_dir=out,
        tokenizer=tokenizer,
        vocab_size=vocab_size,
        val_fraction=val_fraction,
        shard_tokens=shard_tokens,
        text_field=text_field,
    )
    try:
        manifest = run_prepare(cfg)
    except SailorError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    splits = manifest["splits"]
    counts = {k: sum(s["tokens"] for s in v) for k, v in splits.items()}
    typer.echo(
        f"{out}: vocabulary {manifest['vocab_size']} ({manifest['dtype']}), "
        f"train {counts['train']:,} tokens in {len(splits['train'])} shard(s), "
        f"val {counts['val']:,} tokens"
    )
