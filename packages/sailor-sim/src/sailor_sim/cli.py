"""The ``sailor-sim`` command line."""

from __future__ import annotations

import typer

from .errors import SailorSimError

app = typer.Typer(
    no_args_is_help=True,
    help="Predict iteration time, memory and cost of plans.",
    pretty_exceptions_enable=False,
)


def fail(exc: Exception) -> None:
    """One clear line on stderr and exit status 2."""
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(2)


@app.command()
def demo() -> None:
    """The built-in example: OPT-350M, global batch 1024, A100-40 + V100-16 in two zones."""
    from .examples import example_inventory, example_job, example_plan

    try:
        job, inventory, plan = example_job(), example_inventory(), example_plan()
    except SailorSimError as exc:
        fail(exc)
    model = job.model
    typer.echo(
        f"Job: {model.name}, {model.total_params() / 1e6:.1f} M parameters, global batch "
        f"{job.global_batch_size}, sequence {job.sequence_length}, {job.dtype}"
    )
    typer.echo(
        "Inventory: " + ", ".join(f"{p.count}x {p.gpu_type}@{p.zone}" for p in inventory.pools)
    )
    typer.echo(f"Plan: {plan.describe()} ({plan.num_gpus} GPUs)")


@app.command()
def version() -> None:
    from . import __version__

    typer.echo(__version__)


def main() -> None:
    app()
