"""``sailor-sim prices``, ``models`` and ``gpus``: the built-in catalogs, with their sources."""

from __future__ import annotations

import json

import typer

from ..errors import SailorSimError


def _echo_table(header, rows) -> None:
    from .output import table

    table(header, rows)


def _set_row(gpu: str, region: str, price: float, source: str, spot: bool) -> tuple:
    """A table row of a price given at run time (--catalog): provider 'set', its region."""
    cell = f"{price:.3f}"
    where = "every region" if region == "*" else region
    return (gpu, "set", where, "-" if spot else cell, cell if spot else "-", "-", "-", source)


def prices(
    gpu: str = typer.Option(None, help="Only this GPU type (name or alias)."),
    provider: str = typer.Option(None, help="Only this provider: gcp, aws or azure."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """GPU instance offers per provider: $/GPU-hour on demand and spot, fabric, source, date."""
    from ..catalog.instances import OFFERS, OTHER_PRICES
    from ..catalog.zones import DEFAULT_REGIONS
    from .output import fail

    try:
        from ..catalog.gpus import get_gpu

        name = get_gpu(gpu).name if gpu is not None else None  # "" is no GPU type, not all
        if provider is not None and provider not in DEFAULT_REGIONS:
            raise SailorSimError(
                f"unknown provider {provider!r}; use one of {', '.join(DEFAULT_REGIONS)}",
                field="provider",
            )
    except SailorSimError as exc:
        fail(exc)
    from ..catalog.prices import prices_set
    from ..catalog.zones import REGION_PROVIDER
    from ..simulate.result import usd

    offers = [o for o in OFFERS if name in (None, o.gpu_type) and provider in (None, o.provider)]
    others = [p for p in OTHER_PRICES.values() if name in (None, p.gpu_type) and not provider]
    given = [row for row in prices_set() if name in (None, row[0])
             and provider in (None, REGION_PROVIDER.get(row[1]))]  # fmt: skip
    if as_json:
        rows = [
            {
                "provider": o.provider,
                "instance": o.instance,
                "gpu_type": o.gpu_type,
                "gpus": o.gpus,
                "regions": list(o.regions),
                "usd_per_gpu_hour": usd(o.usd_per_gpu_hour()),
                "spot_usd_per_gpu_hour": usd(o.usd_per_gpu_hour(spot=True)),
                "fabric": o.fabric.name,
                "source": o.source,
                "spot_source": o.spot_source,
                "date": o.date,
            }
            for o in offers
        ]
        other = [p.__dict__ for p in others]
        keys = ("gpu_type", "region", "usd_per_gpu_hour", "source", "spot")
        set_rows = [dict(zip(keys, row, strict=True)) for row in given]
        typer.echo(json.dumps({"offers": rows, "other": other, "set": set_rows}))
        return
    if not offers and not others and not given:  # no empty table: say so, and how to add one
        where = " on " + provider if provider else ""
        typer.echo(f"No offer for {name or 'any GPU'}{where} in the price catalog; add a price "
                   "with --catalog FILE (format sailor-catalog/1).")  # fmt: skip
        return
    _echo_table(
        ["gpu", "provider", "instance", "$/GPU-h", "spot $/GPU-h", "fabric", "date", "source"],
        [
            (
                o.gpu_type,
                o.provider,
                o.instance,
                f"{o.usd_per_gpu_hour():.3f}",
                f"{o.usd_per_gpu_hour(spot=True):.3f}",
                f"{o.fabric.kind} {o.fabric.bandwidth_per_node * 8 / 1e9:.0f} Gb/s",
                o.date,
                o.source,
            )  # fmt: skip
            for o in offers
        ]
        + [
            (p.gpu_type, "other", "-", f"{p.usd_per_gpu_hour:.3f}", "-", "-", p.date, p.source)
            for p in others
        ]
        + [_set_row(*row) for row in given],
    )


def models(
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list, one object a model."),
) -> None:
    """The built-in model catalog (any other model: pass its Hugging Face config.json)."""
    from ..model.spec import MODEL_CATALOG

    rows = [
        {
            "name": m.name,
            "family": m.family,
            "params": m.total_params(),
            "layers": m.num_layers,
            "hidden": m.hidden_size,
            "heads": m.num_heads,
            "kv_heads": m.num_kv_heads,
            "vocab": m.vocab_size,
            "max_seq_len": m.max_seq_len,
            "tied": m.tie_word_embeddings,
        }
        for m in MODEL_CATALOG.values()
    ]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    _echo_table(
        list(rows[0]),
        [[f"{v / 1e9:.2f} B" if k == "params" else v for k, v in r.items()] for r in rows],
    )


def gpus(
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list, one object a GPU."),
) -> None:
    """The built-in GPU catalog: memory, dense peaks, node size and link, source."""
    from ..catalog.gpus import GPU_CATALOG

    GiB = 1024**3
    rows = [
        {
            "name": g.name,
            "vendor": g.vendor,
            "memory_gib": round(g.memory_bytes / GiB, 1),
            "bf16_tflops": g.bf16_flops / 1e12 if g.bf16_flops else None,  # None: no bf16
            "gpus_per_node": g.gpus_per_node,
            "intra_node_gbps": g.intra_node_bandwidth / 1e9,
            "intra_node_link": g.intra_node_link,
            "source": g.source,
        }
        for g in GPU_CATALOG.values()
    ]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    _echo_table(
        ["gpu", "vendor", "memory GiB", "bf16 TFLOP/s", "per node", "intra GB/s", "link"],
        [["-" if v is None else v for v in list(r.values())[:7]] for r in rows],
    )


def register(app: typer.Typer) -> None:
    for command in (prices, models, gpus):
        app.command()(command)
