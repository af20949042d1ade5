"""Documents from local files: plain text (one document per file), JSON lines (one document
per line, the text under a named field) and Parquet (one per row of a named column; needs
``pyarrow``, which is optional)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from . import DataError

FORMATS = {
    ".txt": "text",
    ".md": "text",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
}


def source_files(paths: list[Path], out_dir: Path | None = None) -> list[Path]:
    """The files to read, in a stable order: each path itself, or the supported files under a
    folder (sorted), less those under ``out_dir``: a rerun of `prepare corpus --out
    corpus/prepared` found the previous output's tokenizer.json and manifest.json there and
    read them as JSON lines."""
    skip = out_dir.resolve() if out_dir is not None else None
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.suffix in FORMATS
                and p.is_file()
                and (skip is None or not p.resolve().is_relative_to(skip))
            )
            if not found:
                raise DataError(
                    f"{path} holds no {sorted(FORMATS)} file; point at the files themselves",
                    field="inputs",
                )
            files += found
        elif path.is_file():
            if path.suffix not in FORMATS:
                raise DataError(
                    f"{path}: unknown format {path.suffix!r}; use one of {sorted(FORMATS)}",
                    field="inputs",
                )
            files.append(path)
        elif path.exists():
            # A pipe or a device (`<(zcat corpus.gz)`, /dev/stdin): a source is read once for
            # the tokenizer, once for the tokens and once for its SHA-256, and a pipe is empty
            # after the first. It used to be reported as a path that "does not exist".
            raise DataError(
                f"{path} is not a regular file (a pipe or a device); save the text to a file "
                "and give that",
                field="inputs",
            )
        else:
            raise DataError(f"{path} does not exist", field="inputs")
    return files


def documents(path: Path, text_field: str = "text") -> Iterator[str]:
    """The documents of one file."""
    kind = FORMATS[path.suffix]
    if kind == "text":
        yield _read_text(path)
    elif kind == "jsonl":
        yield from _jsonl(path, text_field)
    else:
        yield from _parquet(path, text_field)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})",
                        field="inputs") from None  # fmt: skip


def _jsonl(path: Path, text_field: str) -> Iterator[str]:
    for number, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            # A .json file is read as JSON lines too: one pretty-printed document (or an array
            # of records) failed at its line 1 "[" with a message calling valid JSON "not JSON".
            raise DataError(
                f"{path}:{number} is not a JSON line ({exc.msg}); {path.suffix} files are read "
                f"as JSON lines: one object per line, e.g. {json.dumps({text_field: '...'})}",
                field="inputs",
            ) from None
        if not isinstance(record, dict) or not isinstance(record.get(text_field), str):
            raise DataError(
                f"{path}:{number} has no string field {text_field!r}; choose the field with "
                "--text-field",
                field="inputs",
            )
        yield record[text_field]


def _parquet(path: Path, text_field: str) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(
            f"{path}: reading Parquet needs pyarrow (pip install pyarrow), or convert it to JSONL",
            field="inputs",
        ) from None
    table = pq.read_table(path)
    if text_field not in table.column_names:
        raise DataError(
            f"{path} has no column {text_field!r} (columns: {table.column_names}); choose it "
            "with --text-field",
            field="inputs",
        )
    for value in table.column(text_field).to_pylist():
        if isinstance(value, str):
            yield value
