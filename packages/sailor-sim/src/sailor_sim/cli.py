"""The ``sailor-sim`` command line: ``simulate``, ``memory``, ``demo``, ``version``.

Human-readable tables by default, ``--json`` for machines; any bad input prints one line
``error: ...`` on stderr and exits with status 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from . import inputs
from .errors import SailorSimError, ValidationError

app = typer.Typer(
    no_args_is_help=True,
    help="Predict iteration time, memory and cost of plans.",
    pretty_exceptions_enable=False,
)

GB = 1e9


def fail(exc: Exception) -> None:
    """One clear line on stderr and exit status 2."""
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(2)


def _simulator(sailor_root: Path | None, profiles: Path | None):
    from .simulator import Simulator

    if sailor_root is not None and profiles is not None:
        sim = Simulator.from_sailor_root(sailor_root)
        extra = Simulator.from_profile_dir(profiles)
        for entry in extra.profiles.entries():
            sim.profiles.add(entry)  # measured profiles override imported ones
        return sim
    if sailor_root is not None:
        return Simulator.from_sailor_root(sailor_root)
    if profiles is not None:
        return Simulator.from_profile_dir(profiles)
    return Simulator()


def _load_plan_and_job(
    plan_file: Path | None,
    sailor_plan: Path | None,
    model: str | None,
    gbs: int | None,
    seq: int | None,
    dtype: str | None,
    optimizer: str | None,
):
    from .job import Job
    from .original import read_sailor_plan
    from .plan import Plan

    if (plan_file is None) == (sailor_plan is None):
        raise ValidationError("give a plan file or --sailor-plan FILE (exactly one)", field="plan")
    if sailor_plan is not None:
        record = read_sailor_plan(sailor_plan)
        if model is None:
            raise ValidationError("--model is required with --sailor-plan", field="model")
        job = Job.create(
            model, gbs or record.global_batch_size, seq, dtype or "fp32", optimizer or "adam"
        )
        return job, record.plan
    data = inputs.load_json(plan_file, "plan")
    if "plan" in data:
        job = Job.from_dict(data["job"]) if "job" in data else None
        plan = Plan.from_dict(data["plan"])
    else:
        job, plan = None, Plan.from_dict(data)
    if job is not None:  # the file's job wins only when no flag contradicts it
        flags = {"--model": model, "--gbs": gbs, "--seq": seq, "--dtype": dtype}
        inputs.refuse_overrides({**flags, "--optimizer": optimizer}, f"{plan_file}")
    else:
        if model is None or gbs is None:
            raise ValidationError("the plan file has no 'job'; pass --model and --gbs", field="job")
        job = Job.create(model, gbs, seq, dtype or "fp32", optimizer or "adam")
    return job, plan


@app.command()
def simulate(
    plan_file: Annotated[
        Path | None, typer.Argument(help="Plan JSON ({'stages': ...} or {'job', 'plan'}).")
    ] = None,
    sailor_plan: Annotated[
        Path | None, typer.Option(help="A plan in the original Sailor plan JSON.")
    ] = None,
    sailor_root: Annotated[
        Path | None, typer.Option(help="Folder laid out like a Sailor checkout.")
    ] = None,
    profiles: Annotated[
        Path | None, typer.Option(help="Folder of sailor-sim profile files.")
    ] = None,
    model: str = typer.Option(None, help="Model name (catalog or Sailor alias)."),
    gbs: int = typer.Option(None, help="Global batch size (default: from the Sailor plan)."),
    seq: int = typer.Option(None, help="Sequence length (default: the model's maximum)."),
    dtype: str = typer.Option(None, help="fp32 (default), bf16 or fp16."),
    optimizer: str = typer.Option(None, help="adam (default), adamw or sgd."),
    iterations: float = typer.Option(None, help="Whole-run figures for this many iterations."),
    tokens: float = typer.Option(None, help="Whole-run figures for this many tokens."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Predict iteration time, peak memory per GPU and cost of a plan."""
    try:
        for name, value in (("iterations", iterations), ("tokens", tokens)):
            if value is not None:
                inputs.positive_number(value, f"--{name}")
        job, plan = _load_plan_and_job(plan_file, sailor_plan, model, gbs, seq, dtype, optimizer)
        sim = _simulator(sailor_root, profiles)
        estimate = sim.estimate(job, plan, iterations=iterations, tokens=tokens)
        inputs.check_finite(estimate.to_dict(), "estimate")
    except (SailorSimError, OSError) as exc:
        fail(exc)
    if as_json:
        typer.echo(json.dumps(estimate.to_dict()))
        return
    typer.echo(f"Job: {job.model.name}, global batch {job.global_batch_size}, {job.dtype}")
    typer.echo(f"Plan: {plan.describe()} ({plan.num_gpus} GPUs)")
    print_estimate(estimate)


def print_estimate(estimate) -> None:
    e = estimate
    rows = [
        ("iteration time", f"{e.iteration_time_s:.4f} s"),
        ("throughput", f"{e.throughput_iters_per_s:.4f} it/s, {e.samples_per_s:.1f} samples/s"),
        ("peak memory", f"{e.peak_memory_bytes / GB:.2f} GB ({'fits' if e.fits else 'OOM'})"),
        ("cost", f"${e.cost_per_iteration_usd:.4f} / iteration, ${e.cost_per_hour_usd:.2f} / hour"),
    ]
    if e.run_iterations is not None:
        rows.append(("whole run", f"{e.run_hours:.2f} h, ${e.run_cost_usd:,.2f}"))
    rows.append(("profile sources", ", ".join(e.sources)))
    _table(["", "value"], rows)
    typer.echo("")
    total = e.iteration_time_s
    _table(
        ["time term", "seconds", "share"],
        [(k, f"{v:.4f}", f"{v / total:6.1%}") for k, v in e.time_breakdown_s.items()],
    )
    typer.echo("")
    seen: dict[tuple, Any] = {}
    for m in e.memory:  # one row per distinct (stage, GPU type, zone, peak)
        seen.setdefault((m.stage, m.gpu_type, m.zone, m.peak_bytes), m)
    terms = list(next(iter(e.memory)).breakdown_bytes)
    _table(
        ["stage", "gpu", "zone", "peak GB", "cap GB", "fits", *terms],
        [
            (
                m.stage,
                m.gpu_type,
                m.zone,
                f"{m.peak_bytes / GB:.2f}",
                f"{m.capacity_bytes / GB:.1f}",
                "yes" if m.fits else "NO",
                *(f"{m.breakdown_bytes[t] / GB:.2f}" for t in terms),
            )
            for m in seen.values()
        ],
    )


def _table(header, rows) -> None:
    rows = [[str(c) for c in r] for r in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    typer.echo("  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True)))
    for r in rows:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


@app.command()
def memory(
    model: str = typer.Option(..., help="Model name."),
    gpu: str = typer.Option(..., help="GPU type, e.g. A100-40."),
    tp: int = typer.Option(1, help="Tensor-parallel degree."),
    pp: int = typer.Option(1, help="Pipeline stages (layer ids split evenly)."),
    mbs: int = typer.Option(1, help="Microbatch size."),
    num_microbatches: int = typer.Option(None, help="Microbatches per iteration (default: pp)."),
    dp: int = typer.Option(1, help="Data-parallel replicas (adds the DP communicator)."),
    stage: int = typer.Option(None, help="Only this stage (0-based)."),
    seq: int = typer.Option(None, help="Sequence length (default: the model's maximum)."),
    dtype: str = typer.Option("fp32"),
    optimizer: str = typer.Option("adam"),
    sailor_root: Annotated[
        Path | None, typer.Option(help="Folder laid out like a Sailor checkout.")
    ] = None,
    profiles: Annotated[
        Path | None, typer.Option(help="Folder of sailor-sim profile files.")
    ] = None,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Will this model fit on this GPU with this TP / PP / microbatch size, and by how much?"""
    from .gpus import get_gpu
    from .job import Job
    from .plan import even_split

    try:
        job = Job.create(model, 1, seq, dtype, optimizer)
        gpu_type = get_gpu(gpu)
        job.model.check_tp(tp)
        if tp > gpu_type.gpus_per_node:
            raise ValidationError(
                f"TP {tp} exceeds the {gpu_type.gpus_per_node} GPUs of a {gpu_type.name} node",
                field="tp",
            )
        for name, value in (("--mbs", mbs), ("--dp", dp), ("--pp", pp), ("--tp", tp)):
            inputs.integral(value, name)
        if num_microbatches is not None:
            inputs.integral(num_microbatches, "--num-microbatches")
        sizes = even_split(job.model.num_layer_ids, pp)
        if stage is not None and not 0 <= stage < pp:
            raise ValidationError(f"must be in 0..{pp - 1}", field="stage")
        sim = _simulator(sailor_root, profiles)
        m = num_microbatches or pp
        rows, first = [], 0
        for i, size in enumerate(sizes):
            last = first + size - 1
            if stage is None or stage == i:
                terms = sim.replica_memory(job, first, last, gpu_type.name, tp, mbs, i, pp, m, dp)
                peak = sum(terms.values())
                rows.append(
                    {
                        "stage": i,
                        "layers": [first, last],
                        "peak_bytes": peak,
                        "capacity_bytes": gpu_type.memory_bytes,
                        "fits": peak <= gpu_type.memory_bytes,
                        "headroom_bytes": gpu_type.memory_bytes - peak,
                        "breakdown_bytes": terms,
                    }
                )
            first = last + 1
        inputs.check_finite(rows, "stages")
    except SailorSimError as exc:
        fail(exc)
    if as_json:
        typer.echo(json.dumps({"model": job.model.name, "gpu_type": gpu_type.name, "stages": rows}))
        return
    typer.echo(f"{job.model.name} on {gpu_type.name}: TP {tp}, PP {pp}, mbs {mbs}, {dtype}")
    terms = list(rows[0]["breakdown_bytes"])
    _table(
        ["stage", "layers", "peak GB", "cap GB", "fits", "headroom GB", *terms],
        [
            (
                r["stage"],
                f"{r['layers'][0]}-{r['layers'][1]}",
                f"{r['peak_bytes'] / GB:.2f}",
                f"{r['capacity_bytes'] / GB:.1f}",
                "yes" if r["fits"] else "NO",
                f"{r['headroom_bytes'] / GB:+.2f}",
                *(f"{r['breakdown_bytes'][t] / GB:.2f}" for t in terms),
            )
            for r in rows
        ],
    )


@app.command()
def demo() -> None:
    """The built-in example: OPT-350M, global batch 1024, A100-40 + V100-16 in two zones."""
    from .examples import example_inventory, example_job, example_plan
    from .simulator import Simulator

    try:
        job, inventory, plan = example_job(), example_inventory(), example_plan()
        estimate = Simulator().estimate(job, plan)
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
    typer.echo("Estimate (built-in catalog, analytic profiles):")
    print_estimate(estimate)


@app.command()
def version() -> None:
    from . import __version__

    typer.echo(__version__)


def main() -> None:
    """The ``sailor-sim`` entry point: any error is one line on stderr, never a traceback."""
    inputs.run_app(app, "sailor-sim")


if __name__ == "__main__":
    main()
