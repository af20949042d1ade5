"""`sailor run --data` and `sailor controller --data` check the prepared folder before anything
starts: a manifest of the wrong shape, a shard missing or of the wrong size, a split without a
window of the run's sequence is one line naming the problem and exit 2. These used to surface
as "internal error (KeyError ...)", or only in the ranks: every generation failed the same way
until --max-failures ended the run (exit 1, ~25 s)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sailor_runtime.data.prepare import PrepareConfig, prepare

CORPUS = "The river ran low that summer, and the mill stood idle. " * 200
MODEL = Path(__file__).parents[3] / "examples" / "shakespeare-demo" / "config.json"  # vocab 1024


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    (root / "doc.txt").write_text(CORPUS)
    # a 1 % validation tail: ~100 tokens, less than one sample of 128 tokens
    prepare(PrepareConfig((root / "doc.txt",), root / "ok", vocab_size=260, val_fraction=0.01))
    return root / "ok"


def _copy(prepared, tmp_path, edit=None):
    folder = tmp_path / "data"
    shutil.copytree(prepared, folder)
    if edit is not None:
        manifest = json.loads((folder / "manifest.json").read_text())
        edit(manifest)
        (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _run(folder, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "sailor_runtime.cli", "run", "--local", "--workers", "1",
           "--no-profile", "--steps", "2", "--seq-len", "16", "--model", str(MODEL),
           "--data", str(folder), *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _one_line(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --data: "), lines
    for word in words:
        assert word in lines[0], lines[0]
    assert "internal error" not in lines[0]


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda m: m.pop("vocab_size"), ["vocab_size"]),
        (lambda m: m.__setitem__("vocab_size", "260"), ["vocab_size"]),
        (lambda m: m.pop("splits"), ["splits"]),
        (lambda m: m["splits"]["train"][0].pop("tokens"), ["tokens"]),
        (lambda m: m.__setitem__("dtype", "float64"), ["dtype"]),
    ],
)
def test_a_manifest_of_the_wrong_shape_is_one_line(prepared, tmp_path, edit, words):
    _one_line(_run(_copy(prepared, tmp_path, edit)), "manifest.json", "prepare", *words)


def test_a_missing_or_truncated_shard_is_refused_before_the_run(prepared, tmp_path):
    folder = _copy(prepared, tmp_path)
    splits = json.loads((folder / "manifest.json").read_text())["splits"]
    val, train = splits["val"][0]["file"], splits["train"][0]["file"]
    (folder / val).unlink()
    _one_line(_run(folder), f"{val} is missing", "prepare the folder again")
    with open(folder / train, "r+b") as f:
        f.truncate(10)
    _one_line(_run(folder), f"{train} holds 10 bytes")


def test_a_split_shorter_than_one_sample_is_refused_before_the_run(prepared, tmp_path):
    _one_line(
        _run(_copy(prepared, tmp_path), "--seq-len", "128"), "val split", "window of 129 tokens"
    )
