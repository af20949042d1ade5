"""The ``compute`` and ``plot`` commands: validation, progress bar, files, summary."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from sailor_sim import OPTIMIZERS, check_dtype, get_model

from ..devices import parse_device
from ..errors import ProfileFolderError, SweepError
from ..launch import env_launched, threads_per_rank, usable_cores
from ..network.fit import LinkFit
from ..plots import plot_bandwidth, plot_layers
from ..profiles.provenance import gpu_type_for, provenance
from ..profiles.store import SIDE_DIR, read_folder
from ..tables import layers_frame, write_table
from .measure import ComputeConfig
from .sweep import SweepResult, check_sweep, run_sweep, steps_per_tp, write_profile

DEFAULT_MAX_SEQ = 2048


@dataclass(frozen=True)
class ComputeRequest:
    """What ``sailor-profiler compute`` is asked, as one value (the CLI's flags; ``run_compute``
    takes it whole). ``config`` checks it and gives the measurement's ``ComputeConfig``."""

    model: str
    """Catalog model, e.g. tiny-gpt, OPT-350M."""
    out: Path
    """Profile folder to write (merged if it exists)."""
    device: str = "cpu"
    dtype: str = "fp32"
    mbs: tuple[int, ...] = (1, 2, 4)
    tps: tuple[int, ...] = (1,)
    seq: int | None = None
    """Sequence length; None: min(model max, ``DEFAULT_MAX_SEQ``)."""
    warmup: int = 2
    reps: int = 5
    blocks: int = 0
    optimizer: str = "adam"
    gpu_type: str | None = None
    memory_limit_gb: float | None = None
    threads: int | None = None
    plot: bool = True
    quiet: bool = False

    def config(self) -> ComputeConfig:
        """The measurement's settings (model resolved, defaults filled); bad values raise
        ``SweepError`` naming the field."""
        spec = get_model(self.model)
        optimizer, limit, threads = self.optimizer.lower(), self.memory_limit_gb, self.threads
        if optimizer not in OPTIMIZERS:
            raise SweepError(
                f"unknown optimizer {self.optimizer!r}; use one of {OPTIMIZERS}", field="optimizer"
            )
        if limit is not None and not (math.isfinite(limit) and limit > 0):
            raise SweepError(
                f"must be a finite number > 0 GiB, got {limit}", field="memory_limit_gb"
            )
        if threads is not None and not 1 <= threads <= usable_cores():
            raise SweepError(
                f"must be from 1 to the {usable_cores()} cores this process may use, got {threads}",
                field="threads",
            )
        if self.blocks < 0:
            raise SweepError(f"must be >= 0 (0 = every block), got {self.blocks}", field="blocks")
        return ComputeConfig(
            spec.name,
            parse_device(self.device),
            check_dtype(self.dtype),
            tuple(self.mbs),
            self.seq if self.seq is not None else min(spec.max_seq_len, DEFAULT_MAX_SEQ),
            self.warmup,
            self.reps,
            self.blocks,
            optimizer,
            None if limit is None else int(limit * 1024**3),
            threads,
        )


def check_out_dir(out: str | Path) -> None:
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SweepError(
            f"{out} exists and is not a folder; give a folder for the profile", field="out"
        )


def run_compute(request: ComputeRequest) -> dict:
    """Profile what ``request`` asks, write the profile folder, return the summary."""
    if env_launched():
        raise SweepError(
            "compute starts its own TP processes; run it once per machine, not "
            "under torchrun (RANK / WORLD_SIZE are set)",
            field="launch",
        )
    out, tps, quiet = request.out, tuple(request.tps), request.quiet
    check_out_dir(out)
    if Path(out).is_dir():  # a folder the sweep cannot merge into fails now, not after it
        read_folder(out, allow_empty=True)
    cfg = request.config()
    check_sweep(cfg, tps)
    gpu = gpu_type_for(cfg.device, request.gpu_type)
    console = Console(stderr=True, quiet=quiet)
    columns = ("{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(f"{cfg.model} {gpu} {cfg.dtype}", total=steps_per_tp(cfg) * len(tps))
        start = time.perf_counter()
        rows = run_sweep(cfg, tps, lambda _step: bar.advance(task))
        sweep_s = time.perf_counter() - start
    prov = provenance(
        cfg.device,
        gpu,
        sequence_length=cfg.seq_len,
        warmup=cfg.warmup,
        reps=cfg.reps,
        blocks=cfg.blocks,
        optimizer=cfg.optimizer,
        threads_per_rank={tp: cfg.threads or threads_per_rank(tp) for tp in tps}
        if cfg.device.kind == "cpu"
        else None,
    )
    result = SweepResult(gpu, cfg, tuple(tps), tuple(rows), prov)
    files = write_profile(result, out)
    frame = layers_frame(rows, cfg.model, gpu, cfg.dtype, cfg.seq_len)
    stem = Path(out) / SIDE_DIR / f"layers__{cfg.model}__{gpu}__{cfg.dtype}__s{cfg.seq_len}"
    files += write_table(frame, stem)
    if request.plot:
        files.append(plot_layers(frame, stem.with_suffix(".png")))
    summary = {**_summary(frame, files), "sweep_s": sweep_s}
    if not quiet:
        Console().print(_summary_text(summary))
    return summary


def _summary(frame: pl.DataFrame, files: list[Path]) -> dict:
    per_key = (
        frame.group_by("tp", "microbatch_size")
        .agg(
            pl.col("status").eq("ok").all().alias("fits"),
            pl.col("forward_s").sum().alias("forward_s"),
            pl.col("backward_s").sum().alias("backward_s"),
            pl.col("optimizer_s").sum().alias("optimizer_s"),
            pl.col("activation_stash_bytes").sum().alias("activation_stash_bytes"),
            pl.col("params").sum().alias("params"),
        )
        .sort("tp", "microbatch_size")
    )
    return {"entries": per_key.to_dicts(), "files": [str(f) for f in files]}


def _summary_text(summary: dict) -> str:
    lines = [
        f"{'tp':>3} {'mbs':>4} {'fits':>5} {'fwd s':>10} {'bwd s':>10} {'opt s':>10} "
        f"{'stash MB':>9} {'params':>12}"
    ]
    for e in summary["entries"]:
        lines.append(
            f"{e['tp']:>3} {e['microbatch_size']:>4} {'yes' if e['fits'] else 'OOM':>5} "
            f"{e['forward_s'] or 0:>10.4g} {e['backward_s'] or 0:>10.4g} "
            f"{e['optimizer_s'] or 0:>10.4g} {(e['activation_stash_bytes'] or 0) / 1e6:>9.2f} "
            f"{e['params']:>12,}"
        )
    return "\n".join(lines + [f"wrote {len(summary['files'])} files"])


def replot(profile: str | Path) -> list[Path]:
    side = Path(profile) / SIDE_DIR
    layer_tables = sorted(side.glob("layers__*.parquet"))
    net_table, net_fits = side / "network.parquet", side / "network.json"
    if not layer_tables and not net_table.exists():
        raise ProfileFolderError(
            f"{side} has no layers__*.parquet or network.parquet; run "
            "compute or network with --out there first",
            field="profile",
        )
    written = [plot_layers(pl.read_parquet(t), t.with_suffix(".png")) for t in layer_tables]
    if net_table.exists():
        fits = {}
        if net_fits.exists():
            fits = {op: LinkFit(**f) for op, f in json.loads(net_fits.read_text())["fits"].items()}
        written.append(plot_bandwidth(pl.read_parquet(net_table), fits, side / "network.png"))
    return written
