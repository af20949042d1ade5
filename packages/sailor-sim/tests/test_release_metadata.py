"""Release hygiene every user sees: ``--version`` on each command group, a licence file and
licence metadata in every package, and a changelog that names the current version."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PACKAGES = sorted(p for p in (REPO / "packages").iterdir() if (p / "pyproject.toml").exists())


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_every_package_declares_the_mit_licence_and_ships_the_file(package: Path) -> None:
    meta = tomllib.loads((package / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "MIT"
    assert meta["license-files"] == ["LICENSE"]
    assert (package / "LICENSE").read_text() == (REPO / "LICENSE").read_text()


def test_the_changelog_names_every_package_version() -> None:
    changelog = (REPO / "CHANGELOG.md").read_text()
    for package in PACKAGES:
        version = tomllib.loads((package / "pyproject.toml").read_text())["project"]["version"]
        assert f"## [{version}]" in changelog, f"{package.name} {version} not in CHANGELOG.md"


def test_sailor_sim_version_flag_prints_the_package_version() -> None:
    import sailor_sim

    out = subprocess.run(
        [sys.executable, "-c", "from sailor_sim.cli.app import main; main()", "--version"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == sailor_sim.__version__
