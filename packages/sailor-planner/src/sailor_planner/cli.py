"""The `sailor-planner` command line."""

import typer

import sailor_planner

app = typer.Typer(no_args_is_help=True, help=sailor_planner.__doc__)


@app.callback()
def main() -> None:
    # A callback keeps `sailor-planner` a command group even while it has a single command.
    pass


@app.command()
def version() -> None:
    """Print the sailor-planner version."""
    typer.echo(sailor_planner.__version__)


if __name__ == "__main__":
    app()
