"""Helpers shared by the planner benchmarks (no ``main``: not run by run_all.py)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from sailor_sim.simulate.simulator import Simulator

REPO = Path(__file__).resolve().parent.parent


def reference_root() -> Path | None:
    """<repo>/../shared/reference (or $SAILOR_REFERENCE) when present."""
    root = Path(os.environ.get("SAILOR_REFERENCE", REPO.parent / "shared" / "reference"))
    return root if root.is_dir() else None


def sailor_root() -> Path | None:
    ref = reference_root()
    root = ref / "sailor-artifacts" if ref else None
    return root if root and root.is_dir() else None


def simulator() -> tuple[Simulator, str]:
    root = sailor_root()
    if root is not None:
        return Simulator.from_sailor_root(root), f"--sailor-root {root}"
    return Simulator(), "built-in catalog (analytic profiles)"


def trace_rows(name: str) -> list[dict[str, int]] | None:
    """Rows of a gpu_trace_*.csv: {'A100-40@us-central1-a': 32, ...}."""
    root = sailor_root()
    if root is None:
        return None
    path = root / "sailor" / "Planner" / "simulations" / "configs" / name
    rows = []
    with open(path) as fh:
        for row in csv.DictReader(fh):
            pools = {}
            for col, value in row.items():
                if col and "_" in col and col not in ("Timestamp",):
                    gpu, zone = col.split("_", 1)
                    pools[f"{gpu}@{zone}"] = int(float(value))
            rows.append(pools)
    return rows


def ae_constraint(name: str) -> float | None:
    root = sailor_root()
    if root is None:
        return None
    import json

    return float(json.loads((root / "ae_scripts" / "planner" / name).read_text())[0])


def fmt_row(cols, widths) -> str:
    return "  ".join(str(c)[:w].ljust(w) for c, w in zip(cols, widths, strict=True))
