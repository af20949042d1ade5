"""One typer app shape for every Sailor command line: usage errors as one line, exit status 2.

click (under typer) prints a usage error as a usage banner plus a boxed message over several
lines; Sailor's CLIs promise one line ``error: <problem>`` on stderr and exit status 2 for any
bad input. ``sailor_app`` builds a ``typer.Typer`` whose group turns click's usage errors and
the Sailor error family into that line; everything else (help, commands, exit codes) is typer's.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

# typer >= 0.2x vendors click; its usage errors derive from this class (typer.BadParameter too).
from typer._click.exceptions import ClickException
from typer.core import TyperGroup

from .errors import SailorError

USAGE_ERROR_STATUS = 2


class OneLineErrorGroup(TyperGroup):
    """A typer group whose bad-input errors are one stderr line and exit status 2."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            status = super().main(*args, standalone_mode=False, **kwargs)
        except ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx else ""
            # With no arguments typer has printed the help already and the message is empty.
            _fail(f"{exc.format_message().strip() or 'no command given'}{hint}")
        except SailorError as exc:
            _fail(str(exc))
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(status if isinstance(status, int) else 0)


def _fail(message: str) -> None:
    typer.echo("error: " + " ".join(message.split()), err=True)
    sys.exit(USAGE_ERROR_STATUS)


def sailor_app(help: str | None = None, **kwargs: Any) -> typer.Typer:
    """A ``typer.Typer`` command group with Sailor's one-line error contract."""
    kwargs.setdefault("no_args_is_help", True)
    kwargs.setdefault("pretty_exceptions_enable", False)
    return typer.Typer(cls=OneLineErrorGroup, help=help, **kwargs)
