"""Shared helpers for the runtime's end-to-end tests (real processes on 127.0.0.1)."""

from __future__ import annotations

import os


def pytest_configure(config):
    # Rank processes run one thread each: several share this machine's few cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
