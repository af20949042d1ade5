"""The `sailor` command line."""

import typer

import sailor_runtime

app = typer.Typer(no_args_is_help=True, help=sailor_runtime.__doc__)


@app.callback()
def main() -> None:
    # A callback keeps `sailor` a command group even while it has a single command.
    pass


@app.command()
def version() -> None:
    """Print the sailor-runtime version."""
    typer.echo(sailor_runtime.__version__)


if __name__ == "__main__":
    app()
