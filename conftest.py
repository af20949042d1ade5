"""Session-wide test settings: the order test files start in under ``make test``.

``make test`` spreads files over two pytest-xdist workers (``--dist loadfile``), each taking
the next file when it is done. The files that run real training processes take minutes, and
by default xdist queues files by their number of tests, most first, so those (one to four
tests each) started last and the other worker sat idle for up to their length at the end of
the suite. ``make test`` turns that reordering off (``--no-loadscope-reorder``) and this hook
puts the long files first, longest first (the longest-processing-time rule); every other
file keeps its place, every file keeps its tests' order.
"""

from __future__ import annotations

import os
from pathlib import Path

LONG_FILES = (
    # seconds on the 2-core machine: the sum of every test of the file (setup included), from
    # a fresh clone's `pytest --durations=0` of 2026-11-29 (19.4 min in all); a file renamed or
    # removed is only not moved
    ("packages/sailor-runtime/tests/test_train_shakespeare.py", 315),
    ("packages/sailor-runtime/tests/test_trace_run.py", 115),
    ("packages/sailor-runtime/tests/test_engine_sharding.py", 108),
    ("packages/sailor-runtime/tests/test_process_ownership.py", 108),
    ("packages/sailor-runtime/tests/test_engine_equivalence.py", 92),
    ("packages/sailor-runtime/tests/test_elastic.py", 90),
    ("packages/sailor-planner/tests/test_candidate_bounds.py", 77),
    ("packages/sailor-runtime/tests/test_engine_options.py", 73),
    ("packages/sailor-runtime/tests/test_data_order.py", 66),
    ("tests/test_cli_hostile_inputs.py", 62),
    ("packages/sailor-runtime/tests/test_run_options.py", 55),
    ("packages/sailor-profiler/tests/test_sigterm.py", 55),
    ("packages/sailor-runtime/tests/test_profile_cache.py", 52),
    ("tests/test_gpu_smoke.py", 48),
    ("packages/sailor-runtime/tests/test_run_local.py", 47),
    ("packages/sailor-runtime/tests/test_deploy_slurm.py", 42),
    ("packages/sailor-runtime/tests/test_data_checked_at_start.py", 34),
    ("packages/sailor-runtime/tests/test_hosts_netns.py", 32),
    ("packages/sailor-runtime/tests/test_rendezvous_store.py", 32),
    ("packages/sailor-runtime/tests/test_elastic_decisions.py", 30),
    ("packages/sailor-planner/tests/test_many_zones.py", 30),
    ("packages/sailor-runtime/tests/test_checkpoint_integrity.py", 27),
    ("packages/sailor-profiler/tests/test_zoo.py", 27),
    ("packages/sailor-runtime/tests/test_failure_injection_together.py", 26),
    ("packages/sailor-runtime/tests/test_zygote.py", 24),
    ("packages/sailor-runtime/tests/test_engine_recipe.py", 23),
)
ROOT = Path(__file__).parent
PROFILE_CACHE = ROOT / ".test-profile-cache"
"""Where the tests' `sailor run`s keep their profiles (``sailor_runtime.run.profilecache``),
not the user's own cache: the first run of a model and worker type measures it, later runs
of the same reuse it (about 40 s of CPU each on 2 cores). ``make test`` empties it first, so
every suite measures each profile once; a set ``SAILOR_PROFILE_CACHE`` wins."""


def pytest_configure(config) -> None:
    os.environ.setdefault("SAILOR_PROFILE_CACHE", str(PROFILE_CACHE))


def pytest_collection_modifyitems(session, config, items) -> None:
    rank = {path: n for n, (path, _seconds) in enumerate(LONG_FILES)}
    last = len(rank)

    def place(item) -> int:
        try:
            path = Path(item.path).resolve().relative_to(ROOT).as_posix()
        except ValueError:  # collected from outside the repository
            return last
        return rank.get(path, last)

    items.sort(key=place)  # stable: the rest keep their order
