"""One validation layer per input kind, shared by every Sailor package (torch-free).

Numbers (positive and finite), integers (integral: 2.5, "2", 1e400 and NaN are refused, never
truncated), files (regular and bounded in size: /dev/zero, a FIFO, a folder or binary garbage
are refused before anything reads them), JSON (depth bounded, no NaN/Infinity, an object where
one is expected) and output paths (writable, of the right kind). Each check raises
``ValidationError`` naming the field and the fix; ``run_app`` turns any error of a CLI into one
line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import select
import signal
import socket
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .errors import SailorSimError, ValidationError

Err = type[SailorSimError]

MAX_INPUT_BYTES = 64 * 1024 * 1024
"""Largest file a CLI or server reads (plans, inventories, profiles are kilobytes)."""
MAX_JSON_DEPTH = 64
"""Deepest JSON nesting accepted; the deepest real document (a profile) nests 6 levels."""


# ---- numbers ----------------------------------------------------------------------------------
def positive_number(value: Any, field: str, *, allow_zero: bool = False) -> float:
    """A finite real number > 0 (>= 0 with ``allow_zero``); bools and strings are refused."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"must be a number, got {value!r}", field=field)
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        raise ValidationError(f"is too large, got {value!r}", field=field) from None
    if not math.isfinite(number):
        raise ValidationError(f"must be a finite number, got {value!r}", field=field)
    if number < 0 or (number == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValidationError(f"must be {bound}, got {value!r}", field=field)
    return number


def integral(value: Any, field: str, *, minimum: int | None = 1, maximum: int = 2**62) -> int:
    """An integer in [minimum, maximum]. A float is accepted only when integral and finite
    (JSON writes 8 as 8.0 at times); 2.5, "2", True, NaN and 1e400 are refused."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"must be an integer, got {value!r}", field=field)
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise ValidationError(f"must be a whole number, got {value!r}", field=field)
    number = int(value)
    if minimum is not None and number < minimum:
        raise ValidationError(f"must be >= {minimum}, got {value!r}", field=field)
    if number > maximum:
        raise ValidationError(f"must be <= {maximum}, got {value!r}", field=field)
    return number


def port(value: Any, field: str = "port") -> int:
    """A TCP port, 0..65535 (0 = pick a free one); grpc would wrap 70000 to 4464 silently."""
    return integral(value, field, minimum=0, maximum=65535)


def listenable(address: str, field: str = "--port") -> None:
    """Refuse ``HOST:PORT`` when this machine cannot listen there (the port is taken, or the
    host is not one of its addresses or does not resolve), before gRPC tries: gRPC's own
    failure prints a C-core log line (``add_port.cc ... Failed to add port``) ahead of ours.
    Port 0 is probed too (any free port binds, so only the host can fail: ``--host``)."""
    where, _, port_text = address.rpartition(":")
    reason = _bind_problem(where.strip("[]"), port_text)
    if reason is None:
        return
    if port_text == "0":
        raise ValidationError(
            f"cannot listen on {where} ({reason}); give a --host of this machine "
            "(127.0.0.1, 0.0.0.0 or one of its addresses)",
            field="--host",
        )
    raise ValidationError(
        f"cannot listen on {address} ({reason}); pick another {field} (0: any free one) "
        "or a --host of this machine",
        field=field,
    )


def _bind_problem(host_name: str, port_text: str) -> str | None:
    """None when one of the addresses ``host_name`` resolves to binds the port (gRPC listens
    when any does: 'localhost' may resolve to ::1 first on a machine without IPv6), else why
    none does."""
    try:
        found = socket.getaddrinfo(
            host_name, int(port_text), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (OSError, ValueError) as exc:
        return getattr(exc, "strerror", None) or str(exc)
    reason = "it resolves to no address"
    for family, kind, proto, _, sockaddr in found:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does
                probe.bind(sockaddr)
            return None
        except OSError as exc:
            reason = exc.strerror or str(exc)
    return reason


# ---- names and addresses ----------------------------------------------------------------------
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HOST = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]{0,252}))$")


def safe_id(value: Any, field: str) -> str:
    """A name that is also safe as one path component and a log word: 1-64 letters, digits,
    '.', '_' or '-', starting with a letter or digit (so never '..', '/x' or '-x')."""
    if not isinstance(value, str) or not _SAFE_ID.match(value):
        raise ValidationError(
            f"must be 1-64 letters, digits, '.', '_' or '-' starting with a letter or digit, "
            f"got {str(value)[:80]!r}",
            field=field,
        )
    return value


def host(value: Any, field: str) -> str:
    """A host name or IP address (IPv6 in brackets or bare) to bind or connect to."""
    text = value.strip() if isinstance(value, str) else ""
    if ":" in text and not text.startswith("["):
        text = f"[{text}]"  # a bare IPv6 address
    if not _HOST.match(text):
        raise ValidationError(f"{str(value)[:80]!r} is not a host name or IP address", field=field)
    return text


def address(value: Any, field: str) -> tuple[str, int]:
    """(host, port) of ``HOST:PORT`` (``[v6]:PORT`` for IPv6), port 1..65535."""
    text = value.strip() if isinstance(value, str) else ""
    where, sep, port_text = text.rpartition(":")
    if not sep or not where or not port_text.isdigit() or len(port_text) > 5:
        raise ValidationError(
            f"{str(value)[:80]!r} is not HOST:PORT (e.g. 127.0.0.1:50051)", field=field
        )
    number = int(port_text)
    if not 0 < number < 65536:
        raise ValidationError(f"port {number} is not in 1..65535", field=field)
    if where.count(":") and not where.startswith("["):
        raise ValidationError(f"write an IPv6 address as [ADDR]:PORT, got {value!r}", field=field)
    return host(where, field), number


def check_finite(data: Any, field: str) -> Any:
    """``data`` (nested dicts/lists of numbers) with every float finite; else an error naming the
    first bad entry. Guards results (estimates) before they are printed or sent."""
    stack: list[tuple[str, Any]] = [(field, data)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValidationError(
                f"is {item} (an input time or size overflows); check the profiles and the plan",
                field=where,
            )
        if isinstance(item, Mapping):
            stack.extend((f"{where}.{k}", v) for k, v in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(item))
    return data


# ---- files ------------------------------------------------------------------------------------
def regular_file(
    path: str | os.PathLike,
    field: str,
    max_bytes: int = MAX_INPUT_BYTES,
    error: Err = ValidationError,
) -> Path:
    """``path`` as a Path, checked to be an existing regular file of at most ``max_bytes``.
    stat() decides before open(), so a FIFO or a device never blocks the reader."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise error(f"{p} does not exist", field=field) from None
    except OSError as exc:
        raise error(f"cannot read {p} ({exc.strerror})", field=field) from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{p} is a folder; give a file", field=field)
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{p} is not a regular file (a device or a pipe?)", field=field)
    if st.st_size > max_bytes:
        raise error(f"{p} has {st.st_size} bytes, more than the {max_bytes} accepted", field=field)
    return p


def read_text(
    path: str | os.PathLike,
    field: str,
    max_bytes: int = MAX_INPUT_BYTES,
    error: Err = ValidationError,
) -> str:
    """The UTF-8 text of a regular file; binary content is refused with a clear message."""
    p = regular_file(path, field, max_bytes, error)
    try:
        raw = p.read_bytes()[: max_bytes + 1]
    except OSError as exc:
        raise error(f"cannot read {p} ({exc.strerror})", field=field) from None
    if b"\x00" in raw:
        raise error(f"{p} is a binary file, not text (JSON expected)", field=field)
    try:
        # utf-8-sig drops a leading byte-order mark (Windows editors and PowerShell write one):
        # an inventory saved so was 'not valid JSON, truncated?', while a trace CSV with one
        # was read (polars skips it).
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise error(f"{p} is not UTF-8 text (JSON expected)", field=field) from None


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\[\s\S]?)*(?:"|\Z)')
"""A string, or an unterminated one up to the end of the text (which makes every match
succeed on its greedy path: linear time whatever the input, no backtracking)."""
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """Deepest nesting of brackets outside strings (cheap, no recursion): strings and every
    other character are dropped by regular expressions first, so only the brackets are
    counted in Python (a character-by-character loop took 0.07 s of every 1.7 MB of
    profiles read)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(itertools.accumulate(map(_BRACKET_STEP.__getitem__, brackets), initial=0))


def parse_json(
    text: str,
    field: str,
    where: str = "input",
    max_depth: int = MAX_JSON_DEPTH,
    error: Err = ValidationError,
):
    """Parse JSON text: depth bounded, NaN/Infinity refused, errors name ``where``."""
    if json_depth(text) > max_depth:
        raise error(
            f"{where} nests deeper than {max_depth} levels; not a Sailor document", field=field
        )
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise error(f"{where} is not valid JSON, truncated? ({exc})", field=field) from None


def load_json(
    path: str | os.PathLike,
    field: str,
    *,
    kind: type | tuple[type, ...] = dict,
    name: str = "an object",
    error: Err = ValidationError,
):
    """A JSON file whose top level is ``kind`` (a JSON null or a list where an object is
    expected is refused)."""
    data = parse_json(read_text(path, field, error=error), field, str(path), error=error)
    if not isinstance(data, kind):
        got = "null" if data is None else type(data).__name__
        raise error(f"{path} holds {got}; expected {name}", field=field)
    return data


def folder(path: str | os.PathLike, field: str) -> Path:
    """An existing folder."""
    p = Path(path)
    if not p.is_dir():
        what = "does not exist" if not p.exists() else "is not a folder"
        raise ValidationError(f"{p} {what}; give a folder", field=field)
    return p


# ---- outputs ----------------------------------------------------------------------------------
def _probe_writable(parent: Path, field: str) -> None:
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".sailor-probe-"):
            pass
    except OSError as exc:
        raise ValidationError(
            f"cannot write in {parent} ({exc.strerror}); choose a writable place", field=field
        ) from None


def output_file(path: str | os.PathLike, field: str) -> Path:
    """A path a file can be written to: not a folder, in an existing writable folder."""
    p = Path(path)
    if p.is_dir():
        raise ValidationError(f"{p} is a folder; give a file name", field=field)
    if p.exists() and not p.is_file():
        raise ValidationError(f"{p} is not a regular file", field=field)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ValidationError(f"the folder {parent} does not exist; create it first", field=field)
    _probe_writable(parent, field)
    return p


def output_folder(path: str | os.PathLike, field: str) -> Path:
    """A folder to write into: created if missing; a file in its place is refused."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ValidationError(f"{p} is a file; give a folder", field=field)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValidationError(f"cannot create {p} ({exc.strerror})", field=field) from None
    _probe_writable(p, field)
    return p


PORT_FILE_HELP = (
    "Write the bound port here (the chosen one with --port 0), atomically, once it serves; "
    "a file left by an earlier run is removed at start."
)
"""--port-file of every Sailor server (`sailor controller`, `sailor worker`,
`sailor-planner serve`): a script learns an ephemeral port without parsing the log."""


def cache_folder(env: str, *default: str) -> Path | None:
    """The folder a per-user cache of Sailor keeps its files in: the one the environment
    variable ``env`` names, None where it says ``off``, else ``default`` under
    ``$XDG_CACHE_HOME`` (``~/.cache``). One rule for the planner's parsed profiles and the
    runtime's measured ones."""
    raw = os.environ.get(env, "")
    if raw == "off":
        return None
    if raw:
        return Path(raw)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", *default)


def claim_port_file(path: str | os.PathLike | None, field: str = "--port-file") -> None:
    """Check ``path`` can be written and remove a stale one now, before the server starts, so
    a path that cannot be written is refused before anything listens. A script that waits for
    the file (``until [ -s port ]``) must remove it itself before starting the command: this
    runs only once Python has started and imported (a second or more), and until then the
    script would read an earlier run's port (deploy/slurm/sailor.sbatch does)."""
    if path is None:
        return
    output_file(path, field).unlink(missing_ok=True)


def write_port_file(path: str | os.PathLike | None, port: int) -> None:
    """Write ``port`` to ``path`` once the server listens, atomically and durably (a hidden
    temporary file beside it, fsynced, renamed into place: a reader never sees an empty or
    partial file)."""
    if path is None:
        return
    p = Path(path)
    tmp = p.with_name(f".{p.name}.part")
    with open(tmp, "w") as fh:
        fh.write(f"{port}\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, p)


# ---- plan files next to flags -----------------------------------------------------------------
def refuse_overrides(given: Mapping[str, Any], source: str) -> None:
    """Flags that a file already fixes are an error, not silently ignored."""
    clashing = [flag for flag, value in given.items() if value is not None]
    if clashing:
        raise ValidationError(
            f"{source} already sets the job; drop {', '.join(clashing)} or remove its 'job'",
            field=clashing[0],
        )


# ---- the CLI edge -----------------------------------------------------------------------------
INTERRUPT_EXIT = 128 + signal.SIGINT
SIGTERM_EXIT = 128 + signal.SIGTERM
PIPE_CLOSED_EXIT = 128 + signal.SIGPIPE
"""Exit statuses after Ctrl-C, SIGTERM and a closed stdout pipe: the shell's convention for
death by that signal."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as Ctrl-C's ``KeyboardInterrupt`` is, so a command
    stops what it started (its ``except KeyboardInterrupt`` and ``finally`` blocks run) before
    exiting ``SIGTERM_EXIT``. Python's default dies at once: a command's ranks, forkserver and
    workers lived on as orphans."""


def interrupt_exit(exc: KeyboardInterrupt) -> int:
    """The exit status a command stopped by ``exc`` ends with (SIGTERM or Ctrl-C)."""
    return SIGTERM_EXIT if isinstance(exc, Terminated) else INTERRUPT_EXIT


_TERMINATED: list[bool] = []
"""Set by the SIGTERM handler: typer turns any KeyboardInterrupt in a command into a plain
return of 130, so the signal is told apart after the command returns."""


def _terminate(_signum, _frame) -> None:
    _TERMINATED.append(True)
    raise Terminated


def run_app(
    app: Callable[..., Any], prog_name: str | None = None, args: list[str] | None = None
) -> None:
    """Run a typer app on ``args`` (default: the command line): any error ends as one line on
    stderr and exit status 2 (bad input) or 1 (a bug, still one line); never a traceback. A
    path option or argument given as "" is refused (``refuse_empty_paths``). SIGTERM stops the
    command as Ctrl-C does (``Terminated``) and exits 143, Ctrl-C 130; a command that serves
    until stopped (a server, a controller, a worker) installs its own handler.

    A reader that goes away (``sailor-sim prices | head -1``) ends the command quietly with
    ``PIPE_CLOSED_EXIT`` (141, as the shell reports a writer killed by SIGPIPE, so a pipeline
    under ``set -o pipefail`` sees why): stdout is pointed at the null device, as the Python
    docs' "Note on SIGPIPE" advises, so nothing is printed and no flush at exit fails."""
    _TERMINATED.clear()
    main = threading.current_thread() is threading.main_thread()  # signals reach only it
    previous = signal.signal(signal.SIGTERM, _terminate) if main else None
    try:
        command = refuse_empty_paths(_click_command(app))
        code = command(args=args, standalone_mode=False, prog_name=prog_name)
        sys.stdout.flush()  # output still buffered meets a closed pipe here, not at exit
    except KeyboardInterrupt as exc:
        code = interrupt_exit(exc)
    except SystemExit as exc:  # rich and click end any broken pipe with a bare exit 1
        if not isinstance(exc.__context__, BrokenPipeError):
            raise
        code = _broken_pipe(exc.__context__, stdout_gone=_rich_quieted_stdout(exc))
    except BrokenPipeError as exc:
        code = _broken_pipe(exc)
    except Exception as exc:  # noqa: BLE001 (the edge of the program: one line, not a trace)
        code = _report(exc)
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
    if code == INTERRUPT_EXIT and _TERMINATED:
        code = SIGTERM_EXIT
    sys.exit(code if isinstance(code, int) else 0)


def _broken_pipe(exc: BrokenPipeError, stdout_gone: bool = False) -> int:
    """The exit status for ``exc``: a closed stdout is quieted (its writes go to the null
    device) and ends ``PIPE_CLOSED_EXIT``; another pipe or socket that broke (a peer gone) is
    an error line, as any ``OSError``."""
    if not (stdout_gone or _stdout_gone()):
        return _report(exc)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return PIPE_CLOSED_EXIT


def _rich_quieted_stdout(exc: SystemExit) -> bool:
    """Whether rich raised ``exc`` in its ``Console.on_broken_pipe``, after pointing stdout at
    the null device (so polling stdout no longer tells that its reader went away)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_name == "on_broken_pipe"


def _stdout_gone() -> bool:
    """Whether stdout's reader went away: polling a pipe whose read end is closed reports an
    error (POLLERR; POLLHUP for a socket)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no file behind stdout (captured, closed)
        return False


HELP_WIDTH = 120
"""Widest --help a CLI prints (a narrower terminal's width wins): longer lines are hard to read."""


def _click_command(app: Callable[..., Any]) -> Callable[..., Any]:
    """The click command of a typer app (built as ``app()`` builds it), with ``plain_help``;
    anything else as is."""
    if hasattr(app, "registered_commands"):  # a typer.Typer
        import typer.main

        return plain_help(typer.main.get_command(app))
    return app


def plain_help(command: Any) -> Any:
    """``command`` (with its subcommands) printing click's two-column --help, wrapped to the
    terminal up to ``HELP_WIDTH``. typer's rich tables size the option column by the longest
    flag pair (``--flash-attention,--flash / --no-flash-attention,--no-flash``): at 80 columns
    each help was broken into 20-character lines (at 120, 42) and long flags were cut to
    ``--kill-worker-at-s…``."""
    if hasattr(command, "rich_markup_mode"):
        command.rich_markup_mode = None  # typer's switch back to click's formatter
    if command.help and not command.short_help:  # click cut it to fit one line, with "..."
        command.short_help = _first_sentence(command.help)
    command.context_settings.setdefault("max_content_width", HELP_WIDTH)
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)
    return command


def refuse_empty_paths(command: Any) -> Any:
    """``command`` (a click command or group, with its subcommands) with every path option and
    argument refusing "": ``Path("")`` is ``Path(".")``, so an empty value (an unset shell
    variable, ``--out "$OUT"``) silently meant the current folder, read or written as if named.
    The refusal names the flag; "." still means the current folder."""
    for param in getattr(command, "params", ()):
        kind = param.type
        if type(kind).__name__ not in ("TyperPath", "Path") or hasattr(kind, "_sailor_checked"):
            continue

        def convert(value, param, ctx, _convert=kind.convert, _kind=kind):
            if isinstance(value, str) and value == "":
                _kind.fail("is empty; give a path ('.' for the current folder)", param, ctx)
            return _convert(value, param, ctx)

        kind.convert, kind._sailor_checked = convert, True
    for sub in getattr(command, "commands", {}).values():
        refuse_empty_paths(sub)
    return command


def _first_sentence(text: str) -> str:
    """The first sentence of ``text``'s first paragraph, on one line: a command's line in its
    group's --help, which click wraps."""
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    sentence = re.split(r"(?<=[.!?])\s", paragraph, maxsplit=1)[0]
    return sentence.rstrip(".")


def _report(exc: Exception) -> int:
    """Exit status for an exception escaping a command, after printing its one line. typer
    vendors click, so its exceptions are recognised by shape rather than by class."""
    name = type(exc).__name__
    if name == "Exit" and isinstance(getattr(exc, "exit_code", None), int):
        return exc.exit_code  # type: ignore[attr-defined]
    if name == "Abort":
        _one_line("aborted")
        return INTERRUPT_EXIT
    if callable(getattr(exc, "format_message", None)):  # usage errors: bad flags or values
        _one_line(exc.format_message())  # type: ignore[attr-defined]
        return 2
    if isinstance(exc, ValueError | OSError | RecursionError | OverflowError | UnicodeError):
        _one_line(str(exc) or name)
        return 2
    _one_line(f"internal error ({name}: {exc}); please report it")
    return 1


def _one_line(message: str) -> None:
    text = " ".join(str(message).split())
    print(f"error: {text}", file=sys.stderr, flush=True)
