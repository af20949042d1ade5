"""What `sailor run` prints: a progress line while training, a summary table at the end."""

from __future__ import annotations

import io
import statistics
import sys
from dataclasses import asdict, dataclass, field

from rich.console import Console
from rich.padding import Padding
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text


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
    """The planner's estimate for the plan that ran, made before that generation trained."""
    wall_s: float
    planned_stretch: float = 1.0
    """The core-sharing stretch the planner's profile assumed (from the load before the run)."""
    explained_iteration_s: float = 0.0
    """After the run: the same plan re-simulated with the measured ``cpu_slowdown``. Uses the
    run's own measurement, so it explains the error; it is not a prediction."""
    cpu_slowdown: float = 1.0
    """(run + run-queue wait) / run of the ranks while the last generation trained."""
    reconfigurations: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)
    message: str = ""
    options: str = ""
    """The engine's execution options (precision, recompute, attention, ZeRO)."""
    precision: str = ""
    """The precision the ranks trained in, and why (given, or the model's torch_dtype)."""
    why: list[str] = field(default_factory=list)
    """Why the planner chose the plan (``run.report``)."""
    rank_memory: list[dict] = field(default_factory=list)
    """Per rank of the last generation: predicted and measured tensor bytes."""
    reruns: list[str] = field(default_factory=list)
    """Steps trained again after a resume, their losses against the first run."""
    warnings: list[str] = field(default_factory=list)
    """What the run did not do that it was asked to (e.g. a worker added too late to be used)."""
    eval_losses: list[dict] = field(default_factory=list)
    """Every validation loss of the run ({step, eval_loss, generation}), from the metrics file."""
    throughput: dict = field(default_factory=dict)
    """Measured (median of the last generation's steady steps, from the metrics file) tokens/s,
    model TFLOP/s per GPU and MFU, next to the simulator's MFU for the same plan
    (``throughput_figures``)."""

    @property
    def prediction_error(self) -> float:
        """measured / predicted - 1, against the prediction made before training."""
        return _error(self.measured_iteration_s, self.predicted_iteration_s)

    @property
    def explained_error(self) -> float:
        return _error(self.measured_iteration_s, self.explained_iteration_s)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["prediction_error"] = self.prediction_error
        d["explained_error"] = self.explained_error
        return d


def _error(measured: float, predicted: float) -> float:
    return measured / predicted - 1 if predicted else float("nan")


def measured_iteration_time(metrics: list[dict], generation: int, skip: int = 2) -> float:
    """Median iteration time of ``generation``'s steps, without its first ``skip`` steps
    (process start, checkpoint load and first-touch allocations are not steady state)."""
    times = [m["iteration_time_s"] for m in metrics if m["generation"] == generation]
    steady = times[skip:] if len(times) > skip + 2 else times
    return statistics.median(steady) if steady else 0.0


def eval_losses(metrics: list[dict]) -> list[dict]:
    return [{"step": m["step"], "eval_loss": m["eval_loss"], "generation": m["generation"]}
            for m in metrics if m.get("eval_loss") is not None]  # fmt: skip


def throughput_figures(
    metrics: list[dict], generation: int, job, plan, predicted_s: float, skip: int = 2
) -> dict:
    """Measured figures of ``generation`` (median over its steps after the first ``skip``, as
    ``measured_iteration_time``), and the simulator's MFU: the same formula (model FLOPs per
    token, PaLM App. B, over the plan's dense peak; ``sailor_sim.simulate.metrics``) at the
    iteration
    time the planner predicted before training."""
    from sailor_sim import model_flops_per_token, plan_peak_flops

    rows = [m for m in metrics if m["generation"] == generation and m.get("tokens_per_s")]
    steady = rows[skip:] if len(rows) > skip + 2 else rows
    out: dict = {}
    for key in ("tokens_per_s", "model_tflops_per_gpu", "mfu"):
        values = [m[key] for m in steady if m.get(key) is not None]
        out[key] = statistics.median(values) if values else None
    peak = plan_peak_flops(plan, job.dtype) if plan is not None else 0.0
    if predicted_s > 0 and peak > 0:
        tokens_per_s = job.global_batch_size * job.sequence_length / predicted_s
        flops = tokens_per_s * model_flops_per_token(job.model, job.sequence_length)
        out["simulated_mfu"] = flops / peak
    return out


def _eval_lines(evals: list[dict]) -> list[str]:
    """Every validation loss, with the generation (plan) that measured it."""
    if not evals:
        return []
    cells = [f"{e['step']}: {e['eval_loss']:.3f} (gen {e['generation']})" for e in evals]
    rows = [", ".join(cells[i : i + 5]) for i in range(0, len(cells), 5)]
    return [f"  eval loss       {rows[0]}"] + [f"                  {r}" for r in rows[1:]]


def _throughput_line(t: dict) -> str:
    if t.get("tokens_per_s") is None:
        return ""
    sim = t.get("simulated_mfu")
    mfu = "n/a" if t.get("mfu") is None else f"{t['mfu']:.2%}"
    return (
        f"  throughput      {t['tokens_per_s']:,.0f} tokens/s, "
        f"{t['model_tflops_per_gpu'] * 1e3:.2f} GFLOP/s per GPU; MFU measured {mfu}, "
        f"simulator {'n/a' if sim is None else f'{sim:.2%}'} (metrics.jsonl)"
    )


def render(s: RunSummary) -> str:
    lines = [
        f"run {s.state}: {s.steps}/{s.target_steps} steps in {s.wall_s:.1f} s",
        f"  loss            {s.first_loss:.4f} -> {s.final_loss:.4f}",
        *_eval_lines(s.eval_losses),
        f"  plan            {s.plan}",
        f"  iteration time  measured {s.measured_iteration_s * 1e3:.1f} ms, "
        f"predicted before training {s.predicted_iteration_s * 1e3:.1f} ms "
        f"(error {s.prediction_error:+.0%}; the planner assumed a CPU stretch of "
        f"{s.planned_stretch:.2f} from the load before the run)",
    ]
    if _throughput_line(s.throughput):
        lines.append(_throughput_line(s.throughput))
    if s.explained_iteration_s:
        lines.append(
            f"  explained       {s.explained_iteration_s * 1e3:.1f} ms ({s.explained_error:+.0%}) "
            f"re-simulated after the run with the measured CPU stretch {s.cpu_slowdown:.2f} "
            "(ranks' run-queue wait); not a prediction"
        )
    if s.precision:
        lines.append(f"  precision       {s.precision}")
    if s.options:
        lines.append(f"  options         {s.options}")
    lines += s.why
    if s.rank_memory:
        from .report import RankMemory, memory_lines

        lines += memory_lines([RankMemory(**m) for m in s.rank_memory], s.options)
    lines += s.reruns
    if s.message:
        lines.append(f"  note            {s.message}")
    if s.reconfigurations:
        lines.append("  re-plans (seconds per phase):")
        lines.append(replans_table(s.reconfigurations))
    return "\n".join(lines)


PHASES = ("detect", "debounce", "plan", "place", "stop", "checkpoint", "restart")


def replans_table(reconfigurations: list[dict]) -> str:
    """The re-plans with their phase timings, as a rich table rendered to text."""
    grid = Table(box=None, pad_edge=False, padding=(0, 1))
    grid.add_column("gen", justify="right")
    for phase in (*PHASES, "total"):
        grid.add_column(phase, justify="right")
    grid.add_column("resumed-after", justify="right")
    grid.add_column("why", no_wrap=True, overflow="ellipsis", max_width=70)
    for r in reconfigurations:
        cells = [f"{r['phases'].get(p, 0.0):.2f}" for p in PHASES]
        grid.add_row(
            str(r["generation"]), *cells, f"{r['total_s']:.2f}",
            str(r["resumed_from_step"]), Text(r["reason"]),  # not markup: "[/__w/...]"
        )  # fmt: skip
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(Padding(grid, (0, 0, 0, 4)))
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines())


class Progress:
    """A rich progress bar on a terminal; a plain line per 10 % otherwise (logs, CI)."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total = max(1, total)
        self.enabled = enabled
        self.console = Console(stderr=True)
        self._last_decile = -1
        self._last_line: str | None = None
        self._bar: RichProgress | None = None
        if enabled and self.console.is_terminal:
            self._bar = RichProgress(
                TextColumn("step"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=self.console,
            )
            self._task = self._bar.add_task("", total=self.total)
            self._bar.start()

    def update(
        self, step: int, loss: float, generation: int, state: str, last: dict | None = None
    ) -> None:
        """``last``: the newest metrics record (its eval loss, lr, tokens/s and MFU are shown
        when present)."""
        if not self.enabled:
            return
        status = self._status(step, loss, generation, state, last)
        if self._bar is not None:
            self._bar.update(self._task, completed=min(step, self.total), description=status)
            return
        decile = int(min(1.0, step / self.total) * 10)
        if decile != self._last_decile:
            self._last_decile = decile
            self._say(f"step {step}/{self.total} {status}")

    def close(self, *final) -> None:
        """End the bar; ``final`` (``update``'s arguments): the run's last state, shown. A
        piped log's last line was the last poll's, which a run ending between two polls left
        at 'step 0/N ... waiting' after its steps had trained."""
        if final and self._bar is not None:
            self.update(*final)
        elif final and self.enabled:
            line = f"step {final[0]}/{self.total} {self._status(*final)}"
            if line != self._last_line:
                self._say(line)
        if self._bar is not None:
            self._bar.stop()

    def _status(
        self, step: int, loss: float, generation: int, state: str, last: dict | None = None
    ) -> str:
        shown = f"{loss:.4f}" if step > 0 else "-"  # no step trained yet: no loss to show
        return f"loss {shown} gen {generation} {state.lower()}" + _live_fields(last or {})

    def _say(self, line: str) -> None:
        self._last_line = line
        print(line, file=sys.stderr, flush=True)


def _percent(x: float) -> str:
    """A share as a percentage with one decimal, or two significant digits below 0.1 %: a
    tiny model on an H200 runs at 0.03 % MFU, which one decimal printed as 0.0 %."""
    return f"{x:.1%}" if x >= 0.001 else f"{x * 100:.2g}%"


def _live_fields(m: dict) -> str:
    parts = []
    if m.get("eval_loss") is not None:
        parts.append(f"eval {m['eval_loss']:.4f}")
    if m.get("lr") is not None:
        parts.append(f"lr {m['lr']:.2e}")
    if m.get("tokens_per_s"):
        parts.append(f"{m['tokens_per_s']:,.0f} tok/s")
    if m.get("mfu") is not None:
        parts.append(f"MFU {_percent(m['mfu'])}")
    return "".join(f" {p}" for p in parts)
