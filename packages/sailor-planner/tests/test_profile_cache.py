"""The parsed Sailor profiles are cached on disk by content (issue 22: ~0.3 s CPU a command)."""

import pytest

from sailor_planner import sources
from sailor_sim import Job, Plan
from sailor_sim.simulate.simulator import Simulator

JOB = Job.create("OPT-350M", 256, 2048)


def _estimate(sim) -> float:
    plan = Plan.uniform(JOB, "A100-40", "us-central1-b", pp=2, dp=4, tp=2, microbatch_size=2)
    return sim.estimate(JOB, plan).iteration_time_s


def test_second_load_reads_the_cache_and_estimates_the_same(
    sailor_root, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv(sources.CACHE_ENV, str(tmp_path))
    first = sources.load_simulator(None, str(sailor_root))
    assert len(list(tmp_path.glob("sailor-root-*.pickle"))) == 1

    def no_parsing(*args, **kwargs):
        raise AssertionError("parsed again despite the cache")

    monkeypatch.setattr(Simulator, "from_sailor_root", classmethod(no_parsing))
    cached = sources.load_simulator(None, str(sailor_root))
    assert _estimate(cached) == _estimate(first)


def test_a_broken_cache_entry_is_parsed_again(sailor_root, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(sources.CACHE_ENV, str(tmp_path))
    sources.load_simulator(None, str(sailor_root))
    (entry,) = tmp_path.glob("sailor-root-*.pickle")
    entry.write_bytes(b"not a pickle")
    again = sources.load_simulator(None, str(sailor_root))
    assert _estimate(again) == pytest.approx(_estimate(Simulator.from_sailor_root(sailor_root)))
    assert entry.read_bytes() != b"not a pickle"  # rewritten


def test_off_disables_it(sailor_root, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(sources.CACHE_ENV, "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    sources.load_simulator(None, str(sailor_root))
    assert not list(tmp_path.rglob("*.pickle"))


def test_changed_simulator_code_is_a_new_entry(sailor_root, tmp_path, monkeypatch) -> None:
    """A pickle written by other sailor-sim code (a class that since gained an attribute)
    failed later with AttributeError: the key now includes the code's files."""
    monkeypatch.setenv(sources.CACHE_ENV, str(tmp_path))
    sources.load_simulator(None, str(sailor_root))
    real = sources.simulator_code()
    monkeypatch.setattr(sources, "simulator_code", lambda: (*real, "edited"))
    sources.load_simulator(None, str(sailor_root))
    assert len(list(tmp_path.glob("sailor-root-*.pickle"))) == 2
