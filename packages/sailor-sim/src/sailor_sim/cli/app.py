"""The ``sailor-sim`` command line: ``simulate``, ``memory``, ``demo``, ``version``.

Human-readable tables by default, ``--json`` for machines; any bad input prints one line
``error: ...`` on stderr and exits with status 2.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from .. import __version__, inputs
from ..capacity import estimate_maybe_unpriced
from ..catalog.cluster import describe_network
from ..errors import SailorSimError, ValidationError
from ..spec import derive as specs
from ..spec.options import ExecutionOptions, check_replica
from ..spec.plan import StageSlice
from ..spec.run import TRAINING_FIELDS, RunSpec
from .catalog import register as _register_catalog_commands
from .options import FabricFlag, P2p, with_p2p
from .output import (
    TERM_HEADERS,
    GiB,
    catalog_option,
    echo_wrapped,
    fail,
    print_estimate,
    table,
    version_option,
)

app = typer.Typer(
    no_args_is_help=True,
    help="Predict iteration time, memory and cost of plans.",
    pretty_exceptions_enable=False,
)


_CATALOG = catalog_option()


@app.callback()
def group(version: bool = version_option(__version__), catalog: Path | None = _CATALOG) -> None:
    # A callback keeps `sailor-sim` a command group and gives it --version.
    pass


TRAINING_ONLY = TRAINING_FIELDS
OPTION_FIELDS = tuple(f.name for f in dataclasses.fields(ExecutionOptions))
"""RunSpec's option leaves: the names ``given`` holds for the execution-option flags."""


def _job_flags(spec: RunSpec, given: frozenset[str], p2p: str | None = None):
    """(model, gbs, seq, dtype, optimizer, options) as given (None where not given: a plan
    file's job or a stated default applies), from the command's RunSpec."""
    options = with_p2p(spec.options, p2p)
    pick = {name: getattr(spec, name) if name in given else None
            for name in ("model", "global_batch_size", "optimizer")}  # fmt: skip
    return (pick["model"], pick["global_batch_size"], spec.seq_len, spec.precision,
            pick["optimizer"], options)  # fmt: skip


def _option_flags(given: frozenset[str], p2p: str | None) -> tuple[str, ...]:
    """The execution-option flags given (or set by --config), by name: what was given, not
    what differs from the defaults, so '--recompute none' counts as much as '--recompute
    full' (compared with the defaults, a flag at its default looked not given and a plan
    file's job silently replaced it)."""
    names = [f"--{name.replace('_', '-')}" for name in OPTION_FIELDS if name in given]
    return (*names, "--p2p") if p2p is not None else tuple(names)


def _job(model, gbs, seq, dtype, optimizer, options):
    """The CLI's Job: defaults a user would pick (``capacity.make_job``), stated by
    ``_assumed`` in the output; the optimizer's is RunSpec's, the one --help shows."""
    from ..capacity import make_job

    return make_job(model, gbs, seq, dtype, optimizer or RunSpec.optimizer, options)[0]


def _assumed(model, seq, dtype) -> dict[str, str]:
    """What the output must say it assumed: the defaults taken for flags not given."""
    from ..capacity import default_dtype, default_sequence
    from ..model.spec import get_model

    if model is None:
        return {}
    out = {}
    if dtype is None:
        value, why = default_dtype(model)
        out["dtype"] = f"{value} ({why})"
    if seq is None:
        out["seq"] = default_sequence(get_model(model))[1]
    return out


def _notes(job, missing=None, given: str = "flags", plan=None) -> list[str]:
    """The lines the output adds after 'Assumed': a sequence beyond the model's positions, MTP
    modules the model leaves out, a GPU without a price where the plan puts it (``missing``;
    the fixes fit how the plan was ``given``: 'flags' or a 'plan' file), and a price quoted for
    another region of ``plan``'s provider."""
    from ..capacity import model_notes, price_note, region_price_notes

    notes = model_notes(job)
    if missing is not None:
        notes.append(price_note(missing, given))
    if plan is not None:
        notes += region_price_notes(plan, "flags")
    return notes


def _simulator(sailor_root: Path | None, profiles: Path | None):
    from ..profiles.files import BUILT_IN_PROFILES, empty_folder_warning
    from ..simulate.simulator import Simulator

    instead = BUILT_IN_PROFILES if sailor_root is None else "the --sailor-root profiles alone"
    for path, flag in ((profiles, "--profiles"), (sailor_root, "--sailor-root")):
        if path is not None:  # named by its flag, not the library's parameter
            inputs.folder(path, flag)
    if warning := empty_folder_warning(profiles, "--profiles", instead):
        typer.echo(warning, err=True)  # a folder without profiles is not silently no folder
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
    options,
    option_flags: tuple[str, ...] = (),
):
    """The job and plan of a plan file (its job, else the flags') or of --sailor-plan.
    ``option_flags``: the execution-option flags given, each a clash with the file's job."""
    from ..original import read_sailor_plan
    from ..spec.job import Job
    from ..spec.plan import Plan

    if (plan_file is None) == (sailor_plan is None):
        raise ValidationError(
            "give a plan file, --sailor-plan FILE, or --gpu with --tp/--pp/--dp/--mbs (exactly "
            "one)",
            field="plan",
        )
    if sailor_plan is not None:
        record = read_sailor_plan(sailor_plan)
        if model is None:
            raise ValidationError("--model is required with --sailor-plan", field="model")
        job = _job(model, gbs or record.global_batch_size, seq, dtype, optimizer, options)
        return job, record.plan
    data = inputs.load_json(plan_file, "plan")
    if "plan" in data:
        job = Job.from_dict(data["job"]) if "job" in data else None
        plan = Plan.from_dict(data["plan"])
    else:
        job, plan = None, Plan.from_dict(data)
    if job is not None:  # the file's job wins only when no flag contradicts it
        flags = {"--model": model, "--gbs": gbs, "--seq": seq, "--dtype": dtype}
        flags.update(dict.fromkeys(option_flags, True))
        inputs.refuse_overrides({**flags, "--optimizer": optimizer}, f"{plan_file}")
    else:
        if model is None or gbs is None:
            raise ValidationError("the plan file has no 'job'; pass --model and --gbs", field="job")
        job = _job(model, gbs, seq, dtype, optimizer, options)
    return job, plan


_NEEDED = {
    "--model": "a catalog model or the path of a Hugging Face config.json",
    "--gbs": "the global batch size: samples per iteration over all replicas",
}


@dataclass(frozen=True)
class Homogeneous:
    """The --gpu/--tp/--pp/--dp/--mbs plan of ``simulate`` (no plan file)."""

    gpu: str
    tp: int
    pp: int
    dp: int
    mbs: int
    zone: str | None
    provider: str | None
    region: str | None
    split: str | None

    def placement(self) -> str:
        from ..catalog.zones import default_zone, get_zone

        if self.zone is not None:
            zone = get_zone(self.zone)
            if self.provider not in (None, zone.provider):
                raise ValidationError(
                    f"zone {zone.name} is on {zone.provider}, not {self.provider}", field="zone"
                )
            if self.region not in (None, zone.region):
                raise ValidationError(
                    f"zone {zone.name} is in {zone.region}, not {self.region}; give the zone or "
                    "the region",
                    field="zone",
                )
            return zone.name
        if self.provider is None and self.region is None:
            return default_zone("gcp")
        return default_zone(self.provider, self.region)


def _homogeneous_job_and_plan(h: Homogeneous, sim, model, gbs, seq, dtype, optimizer, options):
    from ..spec.quickplan import homogeneous_plan, parse_split

    for flag, value in (("--model", model), ("--gbs", gbs)):
        if value is None:  # the plan's job: no RunSpec default stands in for it
            raise ValidationError(f"is required with --gpu ({_NEEDED[flag]})", field=flag)
    job = _job(model, gbs, seq, dtype, optimizer, options)
    plan = homogeneous_plan(
        sim, job, h.gpu, h.placement(), tp=h.tp, pp=h.pp, dp=h.dp, mbs=h.mbs,
        split=parse_split(h.split),
    )  # fmt: skip
    return job, plan


@app.command()
@specs.with_spec(RunSpec, exclude=TRAINING_ONLY, no_default=("model", "global_batch_size"))
def simulate(
    spec: RunSpec,
    given: frozenset,
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
    gpu: str = typer.Option(None, help="Homogeneous plan without a file: the GPU type."),
    tp: int = typer.Option(1, help="With --gpu: tensor-parallel degree."),
    pp: int = typer.Option(1, help="With --gpu: pipeline stages."),
    dp: int = typer.Option(1, help="With --gpu: data-parallel replicas."),
    mbs: int = typer.Option(1, help="With --gpu: microbatch size."),
    split: str = typer.Option(
        None, help="With --gpu: layer split 'even' (default), 'balanced' or counts like 9,8,8,9."
    ),
    zone: str = typer.Option(None, help="With --gpu: the zone (default: from --provider)."),
    provider: str = typer.Option(
        None, help="With --gpu: gcp, aws or azure (its default region); default gcp."
    ),
    region: str = typer.Option(None, help="With --gpu: a region, e.g. us-east-1."),
    compare: str = typer.Option(
        "gcp,aws,azure",
        help="Providers whose $/hour for the plan's GPUs to list ('' = none); a row 'other' "
        "adds a price from outside the clouds (a rental, --catalog) where a GPU has one.",
    ),
    iterations: float = typer.Option(None, help="Whole-run figures for this many iterations."),
    tokens: float = typer.Option(None, help="Whole-run figures for this many tokens."),
    p2p: P2p = None,
    fabric: FabricFlag = None,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    plot: Annotated[
        Path | None, typer.Option(help="Also draw the memory breakdown per stage to this PNG.")
    ] = None,
) -> None:
    """Predict iteration time, throughput, MFU, peak memory per GPU and cost of a plan."""
    from ..simulate import metrics

    try:
        for name, value in (("iterations", iterations), ("tokens", tokens)):
            if value is not None:
                inputs.positive_number(value, f"--{name}")
        if iterations is not None and tokens is not None:
            raise ValidationError(
                "give --iterations or --tokens, not both (the run's length, counted one way)",
                field="--tokens",
            )
        model, gbs, seq, dtype, optimizer, options = _job_flags(spec, given, p2p)
        sim = _simulator(sailor_root, profiles)
        if fabric is not None:
            from ..catalog.cluster import resolve_cluster

            sim.network.set_cluster(resolve_cluster(fabric))
        if gpu is not None:
            if plan_file is not None or sailor_plan is not None:
                raise ValidationError("give --gpu or a plan file, not both", field="plan")
            h = Homogeneous(gpu, tp, pp, dp, mbs, zone, provider, region, split)
            job, plan = _homogeneous_job_and_plan(
                h, sim, model, gbs, seq, dtype, optimizer, options
            )
        else:
            job, plan = _load_plan_and_job(
                plan_file, sailor_plan, model, gbs, seq, dtype, optimizer, options,
                _option_flags(given, p2p),
            )  # fmt: skip
        estimate, missing = estimate_maybe_unpriced(
            sim, job, plan, iterations=iterations, tokens=tokens
        )
        notes = _notes(job, missing, "flags" if gpu is not None else "plan", plan)
        rate = metrics.throughput(job, plan, estimate)
        providers = [p.strip() for p in compare.split(",") if p.strip()]
        by_provider = metrics.cost_by_provider(plan, providers)
        inputs.check_finite(estimate.to_dict(memory=False), "estimate")  # bytes are ints
        network = describe_network(sim.network, plan)
        if plot is not None:
            from .plots import memory_png

            memory_png(estimate, plot, f"{job.model.name} on {plan.num_gpus} GPUs: peak memory")
    except (SailorSimError, OSError) as exc:
        fail(exc)
    if as_json:
        out = estimate.to_dict()
        out["throughput"] = rate.to_dict()
        out["provenance"] = metrics.provenance(estimate.sources, job, plan)
        out["cost_by_provider"] = by_provider
        out["network"] = network
        out["plan"] = plan.to_dict()
        out["job"] = job.to_dict()
        out["assumed"] = _assumed(model, seq, dtype)
        out["notes"] = notes
        typer.echo(json.dumps(out))
        return
    typer.echo(f"Job: {job.model.name}, global batch {job.global_batch_size}, "
               f"sequence {job.sequence_length}, {job.dtype}")  # fmt: skip
    echo_wrapped(f"Plan: {plan.describe()} ({plan.num_gpus} GPUs)")
    typer.echo(f"Options: {job.options.describe()}")
    for line in network:
        echo_wrapped(f"Network: {line}")
    for name, why in _assumed(model, seq, dtype).items():
        echo_wrapped(f"Assumed {name}: {why}")
    for note in notes:
        echo_wrapped(f"Note: {note}")
    print_estimate(estimate, rate, by_provider, metrics.provenance(estimate.sources, job, plan))


@app.command()
@specs.with_spec(RunSpec, exclude=(*TRAINING_ONLY, "global_batch_size"), no_default=("model",))
def memory(
    spec: RunSpec,
    given: frozenset,
    gpu: str = typer.Option(..., help="GPU type, e.g. A100-40."),
    tp: int = typer.Option(1, help="Tensor-parallel degree."),
    pp: int = typer.Option(1, help="Pipeline stages (layer ids split evenly)."),
    mbs: int = typer.Option(1, help="Microbatch size."),
    num_microbatches: int = typer.Option(None, help="Microbatches per iteration (default: pp)."),
    dp: int = typer.Option(1, help="Data-parallel replicas (adds the DP communicator)."),
    stage: int = typer.Option(None, help="Only this stage (0-based)."),
    sailor_root: Annotated[
        Path | None, typer.Option(help="Folder laid out like a Sailor checkout.")
    ] = None,
    profiles: Annotated[
        Path | None, typer.Option(help="Folder of sailor-sim profile files.")
    ] = None,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Will this model fit on this GPU with this TP / PP / microbatch size, and by how much?"""
    from ..catalog.gpus import get_gpu
    from ..spec.plan import even_split

    try:
        model, _, seq, dtype, optimizer, options = _job_flags(spec, given)
        if model is None:
            raise ValidationError("is required: a catalog model or a config.json", field="--model")
        ep, cp = options.expert_parallel, options.context_parallel
        job = _job(model, 1, seq, dtype, optimizer, options)
        gpu_type = get_gpu(gpu)
        job.model.check_tp(tp)
        check_replica(job.options, gpu_type, job.dtype, tp, pp, job.local_sequence_length)
        if tp > gpu_type.gpus_per_node:
            raise ValidationError(
                f"TP {tp} exceeds the {gpu_type.gpus_per_node} GPUs of a {gpu_type.name} node",
                field="tp",
            )
        for name, value in (("--mbs", mbs), ("--dp", dp), ("--pp", pp), ("--tp", tp)):
            inputs.integral(value, name)
        if num_microbatches is not None:
            inputs.integral(num_microbatches, "--num-microbatches")
        for option, degree in (("expert_parallel", ep), ("context_parallel", cp)):
            if dp % degree:  # their groups are made of the stage's replicas
                raise ValidationError(
                    f"{degree} does not divide the {dp} replicas (--dp); use --dp a multiple "
                    f"of {degree}",
                    field=f"options.{option}",
                )
        sizes = even_split(job.model.num_layer_ids, pp)
        if stage is not None and not 0 <= stage < pp:
            raise ValidationError(f"must be in 0..{pp - 1}", field="stage")
        m = num_microbatches or pp
        _check_interleave(job, sizes, m)
        sim = _simulator(sailor_root, profiles)
        rows, first = [], 0
        for i, size in enumerate(sizes):
            last = first + size - 1
            if stage is None or stage == i:
                terms = sim.replica_memory(
                    job, StageSlice(first, last, gpu_type.name, tp, mbs), i, pp, m, dp
                )
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
    notes = _notes(job)
    if as_json:
        out = {"model": job.model.name, "gpu_type": gpu_type.name, "stages": rows, "notes": notes}
        typer.echo(json.dumps(out))
        return
    typer.echo(f"{job.model.name} on {gpu_type.name}: TP {tp}, PP {pp}, mbs {mbs}, {job.dtype}")
    typer.echo(f"Options: {job.options.describe()}")
    for name, why in _assumed(model, seq, dtype).items():
        typer.echo(f"Assumed {name}: {why}")
    for note in notes:
        echo_wrapped(f"Note: {note}")
    terms = list(rows[0]["breakdown_bytes"])
    table(
        [
            "stage",
            "layers",
            "peak GiB",
            "cap GiB",
            "fits",
            "headroom GiB",
            *(TERM_HEADERS.get(t, t) for t in terms),
        ],  # fmt: skip
        [
            (
                r["stage"],
                f"{r['layers'][0]}-{r['layers'][1]}",
                f"{r['peak_bytes'] / GiB:.2f}",
                f"{r['capacity_bytes'] / GiB:.1f}",
                "yes" if r["fits"] else "NO",
                f"{r['headroom_bytes'] / GiB:+.2f}",
                *(f"{r['breakdown_bytes'][t] / GiB:.2f}" for t in terms),
            )
            for r in rows
        ],
    )


def _check_interleave(job, sizes: list[int], num_microbatches: int) -> None:
    """The interleaving rule ``simulate`` applies (``spec.interleave``), on ``memory``'s even
    split: a schedule that cannot run has no memory to report."""
    from ..spec import interleave

    v, pp = job.options.virtual_stages, len(sizes)
    problem = interleave.microbatch_problem(v, pp, num_microbatches, 0)
    first = 0
    for i, size in enumerate(sizes):
        head = job.model.head_layer_id
        problem = problem or interleave.stage_problem(i, first, first + size - 1, head, v)
        first += size
    if problem is not None:
        raise ValidationError(problem, field=interleave.FIELD)


@app.command()
def demo() -> None:
    """The built-in example: OPT-350M, global batch 1024, A100-40 + V100-16 in two zones."""
    from ..simulate.simulator import Simulator
    from ..spec.examples import example_inventory, example_job, example_plan

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
    from .. import __version__

    typer.echo(__version__)


def main() -> None:
    """The ``sailor-sim`` entry point: any error is one line on stderr, never a traceback."""
    inputs.run_app(app, "sailor-sim")


_register_catalog_commands(app)

if __name__ == "__main__":
    main()
