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
    # seconds on the 2-core CI machine (sum of the file's tests that took >= 15 s), from
    # the `make test` logs of 2026-11-26/27; a file renamed or removed is only not moved
    ("packages/sailor-runtime/tests/test_train_shakespeare.py", 150),
    ("packages/sailor-runtime/tests/test_trace_run.py", 140),  # estimate
    ("packages/sailor-runtime/tests/test_run_options.py", 108),
    ("packages/sailor-runtime/tests/test_engine_sharding.py", 95),
    ("packages/sailor-runtime/tests/test_run_local.py", 92),
    ("packages/sailor-runtime/tests/test_checkpoint_integrity.py", 80),  # estimate
    ("packages/sailor-runtime/tests/test_elastic.py", 80),  # estimate after the join test's cut
    ("packages/sailor-runtime/tests/test_process_ownership.py", 80),
    ("packages/sailor-runtime/tests/test_data_order.py", 80),
    ("packages/sailor-runtime/tests/test_engine_options.py", 75),
    ("packages/sailor-runtime/tests/test_engine_equivalence.py", 62),
    ("tests/test_gpu_smoke.py", 50),
    ("packages/sailor-runtime/tests/test_engine_crash.py", 40),
    ("packages/sailor-runtime/tests/test_hosts_netns.py", 40),
    ("packages/sailor-runtime/tests/test_elastic_decisions.py", 28),
    ("packages/sailor-runtime/tests/test_engine_recipe.py", 25),
    ("packages/sailor-runtime/tests/test_tied_embeddings.py", 21),
    ("packages/sailor-profiler/tests/test_zoo.py", 19),
    ("packages/sailor-runtime/tests/test_legacy_engine_options.py", 19),
    ("tests/test_engine_overhead.py", 18),
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
