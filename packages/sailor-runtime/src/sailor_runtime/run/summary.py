"""What `sailor run` prints: a progress line while training, a summary table at the end."""

from __future__ import annotations

import statistics
import sys
from dataclasses import asdict, dataclass, field


@dataclass
class RunSummary:
    state: str
    steps: int
    target_steps: int
    first_loss: float
    final_loss: float
    plan: str
    measured_iteration_s: float
    predicted_iteration_s: float
    wall_s: float
    cpu_slowdown: float = 1.0
    """(run + run-queue wait) / run of the ranks while the last generation trained."""
    reconfigurations: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    """What the run did not do that it was asked to (e.g. a worker added too late to be used)."""

    @property
    def prediction_error(self) -> float:
        if not self.predicted_iteration_s:
            return float("nan")
        return self.measured_iteration_s / self.predicted_iteration_s - 1

    def to_dict(self) -> dict:
        d = asdict(self)
        d["prediction_error"] = self.prediction_error
        return d


def measured_iteration_time(metrics: list[dict], generation: int, skip: int = 2) -> float:
    """Median iteration time of ``generation``'s steps, without its first ``skip`` steps
    (process start, checkpoint load and first-touch allocations are not steady state)."""
    times = [m["iteration_time_s"] for m in metrics if m["generation"] == generation]
    steady = times[skip:] if len(times) > skip + 2 else times
    return statistics.median(steady) if steady else 0.0


def render(s: RunSummary) -> str:
    lines = [
        f"run {s.state}: {s.steps}/{s.target_steps} steps in {s.wall_s:.1f} s",
        f"  loss            {s.first_loss:.4f} -> {s.final_loss:.4f}",
        f"  plan            {s.plan}",
        f"  iteration time  measured {s.measured_iteration_s * 1e3:.1f} ms, "
        f"simulator {s.predicted_iteration_s * 1e3:.1f} ms "
        f"({s.prediction_error:+.0%}; ranks waited for a core {s.cpu_slowdown - 1:.0%} of "
        "their CPU time)",
    ]
    if s.message:
        lines.append(f"  note            {s.message}")
    if s.reconfigurations:
        phases = ["detect", "debounce", "plan", "place", "stop", "checkpoint", "restart"]
        lines.append("  re-plans (seconds per phase):")
        lines.append(
            "    gen  " + "".join(f"{p:>11}" for p in phases) + "      total  resumed-after  why"
        )
        for r in s.reconfigurations:
            cells = "".join(f"{r['phases'].get(p, 0.0):>11.2f}" for p in phases)
            lines.append(
                f"    {r['generation']:>3}  {cells}  {r['total_s']:>9.2f}  "
                f"{r['resumed_from_step']:>13}  {r['reason'][:70]}"
            )
    return "\n".join(lines)


class Progress:
    """A one-line progress bar on a terminal; a line per 10% otherwise."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total = max(1, total)
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self._last_decile = -1

    def update(self, step: int, loss: float, generation: int, state: str) -> None:
        if not self.enabled:
            return
        frac = min(1.0, step / self.total)
        bar = "#" * int(frac * 30)
        line = (
            f"[{bar:<30}] step {step}/{self.total} loss {loss:.4f} gen {generation} {state.lower()}"
        )
        if self.tty:
            sys.stderr.write("\r" + line[:120].ljust(120))
            sys.stderr.flush()
        elif int(frac * 10) != self._last_decile:
            self._last_decile = int(frac * 10)
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")
