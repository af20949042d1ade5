"""Tables (polars) of what was measured, written as Parquet and CSV side by side.

``layers`` table: one row per (TP, microbatch size, layer id), every status (oom rows have nulls
in the measured columns). ``network`` table: one row per (op, message size).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from .compute.measure import LayerResult
from .network.measure import NetPoint, bus_bandwidth


def layers_frame(
    rows: list[LayerResult], model: str, gpu_type: str, dtype: str, seq_len: int
) -> pl.DataFrame:
    def stat(s, attr):
        return None if s is None else getattr(s, attr)

    records = [
        {
            "model": model,
            "gpu_type": gpu_type,
            "dtype": dtype,
            "sequence_length": seq_len,
            "tp": r.tp,
            "microbatch_size": r.mbs,
            "layer_id": r.layer_id,
            "kind": r.kind,
            "status": r.status,
            "params": r.params,
            "forward_s": stat(r.fwd, "median"),
            "forward_p25_s": stat(r.fwd, "p25"),
            "forward_p75_s": stat(r.fwd, "p75"),
            "backward_s": stat(r.bwd, "median"),
            "backward_p25_s": stat(r.bwd, "p25"),
            "backward_p75_s": stat(r.bwd, "p75"),
            "optimizer_s": stat(r.opt, "median"),
            "optimizer_p25_s": stat(r.opt, "p25"),
            "optimizer_p75_s": stat(r.opt, "p75"),
            "repetitions": stat(r.fwd, "n"),
            "activation_out_bytes": stat(r.memory, "out_bytes"),
            "activation_stash_bytes": stat(r.memory, "stash_bytes"),
            "activation_stash_bytes_hooks": stat(r.memory, "stash_bytes_hooks"),
            "peak_bytes": stat(r.memory, "peak_bytes"),
            "note": r.note,
        }
        for r in rows
    ]
    schema_overrides = {
        "peak_bytes": pl.Int64,
        "forward_s": pl.Float64,
        "backward_s": pl.Float64,
        "optimizer_s": pl.Float64,
    }
    return pl.DataFrame(records, schema_overrides=schema_overrides, infer_schema_length=None)


def network_frame(points: list[NetPoint]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "op": p.op,
                "world_size": p.world_size,
                "message_bytes": p.message_bytes,
                "median_s": p.median_s,
                "p25_s": p.p25_s,
                "p75_s": p.p75_s,
                "bandwidth_Bps": bus_bandwidth(p),
            }
            for p in points
        ]
    )


def write_table(frame: pl.DataFrame, stem: str | Path) -> list[Path]:
    """``stem``.parquet and ``stem``.csv."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    parquet, csv = stem.with_suffix(".parquet"), stem.with_suffix(".csv")
    frame.write_parquet(parquet)
    frame.write_csv(csv)
    return [parquet, csv]
