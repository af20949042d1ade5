"""Shared fixtures: the reference data (skips with a reason when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def reference_dir() -> Path:
    env = os.environ.get("SAILOR_REFERENCE")
    return Path(env) if env else REPO.parent / "shared" / "reference"


@pytest.fixture(scope="session")
def sailor_root() -> Path:
    root = reference_dir() / "sailor-artifacts"
    if not (root / "sailor/Planner/simulations/profiles_tmp.json").exists():
        pytest.skip(f"original Sailor reference data not found under {root}")
    return root


@pytest.fixture(scope="session")
def sailor_sim_imported(sailor_root):
    from sailor_sim import Simulator

    return Simulator.from_sailor_root(sailor_root)


@pytest.fixture(scope="session")
def validation_files(sailor_root) -> list[Path]:
    files = sorted(
        (sailor_root / "sailor/Planner/simulations/validation/clariden/OPT-350").glob(
            "*/plan_config_*.json"
        )
    )
    if len(files) != 15:
        pytest.skip(f"expected 15 validation plans, found {len(files)}")
    return files
