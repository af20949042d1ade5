"""Plots for people who would rather look than read: per-layer times, bandwidth curves."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402

from .network.fit import LinkFit  # noqa: E402


def plot_layers(frame: pl.DataFrame, path: str | Path) -> Path:
    """Forward / backward / optimizer seconds per layer id; one panel per TP, a line per mbs."""
    ok = frame.filter(pl.col("status") == "ok")
    tps = sorted(ok["tp"].unique().to_list()) or [1]
    fig, axes = plt.subplots(1, len(tps), figsize=(5 * len(tps), 3.6), squeeze=False)
    for ax, tp in zip(axes[0], tps, strict=True):
        sub = ok.filter(pl.col("tp") == tp)
        for mbs in sorted(sub["microbatch_size"].unique().to_list()):
            rows = sub.filter(pl.col("microbatch_size") == mbs).sort("layer_id")
            x = rows["layer_id"].to_list()
            ax.plot(x, rows["forward_s"].to_list(), "o-", label=f"fwd mbs {mbs}")
            ax.plot(x, rows["backward_s"].to_list(), "s--", label=f"bwd mbs {mbs}")
        ax.set(title=f"TP {tp}", xlabel="layer id", ylabel="seconds", yscale="log")
        ax.legend(fontsize=7)
    model = frame["model"][0] if len(frame) else ""
    fig.suptitle(f"{model}: per-layer time ({frame['gpu_type'][0] if len(frame) else ''})")
    return _save(fig, path)


def plot_bandwidth(frame: pl.DataFrame, fits: dict[str, LinkFit], path: str | Path) -> Path:
    """Measured bandwidth per message size and each op's fitted curve (log-log)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for op in sorted(frame["op"].unique().to_list()):
        rows = frame.filter(pl.col("op") == op).sort("message_bytes")
        sizes = rows["message_bytes"].to_list()
        ax.plot(sizes, rows["bandwidth_Bps"].to_list(), "o", label=f"{op} measured")
        if op in fits:
            fit = fits[op]
            span = [sizes[0] / 4 * 2**k for k in range(int(len(sizes)) + 4)]
            ax.plot(
                span,
                [fit.effective_bandwidth(m) * _bus(frame, op) for m in span],
                "-",
                label=f"{op} fit: {fit.latency_s * 1e6:.0f} us + m / "
                f"{fit.bandwidth_Bps / 1e9:.2f} GB/s",
            )
    ax.set(xscale="log", yscale="log", xlabel="message bytes", ylabel="bytes/s")
    ax.legend(fontsize=7)
    return _save(fig, path)


def _bus(frame: pl.DataFrame, op: str) -> float:
    world = frame["world_size"][0]
    return 2 * (world - 1) / world if op == "allreduce" and world > 1 else 1.0


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
