"""Profiles kept per machine (``run/profilecache.py``): a later run of the same model and
settings reuses the measurement, a changed model or a damaged entry is measured again. The
profiler really runs (one CPU worker type, one microbatch size: seconds each)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from sailor_runtime.run import profilecache
from sailor_runtime.run.profile import compute_args, measure, measure_compute
from sailor_sim.spec.job import Job

DEMO = Path(__file__).parents[3] / "examples" / "shakespeare-demo" / "config.json"


def _job(config: Path) -> Job:
    # gbs 1: the profiler measures microbatch 1 only (profiled_shapes), the fastest sweep
    return Job.create(str(config), 1, 16, dtype="fp32")


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if not p.name.startswith("."))


@pytest.mark.timeout(600)
def test_a_second_run_reuses_the_measurement_and_a_changed_model_is_measured_again(
    tmp_path, monkeypatch, capsys
):
    cache = tmp_path / "cache"
    monkeypatch.setenv(profilecache.CACHE_ENV, str(cache))
    config = tmp_path / "model" / "config.json"
    config.parent.mkdir()
    shutil.copy(DEMO, config)
    job = _job(config)

    compute, links = measure(tmp_path / "run1", job, ranks=2, gpu_type="cpu-1t")
    assert "profiling" in capsys.readouterr().err
    assert len(_entries(cache)) == 2  # the compute profile and the links

    # Another run folder: both come from the cache, number for number (a second measurement
    # of millisecond kernels would differ), and the run says where they came from.
    again = measure(tmp_path / "run2", job, ranks=2, gpu_type="cpu-1t")
    err = capsys.readouterr().err
    assert again == (compute, links)
    assert err.count("reused from") == 2 and "profiling" not in err
    assert (tmp_path / "run2" / "profiling" / "net" / "links.json").is_file()
    # the run folder says which measurements were its own and which were reused
    assert "for this run" in (tmp_path / "run1" / "profiling" / "provenance.txt").read_text()
    reused = (tmp_path / "run2" / "profiling" / "provenance.txt").read_text().splitlines()
    assert len(reused) == 2 and all("reused from" in line for line in reused)

    # A damaged entry (its profile truncated) is measured again and replaced.
    entry = next(p for p in _entries(cache) if p.name.startswith("compute-"))
    kept = next(entry.glob("*.json"))
    kept.write_text(kept.read_text()[:50])
    remeasured = measure_compute(tmp_path / "run3", job, "cpu-1t")
    assert "profiling" in capsys.readouterr().err
    assert remeasured["entries"] and json.loads(next(entry.glob("*.json")).read_text())
    assert measure_compute(tmp_path / "run4", job, "cpu-1t") == remeasured
    assert "reused from" in capsys.readouterr().err

    # A run over more microbatch sizes is measured, and its entry replaces the smaller one;
    # a run over fewer is then served from it, trimmed to its own sizes.
    wider = measure_compute(
        tmp_path / "run6", Job.create(str(config), 2, 16, dtype="fp32"), "cpu-1t"
    )
    assert "profiling" in capsys.readouterr().err
    assert [e["microbatch_size"] for e in wider["entries"]] == [1, 2]
    assert len(_entries(cache)) == 2
    narrow = measure_compute(tmp_path / "run7", job, "cpu-1t")
    assert "reused from" in capsys.readouterr().err
    assert narrow["entries"] == wider["entries"][:1]

    # The same path with other content is another model: measured, not reused.
    changed = json.loads(config.read_text())
    changed["intermediate_size"] = 2 * changed["intermediate_size"]
    config.write_text(json.dumps(changed))
    other = measure_compute(tmp_path / "run5", _job(config), "cpu-1t")
    assert "profiling" in capsys.readouterr().err
    block = lambda profile: profile["entries"][0]["layers"][1]  # noqa: E731
    assert block(other)["activation_bytes"] > block(compute)["activation_bytes"]  # wider MLP
    assert len(_entries(cache)) == 3


def test_the_key_holds_what_the_measurement_depends_on_and_not_the_output_folder(tmp_path):
    job = _job(DEMO)
    args = compute_args(job, tmp_path / "a", False, "cpu-1t")
    key = profilecache.profile_key("compute", args, job.model)
    assert key == profilecache.profile_key(
        "compute", compute_args(job, tmp_path / "b", False, "cpu-1t"), job.model
    )
    # the sweep is not in the key: an entry records it (a wider one serves a narrower run)
    sweep = compute_args(Job.create(str(DEMO), 4, 16), tmp_path / "a", False, "cpu-1t")
    assert "1,2,4" in sweep and profilecache.profile_key("compute", sweep, job.model) == key
    for other in (
        compute_args(job, tmp_path / "a", False, "cpu-2t"),  # another worker type
        compute_args(Job.create(str(DEMO), 1, 32), tmp_path / "a", False, "cpu-1t"),  # seq
        compute_args(_job(DEMO), tmp_path / "a", True, "cpu-1t"),  # on the GPU
    ):
        assert profilecache.profile_key("compute", other, job.model) != key
    assert profilecache.profile_key("compute", args, Job.create("tiny-gpt", 1, 16).model) != key
    assert profilecache.profile_key("network", args, job.model) != key
    assert "__version__ = " in profilecache.software()[0]  # torch's build, its +cuXXX tag too


def test_off_keeps_nothing_and_an_entry_of_another_user_is_not_read(tmp_path, monkeypatch):
    src = tmp_path / "measured"
    src.mkdir()
    (src / "profile.json").write_text('{"entries": []}')
    monkeypatch.setenv(profilecache.CACHE_ENV, "off")
    assert profilecache.cache_root() is None
    profilecache.keep("compute-x", src, "a model")
    assert profilecache.restore("compute-x", tmp_path / "out") is None

    cache = tmp_path / "cache"
    monkeypatch.setenv(profilecache.CACHE_ENV, str(cache))
    profilecache.keep("compute-x", src, "a model")
    meta = profilecache.restore("compute-x", tmp_path / "out")
    assert meta["what"] == "a model"
    assert (tmp_path / "out" / "profile.json").read_text() == '{"entries": []}'
    (cache / "compute-x" / profilecache.ENTRY_FILE).write_text("[1, 2]")  # damaged
    assert profilecache.restore("compute-x", tmp_path / "damaged") is None
    assert not (tmp_path / "damaged").exists() and not (cache / "compute-x").exists()
    profilecache.keep("compute-x", src, "a model")  # measured again: kept again
    assert profilecache.restore("compute-x", tmp_path / "again")["what"] == "a model"
    # what a run killed while copying left behind goes with the next keep, once stale
    stale, fresh = cache / ".compute-y.1.tmp", cache / ".compute-z.2.tmp"
    stale.mkdir()
    fresh.mkdir()
    os.utime(stale, (0, 0))
    profilecache.keep("compute-x2", src, "a model")
    assert not stale.exists() and fresh.exists()
    # a wider sweep replaces a narrower entry, never the reverse; a run needing sizes the
    # entry lacks is not served from it
    profilecache.keep("compute-s", src, "narrow", {(1, 1)})
    profilecache.keep("compute-s", src, "wide", {(1, 1), (2, 1)})
    profilecache.keep("compute-s", src, "narrow again", {(1, 1)})
    assert profilecache.restore("compute-s", tmp_path / "s1", {(1, 1)})["what"] == "wide"
    assert profilecache.restore("compute-s", tmp_path / "s2", {(4, 1)}) is None
    assert (cache / "compute-s" / profilecache.ENTRY_FILE).is_file()
    if os.geteuid() != 0:
        return  # only root can hand a file to another user
    os.chown(cache / "compute-x" / profilecache.ENTRY_FILE, 65534, 65534)
    assert profilecache.restore("compute-x", tmp_path / "elsewhere") is None
    assert not (tmp_path / "elsewhere").exists()


def test_a_run_folder_that_cannot_be_written_keeps_the_entry(tmp_path, monkeypatch):
    """A restore that fails writing (here the run folder's parent is a file; a full disk
    reads the same) removes its half copy but never the kept measurement; the profiler's own
    folder (nested) comes back with the profile."""
    monkeypatch.setenv(profilecache.CACHE_ENV, str(tmp_path / "cache"))
    src = tmp_path / "measured"
    (src / "profiler" / "layers__").mkdir(parents=True)
    (src / "profile.json").write_text('{"entries": []}')
    (src / "profiler" / "layers__" / "log.txt").write_text("measured")
    profilecache.keep("compute-w", src, "a model")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert profilecache.restore("compute-w", blocker / "out") is None
    assert (tmp_path / "cache" / "compute-w" / profilecache.ENTRY_FILE).is_file()
    assert profilecache.restore("compute-w", tmp_path / "out")["what"] == "a model"
    assert (tmp_path / "out" / "profile.json").read_text() == '{"entries": []}'
    assert (tmp_path / "out" / "profiler" / "layers__" / "log.txt").read_text() == "measured"
    assert not (tmp_path / "out" / profilecache.ENTRY_FILE).exists()
