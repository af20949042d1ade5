"""Shared fixtures: the reference data (skips with a reason when absent)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
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


@contextlib.contextmanager
def catalog_prices_restored():
    """The price catalogs as they were before the block, after it: a catch-all ``set_price``
    drops a GPU's per-region prices, and the published bench prices B200 / GB200 at 0, which
    later tests in the same process (the planner's) would price plans with. The catalog
    revision is bumped only when the block changed them, so live simulators keep their caches
    otherwise."""
    from sailor_sim import revision
    from sailor_sim.catalog import prices

    tables = (prices.PRICE_CATALOG, prices.SPOT_PRICE_CATALOG)
    saved = [{gpu: dict(by_region) for gpu, by_region in t.items()} for t in tables]
    try:
        yield
    finally:
        if any(t != s for t, s in zip(tables, saved, strict=True)):
            for table, before in zip(tables, saved, strict=True):
                table.clear()
                table.update(before)
            revision.bump()


@pytest.fixture(autouse=True)
def _price_catalogs_restored():
    """Every test leaves the price catalogs as it found them."""
    with catalog_prices_restored():
        yield


@pytest.fixture
def prices_restored():
    """``catalog_prices_restored`` for a test that restores them itself, mid-test."""
    return catalog_prices_restored


def _load_bench(name: str):
    """``bench/<name>.py`` as a module, loaded once per process (registered in sys.modules:
    its dataclasses resolve their module by name). Bench scripts read their data only in
    main(), so importing one is cheap."""
    key = f"bench_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, REPO / "bench" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


@pytest.fixture
def bench():
    """Load a bench script of the repository as a module: ``bench("sim_features")``."""
    return _load_bench
