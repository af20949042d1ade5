"""The published FP8 / CP / MoE / GB200 rows (``data/published_features.json``) are sourced,
say which feature they exercise, and every one is predictable by ``bench/sim_features.py``."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench" / "sim_features.py"


def _bench():
    spec = importlib.util.spec_from_file_location("sim_features", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_are_sourced_and_name_their_features():
    sources, rows = _bench().load_rows()
    assert {"fp8", "cp", "moe", "relu2", "gb200"} <= {f for r in rows for f in r["features"]}
    for row in rows:
        assert row["source"] in sources and "https://" in sources[row["source"]]
        features = set(row["features"])
        assert ("fp8" in features) == (row["fp8"] != "none")
        assert ("cp" in features) == (row["cp"] > 1)
        assert ("moe" in features) == (row["ep"] > 1)
        assert ("gb200" in features) == (row["gpu"] == "GB200")


def test_every_row_is_predicted_from_its_configuration():
    bench = _bench()
    _, rows = bench.load_rows()
    for gpu in ("B200", "GB200"):
        bench.set_price(gpu, 0.0, source="test")
    for row in rows:
        predicted = bench.predict(row)
        assert math.isfinite(predicted) and predicted > 0
