"""`sailor data prepare` over a prepared folder is one transaction: real `sailor` processes,
killed (SIGKILL, SIGTERM) or starved (a file size limit) while they write the new shards.
The rerun used to delete manifest.json and replace tokenizer.json before writing any shard,
so an interrupted rerun left a folder with no manifest: the old dataset was lost."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from sailor_runtime.data import BUNDLED_CORPUS
from sailor_runtime.data.shards import TokenShards

CMD = [sys.executable, "-m", "sailor_runtime.cli", "data", "prepare"]


def _prepare(out, text, *flags: str, **popen) -> subprocess.CompletedProcess:
    return subprocess.run(CMD + [str(text), "--out", str(out), *flags], capture_output=True,
                          text=True, timeout=180, **popen)  # fmt: skip


@pytest.fixture
def old(tmp_path):
    """A folder prepared from 20,000 characters: what a rerun must not lose."""
    text = tmp_path / "old.txt"
    text.write_text(BUNDLED_CORPUS.read_text()[:20_000])
    out = tmp_path / "data"
    done = _prepare(out, text, "--vocab-size", "300", "--shard-tokens", "2000")
    assert done.returncode == 0, done.stderr
    return out


def _dataset(folder) -> dict:
    """What a trainer gets from the folder: every window of both splits, hashed, and the
    tokenizer the manifest names (its bytes match the manifest's SHA-256)."""
    got = {}
    for split in ("train", "val"):
        d = TokenShards(folder, split, seq_len=8)  # opening checks every shard's SHA-256
        rows = b"".join(d.window_tokens(w).numpy().tobytes() for w in range(d.num_windows))
        got[split] = hashlib.sha256(rows).hexdigest()
    tok = json.loads((folder / "manifest.json").read_text())["tokenizer"]
    assert hashlib.sha256((folder / tok["file"]).read_bytes()).hexdigest() == tok["sha256"]
    got["tokenizer"] = tok["sha256"]
    return got


def _files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _named(folder) -> set[str]:
    m = json.loads((folder / "manifest.json").read_text())
    shards = {s["file"] for split in m["splits"].values() for s in split}
    return shards | {m["tokenizer"]["file"], "manifest.json", "tokenizer.json"}


def _big(tmp_path):
    big = tmp_path / "big.txt"  # ~120,000 tokens
    big.write_text(BUNDLED_CORPUS.read_text()[:150_000])
    return big


def _start_and_stop_while_writing_shards(out, sig) -> subprocess.Popen:
    """Prepare 150,000 characters into 64-token shards over ``out``, and send ``sig`` as soon
    as the first new shard file appears (some 1,900 are to come)."""
    before = {(e.name, e.inode()) for e in os.scandir(out)}
    proc = subprocess.Popen(
        CMD + [str(_big(out.parent)), "--out", str(out), "--vocab-size", "280",
               "--shard-tokens", "64"],  # fmt: skip
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if any(
            (e.name, e.inode()) not in before and ".bin" in e.name for e in os.scandir(out)
        ):  # a shard (or its temporary file) that was not there
            break
        time.sleep(0.002)
    assert proc.poll() is None, "the rerun ended before it was stopped: the test proves nothing"
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    return proc


def test_a_rerun_killed_while_writing_shards_keeps_the_old_dataset(old):
    """kill -9 mid-way: the old manifest, tokenizer and shards load as they were; the next
    completed rerun removes the killed run's files."""
    was, files = _dataset(old), _files(old)
    proc = _start_and_stop_while_writing_shards(old, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    assert _dataset(old) == was
    assert {n: files[n] for n in _named(old)} == {n: _files(old)[n] for n in _named(old)}
    assert set(_files(old)) > set(files)  # the killed run's shards are still there
    done = _prepare(old, _big(old.parent), "--vocab-size", "280", "--shard-tokens", "20000")
    assert done.returncode == 0, done.stderr
    assert set(_files(old)) == _named(old)  # no file of the killed run, none of the old data
    assert _dataset(old)["tokenizer"] != was["tokenizer"]


def test_a_rerun_stopped_by_sigterm_leaves_the_folder_as_it_was(old):
    files = _files(old)
    proc = _start_and_stop_while_writing_shards(old, signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert _files(old) == files


def test_a_rerun_that_cannot_write_a_shard_leaves_the_folder_as_it_was(old):
    """A file size limit (as a full disk) fails the first new shard (~220 KB; the tokenizer
    is smaller than the limit): one error line, exit 2, the folder as it was."""
    files, was = _files(old), _dataset(old)
    limit = 100_000
    assert all(len(b) < limit for b in files.values())

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    failed = _prepare(old, _big(old.parent), "--vocab-size", "280", "--shard-tokens", "1000000",
                      preexec_fn=small_files)  # fmt: skip
    assert failed.returncode == 2, failed.stderr[-500:]
    assert failed.stderr.startswith("error: ") and len(failed.stderr.splitlines()) == 1
    assert "File too large" in failed.stderr
    assert _files(old) == files and _dataset(old) == was


def test_a_rerun_over_a_larger_dataset_leaves_only_the_files_of_the_new_one(old, tmp_path):
    """The old dataset's shards beyond the new one's count (train-00007 of 10, say) stayed in
    the folder, looking like part of the data; stale temporary files of a killed run too."""
    (old / "train-00099.bin.tmp").write_bytes(b"\0" * 10)  # as a run killed while writing
    (old / "notes.txt").write_text("mine")  # not prepare's: stays
    old_shards = {n for n in _files(old) if n.endswith(".bin")}
    shorter = tmp_path / "shorter.txt"
    shorter.write_text(BUNDLED_CORPUS.read_text()[:5_000])
    done = _prepare(old, shorter, "--vocab-size", "280", "--shard-tokens", "2000")
    assert done.returncode == 0, done.stderr
    assert set(_files(old)) == _named(old) | {"notes.txt"}
    assert len(old_shards) > len([n for n in _named(old) if n.endswith(".bin")])
    m = json.loads((old / "manifest.json").read_text())
    assert (old / "tokenizer.json").read_bytes() == (old / m["tokenizer"]["file"]).read_bytes()
    train = np.concatenate([np.fromfile(old / s["file"], "<u2") for s in m["splits"]["train"]])
    assert len(train) == sum(s["tokens"] for s in m["splits"]["train"])
