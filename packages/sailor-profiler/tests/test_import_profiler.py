"""Smoke test: the package imports and its console script runs."""

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from typer.testing import CliRunner

import sailor_profiler
from sailor_profiler.cli import app


def test_version_attribute() -> None:
    assert sailor_profiler.__version__ == version("sailor-profiler")


def test_cli_version_command() -> None:
    result = CliRunner().invoke(app, ["version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == sailor_profiler.__version__


def test_console_script() -> None:
    script = Path(sys.executable).parent / "sailor-profiler"
    result = subprocess.run([str(script), "version"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == sailor_profiler.__version__
