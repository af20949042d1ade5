"""`sailor run --local --trace FILE`: run the trace, print the prediction beside the run."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from sailor_planner import SailorPlannerError
from sailor_sim import SailorSimError

from ..errors import SailorRuntimeError
from .local import LocalRunConfig


def run_trace_command(
    cfg: LocalRunConfig, name: str, trace, time_scale: float, json_out: Path | None
) -> int:
    """Run ``trace`` (``sailor_planner.read_trace`` of the file ``name``, read before the run
    folder was made). Exit status: 0 done, 2 bad input (one line on stderr)."""
    from .tracerun import run_trace

    try:
        result = run_trace(cfg, trace, time_scale)
    except (SailorRuntimeError, SailorSimError, SailorPlannerError) as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    typer.echo(
        f"trace {name} over {result.trace_wall_s:.0f} s of wall time, "
        f"{result.changes} changes: trained {result.measured_samples:,.0f} samples "
        f"({result.steps} steps) against {result.predicted_samples:,.0f} predicted by the replay "
        f"({result.error:+.0%}); reconfigurations {result.reconfigurations} "
        f"(replay: {result.predicted_reconfigurations}); iteration time measured "
        f"{result.measured_iteration_s * 1e3:.1f} ms, simulator "
        f"{result.predicted_iteration_s * 1e3:.1f} ms (warm-up: agents registered after "
        f"{result.boot_s:.1f} s, ranks' CPU stretch {result.stretch:.2f})"
    )
    if json_out:
        json_out.write_text(json.dumps(result.to_dict(), indent=2))
    return 0
