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


@pytest.mark.parametrize("package", sorted(GROUPS))
def test_group_help_describes_the_commands_not_the_python_api(package: str) -> None:
    """The group's ``--help`` is a CLI page: the package docstring's Python API paragraph
    (reST markup, names of classes) stays out of it."""
    from typer.testing import CliRunner

    app = importlib.import_module(GROUPS[package]).app
    out = CliRunner().invoke(app, ["--help"], prog_name="x", env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "Commands" in out.output
    assert "``" not in out.output and "Public API" not in out.output, out.output
