"""Bad input: one line on stderr starting with 'error:' and exit status 2."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from sailor_profiler.cli import app


def run(args):
    return CliRunner().invoke(app, args)


def assert_one_line_error(result, *needles):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def compute(tmp_path, *extra):
    return run(["compute", "--model", "tiny-gpt", "--out", str(tmp_path / "o"), *extra])


def test_unknown_model(tmp_path):
    result = run(["compute", "--model", "gpt-17", "--out", str(tmp_path / "o")])
    assert_one_line_error(result, "model", "gpt-17")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_cuda_on_a_machine_without_gpu(tmp_path):
    assert_one_line_error(compute(tmp_path, "--device", "cuda"), "device", "no CUDA")
    assert_one_line_error(compute(tmp_path, "--device", "cuda:7"), "device")
    assert_one_line_error(run(["network", "--device", "cuda", "--out", str(tmp_path)]), "device")


def test_nonexistent_device_index(tmp_path):
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert_one_line_error(compute(tmp_path, "--device", f"cuda:{count + 7}"), "device")
    assert_one_line_error(compute(tmp_path, "--device", "tpu"), "device")


def test_tp_larger_than_the_devices(tmp_path):
    assert_one_line_error(compute(tmp_path, "--tp", "16"), "tp", "16")  # CPU limit: 8
    assert_one_line_error(compute(tmp_path, "--tp", "3"), "tp", "does not divide")


def test_bad_sweep_values(tmp_path):
    assert_one_line_error(compute(tmp_path, "--mbs", "1,x"), "mbs")
    assert_one_line_error(compute(tmp_path, "--mbs", "0"), "mbs")
    assert_one_line_error(compute(tmp_path, "--dtype", "fp8"), "dtype")
    assert_one_line_error(compute(tmp_path, "--seq", "4096"), "seq")
    assert_one_line_error(
        run(["network", "--max-bytes", "lots", "--out", str(tmp_path)]), "max_bytes"
    )
    assert_one_line_error(run(["network", "--procs", "1", "--out", str(tmp_path)]), "procs")
    assert_one_line_error(run(["network", "--busy-ms", "-5", "--out", str(tmp_path)]), "busy_ms")


def test_network_procs_beyond_the_cpu_limit_names_procs(tmp_path):
    """network --procs 100 said "tp: TP 100 exceeds ...; use a smaller TP": no such flag there."""
    result = run(["network", "--procs", "100", "--out", str(tmp_path)])
    assert_one_line_error(result, "procs: --procs 100 exceeds", "use a smaller --procs")
    assert "smaller TP" not in result.stderr


def test_memory_limit_and_threads_beyond_reason(tmp_path):
    # NaN / inf once ended as "cannot convert float NaN to integer", naming no flag; 100000
    # threads as an internal MemoryError while the sweep started them.
    for value in ("nan", "inf"):
        result = compute(tmp_path, "--memory-limit-gb", value)
        assert_one_line_error(result, "memory_limit_gb", "finite")
    assert_one_line_error(compute(tmp_path, "--threads", "100000"), "threads", "cores")


def test_an_out_folder_it_cannot_merge_into_is_refused_before_the_sweep(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.json").write_text('{"a": 1}')
    result = compute(tmp_path, "--mbs", "1", "--reps", "1", "--warmup", "0", "--no-plot")
    assert_one_line_error(result, "not a valid profile folder", "notes.json")
    assert "tiny-gpt" not in result.stderr.split("error:")[0]  # no progress bar: no sweep


def test_corrupt_profile_folder_to_merge(tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    (good / "x.json").write_text('{"format": "sailor-profile/1", "model": "tiny-gpt", "gpu')
    assert_one_line_error(run(["merge", str(good), "--out", str(tmp_path / "m")]), "profile")
    assert_one_line_error(
        run(["merge", str(tmp_path / "missing"), "--out", str(tmp_path / "m")]), "not a folder"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(run(["merge", str(empty), "--out", str(tmp_path / "m")]), "no profile")


def test_import_from_a_folder_that_is_not_a_sailor_checkout(tmp_path):
    result = run(["import-sailor", "--sailor-root", str(tmp_path), "--out", str(tmp_path / "o")])
    assert_one_line_error(result, "sailor_root")


def test_output_that_is_a_file(tmp_path):
    file = tmp_path / "f"
    file.write_text("x")
    assert_one_line_error(run(["compute", "--model", "tiny-gpt", "--out", str(file)]), "out")
    assert_one_line_error(run(["network", "--out", str(file)]), "out")


def test_compute_under_torchrun_is_refused(tmp_path, monkeypatch):
    for key, value in (
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "1"),
    ):
        monkeypatch.setenv(key, value)
    assert_one_line_error(compute(tmp_path), "launch", "torchrun")


def test_a_failed_command_leaves_no_out_folder_it_created(tmp_path):
    """A misspelled --dtype left an empty --out folder (and its new parents) behind, which a
    later command took for an earlier run's; a folder that existed before is kept."""
    out = tmp_path / "new" / "deeper"
    result = run(["compute", "--model", "tiny-gpt", "--out", str(out), "--dtype", "fp4"])
    assert_one_line_error(result, "dtype", "fp4")
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    result = run(["compute", "--model", "tiny-gpt", "--out", str(kept), "--dtype", "fp4"])
    assert_one_line_error(result, "dtype")
    assert kept.is_dir()
    result = run(["network", "--out", str(out), "--procs", "100"])
    assert result.exit_code == 2 and not (tmp_path / "new").exists()
