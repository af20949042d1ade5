"""Smoke test: the package imports and its console script runs."""

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from typer.testing import CliRunner

import sailor_planner
from sailor_planner.cli import app


def test_version_attribute() -> None:
    assert sailor_planner.__version__ == version("sailor-planner")


def test_cli_version_command() -> None:
    result = CliRunner().invoke(app, ["version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == sailor_planner.__version__


def test_console_script() -> None:
    script = Path(sys.executable).parent / "sailor-planner"
    result = subprocess.run([str(script), "version"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == sailor_planner.__version__


def test_public_api_names_resolve() -> None:
    for name in sailor_planner.__all__:
        assert getattr(sailor_planner, name) is not None
