"""PNG plots of estimates (matplotlib is optional: ``pip install 'sailor-sim[plot]'``).

- ``memory_png``: the memory of each distinct stage / GPU type as stacked named terms against
  the GPU's capacity (``sailor-sim simulate --plot FILE``);
- ``pareto_png``: throughput against $/hour of plans, the non-dominated ones joined
  (``sailor-planner plan --pareto N --plot FILE``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import ValidationError

GiB = 1024**3


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValidationError(
            "the plot needs matplotlib; install it (pip install 'sailor-sim[plot]') or drop --plot",
            field="plot",
        ) from None
    return plt


def memory_png(estimate, path: str | Path, title: str = "") -> Path:
    """Stacked bars of the memory terms of every distinct (stage, GPU type, zone)."""
    plt = _pyplot()
    seen = {}
    for m in estimate.memory:
        seen.setdefault((m.stage, m.gpu_type, m.zone), m)
    rows = list(seen.values())
    terms = list(rows[0].breakdown_bytes)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(rows) + 2), 4.5))
    labels = [f"stage {m.stage}\n{m.gpu_type}" for m in rows]
    bottom = [0.0] * len(rows)
    for term in terms:
        values = [m.breakdown_bytes[term] / GiB for m in rows]
        ax.bar(labels, values, bottom=bottom, label=term)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for i, m in enumerate(rows):
        ax.hlines(m.capacity_bytes / GiB, i - 0.4, i + 0.4, colors="black", linestyles="--")
    ax.set_ylabel("GiB per GPU (dashed: capacity)")
    ax.set_title(title or "peak memory by term")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return _save(fig, plt, path)


def pareto_png(points: Sequence[tuple[float, float, str]], path: str | Path) -> Path:
    """``points``: (iterations/s, $/hour, label) of plans; the frontier is drawn as a line."""
    plt = _pyplot()
    if not points:
        raise ValidationError("no plans to plot", field="plot")
    frontier = non_dominated(points)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.scatter([p[1] for p in points], [p[0] for p in points], s=14, color="grey")
    ax.plot([p[1] for p in frontier], [p[0] for p in frontier], marker="o", color="C0")
    for rate, usd, label in frontier:
        ax.annotate(label, (usd, rate), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("$ / hour")
    ax.set_ylabel("iterations / s")
    ax.set_title("throughput vs cost (line: non-dominated plans)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, plt, path)


def non_dominated(points: Sequence[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Points no other point beats on both throughput (higher) and $/hour (lower), by cost."""
    out = []
    for p in sorted(points, key=lambda p: (p[1], -p[0])):
        if not out or p[0] > out[-1][0]:
            out.append(p)
    return out


def _save(fig, plt, path: str | Path) -> Path:
    from .. import inputs

    out = inputs.output_file(path, "plot")
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out
