"""PNG of a replay: throughput, cost rate and GPUs used over time, one line per policy.

matplotlib is an optional dependency (``pip install sailor-planner[plot]``; the workspace has
it); without it ``plot_replay`` raises a RequestError that says how to install it.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import RequestError
from .run import ReplayResult, Segment


def _steps(segments: list[Segment], value) -> tuple[list[float], list[float]]:
    """Step-plot points; a checkpoint stall (seconds every half hour) is drawn as part of the
    training around it, or it would paint the training solid with spikes to zero."""
    xs: list[float] = []
    ys: list[float] = []
    for s in segments:
        if s.kind == "checkpoint" and xs:
            xs[-1] = s.end_s / 3600
            continue
        xs += [s.start_s / 3600, s.end_s / 3600]
        ys += [value(s), value(s)]
    return xs, ys


def plot_replay(result: ReplayResult, path: str | Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RequestError(
            "the plot needs matplotlib; install it (pip install 'sailor-planner[plot]') or drop "
            "--plot",
            field="plot",
        ) from None
    panels = (
        ("samples/s", lambda s: s.samples_per_s),
        ("$/hour", lambda s: s.usd_per_hour),
        ("GPUs used", lambda s: s.gpus),
    )
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 7.5), sharex=True)
    for ax, (label, value) in zip(axes, panels, strict=True):
        for summary in result.summaries:
            xs, ys = _steps(result.timeline(summary.policy), value)
            ax.plot(xs, ys, label=summary.policy, linewidth=1.2)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    available = [(st.start_s, st.start_s + st.duration_s, st.inventory.total_gpus)
                 for st in result.trace.states]  # fmt: skip
    xs = [x / 3600 for a, b, _ in available for x in (a, b)]
    ys = [n for _, _, n in available for _ in (0, 1)]
    axes[-1].plot(xs, ys, color="black", linestyle=":", label="available")
    axes[0].legend(loc="upper right", fontsize=8, ncol=len(result.summaries))
    axes[-1].legend(loc="upper right", fontsize=8)
    axes[-1].set_xlabel("hours since the trace's start")
    job = result.job
    axes[0].set_title(
        f"{job.model.name}, gbs {job.global_batch_size}, seq {job.sequence_length}: "
        f"replay of {result.trace.source}"
    )
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110, format="png")  # the file named, even without a suffix
    plt.close(fig)
    return path
