"""The `sailor-profiler` command line."""

import typer

import sailor_profiler

app = typer.Typer(no_args_is_help=True, help=sailor_profiler.__doc__)


@app.callback()
def main() -> None:
    # A callback keeps `sailor-profiler` a command group even while it has a single command.
    pass


@app.command()
def version() -> None:
    """Print the sailor-profiler version."""
    typer.echo(sailor_profiler.__version__)


if __name__ == "__main__":
    app()
