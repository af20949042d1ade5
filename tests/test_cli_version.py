"""Every command group answers ``--version`` with its package's version and exit status 0."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

GROUPS = {
    "sailor_sim": "sailor_sim.cli.app",
    "sailor_planner": "sailor_planner.cli",
    "sailor_profiler": "sailor_profiler.cli",
    "sailor_runtime": "sailor_runtime.cli",
}


@pytest.mark.parametrize("package", sorted(GROUPS))
def test_version_flag(package: str) -> None:
    code = f"import {GROUPS[package]} as c; c.app(prog_name='x')"
    out = subprocess.run(
        [sys.executable, "-c", code, "--version"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == importlib.import_module(package).__version__
