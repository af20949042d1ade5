"""Tables of the sailor-sim CLI: the estimate with its metrics, cost by provider, memory."""

from __future__ import annotations

from typing import Any

import typer

GiB = 1024**3
WIDTH = 120
"""Every table fits this many columns: long cells wrap inside their column."""
TERM_HEADERS = {
    "optimizer_states": "optim",
    "activations": "activ",
    "gradients": "grads",
    "comm_buffers": "comm",
    "framework": "framewk",
    "transient": "transient",
    "weights": "weights",
    "fp8_weight_copies": "fp8 w",
    "gathered_weights": "gathered",
}
"""Short memory-term headers, so a stage's whole breakdown fits one 120-column row."""


def version_option(version: str):
    """A ``--version`` flag for a command group's callback: prints ``version`` and exits 0."""

    def show(value: bool) -> None:
        if value:
            typer.echo(version)
            raise typer.Exit()

    return typer.Option(
        False, "--version", callback=show, is_eager=True, help="Print the version and exit."
    )


def catalog_option():
    """``--catalog FILE`` for a command group's callback: a cluster's own GPUs and prices
    (``user_catalog``), registered before the command runs."""

    def load(path):
        if path is not None:
            from ..catalog.user import load_catalog
            from ..errors import SailorSimError

            try:
                load_catalog(path)
            except SailorSimError as exc:
                fail(exc)
        return path

    return typer.Option(
        None,
        "--catalog",
        callback=load,
        help="JSON/TOML file of GPU types and prices to add (format sailor-catalog/1).",
    )


def echo_wrapped(text: str) -> None:
    """One labelled line, wrapped at ``WIDTH`` with the continuation indented."""
    import textwrap

    typer.echo(textwrap.fill(text, WIDTH, subsequent_indent="    ", break_on_hyphens=False))


def fail(exc: Exception) -> None:
    """One clear line on stderr and exit status 2."""
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(2)


def print_estimate(estimate, rate=None, by_provider=None, trust=None) -> None:
    from ..simulate.metrics import provenance

    e = estimate
    rows = [
        ("iteration time", f"{e.iteration_time_s:.4f} s"),
        ("throughput", f"{e.throughput_iters_per_s:.4f} it/s, {e.samples_per_s:.1f} samples/s"),
    ]
    if rate is not None:
        rows += [
            ("tokens/s", f"{rate.tokens_per_s:,.0f} ({rate.tokens_per_s_per_gpu:,.0f} per GPU)"),
            (
                "model TFLOP/s per GPU",
                f"{rate.model_tflops_per_gpu:.1f} of {rate.peak_tflops_per_gpu:.0f} peak "
                f"(MFU {rate.mfu:.1%}; 6N + 12LHQT, PaLM App. B)",
            ),
        ]
    rows += [
        (
            "peak memory",
            f"{e.peak_memory_bytes / GiB:.2f} GiB per GPU ({'fits' if e.fits else 'OOM'})",
        ),  # fmt: skip
        ("cost", _cost_text(e)),
    ]
    if e.run_iterations is not None:
        run_cost = "-" if e.run_cost_usd is None else f"${e.run_cost_usd:,.2f}"
        rows.append(("whole run", f"{e.run_hours:.2f} h, {run_cost}"))
    for p in trust if trust is not None else provenance(e.sources):
        rows.append(("provenance", f"{p['source']}: {p['trust']}"))
    table(["", "value"], rows)
    if by_provider:
        typer.echo("")
        table(
            ["provider", "region", "$/hour on demand", "$/hour spot"],
            [
                (
                    r["provider"],
                    r["region"],
                    "-" if r["usd_per_hour"] is None else f"{r['usd_per_hour']:,.2f}",
                    "-" if r["spot_usd_per_hour"] is None else f"{r['spot_usd_per_hour']:,.2f}",
                )
                for r in by_provider
            ],
        )
    typer.echo("")
    total = e.iteration_time_s
    table(
        ["time term", "seconds", "share"],
        [(k, f"{v:.4f}", f"{v / total:6.1%}") for k, v in e.time_breakdown_s.items()],
    )
    typer.echo("")
    seen: dict[tuple, Any] = {}
    for m in e.memory:  # one row per distinct (stage, GPU type, zone, peak)
        seen.setdefault((m.stage, m.gpu_type, m.zone, m.peak_bytes), m)
    terms = list(next(iter(e.memory)).breakdown_bytes)
    typer.echo("memory per GPU, GiB:")
    table(
        ["stage", "gpu", "zone", "peak", "cap", "fits", *(TERM_HEADERS.get(t, t) for t in terms)],
        [
            (
                m.stage,
                m.gpu_type,
                m.zone,
                f"{m.peak_bytes / GiB:.2f}",
                f"{m.capacity_bytes / GiB:.1f}",
                "yes" if m.fits else "NO",
                *(f"{m.breakdown_bytes[t] / GiB:.2f}" for t in terms),
            )
            for m in seen.values()
        ],
    )


def _cost_text(e) -> str:
    if e.cost_per_iteration_usd is None:  # no price for a GPU of the plan: a note says why
        return "-"
    return f"${e.cost_per_iteration_usd:,.4f} / iteration, ${e.cost_per_hour_usd:,.2f} / hour"


def table(header, rows) -> None:
    """A plain rich table (no box) at most ``WIDTH`` columns wide: a cell too long for its
    column wraps within it (long provenance sentences), numbers never do."""
    from rich.console import Console  # here: importing the options costs no rich
    from rich.table import Table

    grid = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
    for h in header:
        grid.add_column(str(h), overflow="fold")
    for r in rows:
        grid.add_row(*(str(c) for c in r))
    Console(width=WIDTH).print(grid, crop=True)
