"""The `sailor-profiler` command line: compute | network | import-sailor | merge | plot.

Bad input prints one line ``error: ...`` on stderr and exits with status 2.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Annotated

import typer

import sailor_profiler
from sailor_sim import SailorSimError, inputs, version_option

from .errors import ProfileFolderError, SailorProfilerError, SweepError
from .network.measure import MAX_MESSAGE_BYTES, GiB
from .profiles.store import PROVENANCE_FILE, SIDE_DIR
from .timing import MAX_REPS

MAX_MESSAGE_GIB = MAX_MESSAGE_BYTES // GiB

app = typer.Typer(
    no_args_is_help=True, help=sailor_profiler.__doc__, pretty_exceptions_enable=False
)


def one_line_errors(fn):
    """Turn the package's and sailor-sim's input errors into one line and exit status 2. A
    command that fails leaves no ``--out`` folder it created and wrote nothing into (a
    misspelled --dtype left an empty folder behind, which the next run then 'merged')."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        created = _missing_ancestors(kwargs.get("out"))
        try:
            return fn(*args, **kwargs)
        except (SailorProfilerError, SailorSimError) as exc:
            _remove_empty(created)
            typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
            raise typer.Exit(2) from None
        except BaseException:  # interrupted, or a failure with its own message
            _remove_empty(created)
            raise

    return wrapper


def _missing_ancestors(out) -> list[Path]:
    """``out`` and its parents that do not exist yet, deepest first (what mkdir creates)."""
    if out is None:
        return []
    missing, p = [], Path(out).absolute()
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    return missing


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders a failed command created, deepest first, where still empty."""
    for p in folders:
        try:
            p.rmdir()
        except OSError:  # holds files (written before the failure), or was never made
            return


def parse_int_list(text: str, field: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise SweepError(
            f"expected comma-separated integers like 1,2,4, got {text!r}", field=field
        ) from None
    if not values or any(v < 1 for v in values):
        raise SweepError(f"expected positive integers, got {text!r}", field=field)
    return tuple(sorted(set(values)))


_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "gib": 1024**3,
}


def parse_bytes(text: str, field: str) -> int:
    """'64K', '1MB', '1G', '65536' -> bytes (binary units)."""
    raw = text.strip().lower()
    digits = raw.rstrip("abgikm")
    unit = raw[len(digits) :]
    if not (digits.isascii() and digits.isdigit()) or unit not in _UNITS or int(digits) <= 0:
        raise SweepError(f"expected a size like 64K, 16M or 1G, got {text!r}", field=field)
    return int(digits) * _UNITS[unit]


def fresh_profile_folder(out: Path, read: list[Path], fix: str) -> Path:
    """``--out`` of merge and import-sailor, refused when it already holds profile files (every
    ``*.json`` is read as one, links.json as the network profile) and is not a folder being
    read: the command writes its entries and links.json over the folder's own of the same
    names, whatever merge's order of preference says, and replaces the record sidecar."""
    held = sorted(p.name for p in out.glob("*.json")) if out.is_dir() else []
    if (out / SIDE_DIR / PROVENANCE_FILE).is_file():
        held.append(f"{SIDE_DIR}/{PROVENANCE_FILE}")
    if held and out.resolve() not in {p.resolve() for p in read}:
        shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        raise ProfileFolderError(f"{out} already holds profiles ({shown}); {fix}", field="--out")
    return inputs.output_folder(out, "--out")


@app.callback()
def main(version: bool = version_option(sailor_profiler.__version__)) -> None:
    # A callback keeps `sailor-profiler` a command group.
    pass


@app.command()
def version() -> None:
    """Print the sailor-profiler version."""
    typer.echo(sailor_profiler.__version__)


@app.command()
@one_line_errors
def compute(
    model: Annotated[str, typer.Option(help="Catalog model, e.g. tiny-gpt, OPT-350M.")],
    out: Annotated[Path, typer.Option(help="Profile folder to write (merged if it exists).")],
    device: Annotated[str, typer.Option(help="cpu, cuda or cuda:N (GPU of TP rank 0).")] = "cpu",
    dtype: Annotated[str, typer.Option(help="fp32, bf16 or fp16.")] = "fp32",
    mbs: Annotated[str, typer.Option(help="Microbatch sizes, comma-separated.")] = "1,2,4",
    tp: Annotated[str, typer.Option(help="TP degrees, comma-separated.")] = "1",
    seq: Annotated[
        int | None, typer.Option(help="Sequence length (default: min(model max, 2048)).")
    ] = None,
    warmup: Annotated[int, typer.Option(help=f"Untimed repetitions first (0 to {MAX_REPS}).")] = 2,
    reps: Annotated[
        int,
        typer.Option(
            help=f"Timed repetitions (median + IQR), 1 to {MAX_REPS}: the median settles within "
            "tens; more would run for hours."
        ),
    ] = 5,
    blocks: Annotated[int, typer.Option(help="Profile blocks 1..K, copy the rest (0: all).")] = 0,
    optimizer: Annotated[str, typer.Option(help="adam, adamw or sgd.")] = "adam",
    gpu_type: Annotated[str | None, typer.Option(help="Catalog GPU type to file under.")] = None,
    memory_limit_gb: Annotated[float | None, typer.Option(help="Memory per rank (GiB).")] = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads per rank [1].")] = None,
    plot: Annotated[bool, typer.Option(help="Also draw profiler/layers_*.png.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Profile per-layer time and memory of MODEL on this machine."""
    from .compute.command import ComputeRequest, run_compute

    request = ComputeRequest(
        model=model, out=inputs.output_folder(out, "--out"), device=device, dtype=dtype,
        mbs=parse_int_list(mbs, "mbs"), tps=parse_int_list(tp, "tp"), seq=seq,
        warmup=warmup, reps=reps, blocks=blocks, optimizer=optimizer, gpu_type=gpu_type,
        memory_limit_gb=memory_limit_gb, threads=threads, plot=plot, quiet=as_json,
    )  # fmt: skip
    summary = run_compute(request)
    if as_json:
        typer.echo(json.dumps(summary, indent=1))


@app.command()
@one_line_errors
def network(
    out: Annotated[Path, typer.Option(help="Folder for links.json and tables.")],
    device: Annotated[str, typer.Option(help="cpu (gloo), or cuda / cuda:N (NCCL).")] = "cpu",
    procs: Annotated[int, typer.Option(help="Local processes (unless RANK etc. are set).")] = 2,
    min_bytes: Annotated[str, typer.Option(help="Smallest message.")] = "64K",
    max_bytes: Annotated[
        str,
        typer.Option(
            help=f"Largest message, at most {MAX_MESSAGE_GIB}G (NCCL-tests' top size; every rank "
            "holds a buffer this large)."
        ),
    ] = "1G",
    warmup: Annotated[
        int, typer.Option(help=f"Untimed repetitions per size (0 to {MAX_REPS}).")
    ] = 2,
    reps: Annotated[
        int,
        typer.Option(
            help=f"Timed repetitions per size, 1 to {MAX_REPS}: the median settles within tens; "
            "more would run for hours."
        ),
    ] = 10,
    busy_ms: Annotated[
        float,
        typer.Option(
            help="Compute this long on every rank before each repetition, as training does between "
            "collectives (matters where ranks share cores: the scheduler then delays every "
            "ring step)."
        ),
    ] = 0.0,
    zone: Annotated[str, typer.Option(help="Zone of this rank group.")] = "local",
    peer_zone: Annotated[
        str | None, typer.Option(help="Zone of the peers (default: --zone).")
    ] = None,
    gpu_type: Annotated[str | None, typer.Option(help="Catalog GPU type to file under.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Measure p2p and all-reduce time over message sizes; fit latency + size / bandwidth."""
    from .network.command import NetworkRequest, run_network

    request = NetworkRequest(
        out=inputs.output_folder(out, "--out"), device=device, procs=procs,
        min_bytes=parse_bytes(min_bytes, "min_bytes"),
        max_bytes=parse_bytes(max_bytes, "max_bytes"), warmup=warmup, reps=reps, zone=zone,
        peer_zone=peer_zone, gpu_type=gpu_type, busy_ms=busy_ms,
    )  # fmt: skip
    summary = run_network(request)
    if summary is None:  # a non-zero rank of a multi-machine run writes nothing
        return
    typer.echo(json.dumps(summary, indent=1) if as_json else _network_text(summary))


def _network_text(summary: dict) -> str:
    lines = [f"{'op':<10} {'latency':>10} {'bandwidth':>12} {'fit err':>8}"]
    for op, fit in summary["fits"].items():
        lines.append(
            f"{op:<10} {fit['latency_s'] * 1e6:>8.1f}us "
            f"{fit['bandwidth_Bps'] / 1e9:>8.3f}GB/s {fit['rel_rmse']:>8.1%}"
        )
    return "\n".join(lines + [f"wrote {summary['links']}"])


@app.command("import-sailor")
@one_line_errors
def import_sailor_cmd(
    sailor_root: Annotated[Path, typer.Option(help="A folder laid out like a Sailor checkout.")],
    out: Annotated[Path, typer.Option(help="Profile folder to write.")],
) -> None:
    """Convert the original Sailor profiles and network fits into our formats."""
    from .profiles.importer import import_sailor

    out = fresh_profile_folder(
        out, [], f"import into a new folder, then `sailor-profiler merge NEW {out} --out {out}`"
    )
    counts = import_sailor(sailor_root, out)
    typer.echo(", ".join(f"{k}: {v}" for k, v in counts.items()) + f" -> {out}")


@app.command("merge")
@one_line_errors
def merge_cmd(
    folders: Annotated[list[Path], typer.Argument(help="Profile folders, later ones win ties.")],
    out: Annotated[Path, typer.Option(help="Merged profile folder to write.")],
) -> None:
    """Merge profile folders; per entry: ran > oom, measured > imported > analytic, newest."""
    from .profiles.merge import merge

    out = fresh_profile_folder(
        out, folders, f"to keep them, name {out} among the folders to merge, or give a new --out"
    )
    merged = merge(list(folders), out)
    typer.echo(f"{len(merged.store)} entries, {len(merged.records)} records -> {out}")


@app.command("plot")
@one_line_errors
def plot_cmd(
    profile: Annotated[Path, typer.Argument(help="A folder written by compute or network.")],
) -> None:
    """Redraw the PNGs of a profile folder from its tables (profiler/*.parquet)."""
    from .compute.command import replot

    for path in replot(profile):
        typer.echo(str(path))


def run() -> None:
    """The ``sailor-profiler`` console script: every error one line on stderr, exit 2; SIGTERM
    stops the ranks a command started and exits 143 (``inputs.Terminated``)."""
    inputs.run_app(app, "sailor-profiler")


if __name__ == "__main__":
    run()
