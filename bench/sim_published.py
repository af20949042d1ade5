"""Simulator accuracy on published training runs (``sailor_sim/data/published_runs.json``).

Every row of the table (llm-foundry MPT benchmarks, torchtitan Llama runs, Megatron-LM
arXiv 2205.05198 Table 5, NVIDIA's DGX Cloud GPT-3 recipe, FlashAttention's GPT-3 training
table, BigScience's BLOOM-176B log, IBM's fms-fsdp Llama table, TinyLlama's README, the
DeepSpeed MT-NLG 530B paper, Ai2's OLMo-core throughput table; each row names its source and
quotes it) is predicted by the simulator with the
analytic profile of its GPU and its execution options, *then* compared with what was published:
tokens/s per GPU (or the iteration time, converted) and peak memory where published. Three
tables: (a) uncalibrated (the compute efficiencies fitted on OPT-350 fp32 profiles), (b) the
calibration of ``sailor_sim/data/compute_efficiency.json`` (fitted on all rows: in-sample), and
(c) leave-one-source-out: each independent source predicted with efficiencies fitted on the
other sources (a source is a document: torchtitan's A100 and H100 tables, one document, are held
out together and count once; ``published.document``).

``--fit`` refits the calibration on every row and rewrites ``compute_efficiency.json`` with the
data it was fitted on and its in-sample and leave-one-source-out errors.

Exits 1 when a row cannot be predicted (an execution option the simulator cannot express yet is
named, never silently ignored), when the table is missing, or when a bar of issue 21 is missed
on the leave-one-source-out table: throughput mean |error| <= 12 % and worst <= 35 %, each GPU
family (Ampere, Hopper) <= 15 % mean, memory mean <= 10 % where published, over >= 8
independent sources of the kinds the issue allows for fitting (documents, not table sources).

The rows are predicted with the CLI's rules: the fabric a source states goes in as ``--fabric``
would (``cluster.Cluster``), every ring at that fabric's bus efficiency (``comm``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass

from sailor_sim import Job, Plan, Simulator, fabric_for
from sailor_sim.catalog.cluster import Cluster
from sailor_sim.catalog.gpus import GPU_CATALOG, register_gpu
from sailor_sim.catalog.prices import set_price
from sailor_sim.errors import SailorSimError
from sailor_sim.profiles import analytic, published, trust
from sailor_sim.simulate import comm
from sailor_sim.simulate.memory import framework_overhead
from sailor_sim.simulate.network import DEFAULT_INTER_NODE_LATENCY_S, NetworkModel

TARGET_THROUGHPUT, TARGET_WORST, TARGET_FAMILY, TARGET_MEMORY = 0.12, 0.35, 0.15, 0.10
MIN_SOURCES = 8
"""Issue 21's done-bar (leave-one-source-out): mean, worst, per-family mean, memory mean, and
the number of independent sources it must hold over."""
BAR_FAMILIES = ("ampere", "hopper")
ZONE = "us-central1-a"
NEUTRAL_OPTIONS = {
    "recompute": "none",
    "zero": "none",
    "sequence_parallel": False,
    "flash_attention": False,
    "virtual_stages": 1,
    "grad_dtype": "fp32",
}
"""The table's options (sailor-sim's ExecutionOptions vocabulary) at their neutral values."""


@dataclass(frozen=True)
class Prediction:
    run: published.PublishedRun
    tokens_per_s_per_gpu: float
    peak_memory_bytes: float
    missing: tuple[str, ...]
    """Options the simulator could not express (the prediction ignores them)."""


def job_options(run: published.PublishedRun) -> tuple[dict, tuple[str, ...]]:
    """(Job keyword arguments for the row's options, options this Job cannot express). An
    option Job's ExecutionOptions does not know is refused by Job itself, naming it."""
    if "options" in {f.name for f in dataclasses.fields(Job)}:
        return {"options": dict(run.options)}, ()
    missing = tuple(f"{k}={v}" for k, v in run.options.items() if v != NEUTRAL_OPTIONS.get(k, v))
    return {}, missing


def fabric_of(run: published.PublishedRun) -> tuple[float, str]:
    """(bytes/s per GPU across nodes, name) of the row's fabric: as its source states it, else
    the catalog's default fabric of the GPU type (``sailor_sim.fabric_for``)."""
    stated = published.fabric(run.source, run.gpu)
    if stated is not None:
        return stated["gbps_per_gpu"] / 8 * 1e9, f"{stated['gbps_per_gpu']} Gb/s/GPU (source)"
    gpu = published.gpu_type(run.gpu)
    default = fabric_for(published.base_gpu_name(run.gpu))
    if default is None:
        return 0.0, "simulator default link"
    return default.bandwidth_per_gpu(gpu.gpus_per_node), f"{default.name} (catalog default)"


def network_for(run: published.PublishedRun, gpu_name: str) -> NetworkModel:
    """The row's inter-node fabric as the CLI's ``--fabric`` takes it (a ``cluster.Cluster``:
    each GPU of a node has its NIC share, the ring runs at the fabric kind's bus efficiency,
    ``comm.BUS_EFFICIENCY``). Given as the fabric between nodes, not as a whole-ring
    measurement, so rings stay hierarchical (NVLink inside a node, the fabric across). Rows
    whose source states no fabric keep the catalog default, as the CLI does without --fabric."""
    network = NetworkModel()
    stated = published.fabric(run.source, run.gpu)
    if stated is not None:
        gpus = published.gpu_type(run.gpu).gpus_per_node
        kind = stated.get("kind", comm.default_inter_node_kind(published.gpu_type(run.gpu)))
        network.set_cluster(
            Cluster(
                kind, gpus, stated["gbps_per_gpu"], gpus, gpus, "on-prem",
                DEFAULT_INTER_NODE_LATENCY_S, f"{run.source}: {stated['source']}",
            )
        )  # fmt: skip
    return network


def framework_split(blocks: int, pp: int) -> list[int] | None:
    """Layer ids per stage as Megatron-LM splits a pipeline (the only source with PP > 1):
    blocks / pp transformer blocks on every stage (Megatron requires num_layers divisible by
    the pipeline size), the embedding on the first stage and the head on the last (Narayanan et
    al. 2021, Sec. 2.2; megatron/core/transformer/transformer_block.py get_num_layers_to_build).
    An even split of all layer ids instead would put one more block on some stages (e.g. 4
    instead of 3 of the 530B model's 105 blocks over 35 stages) and make them the bottleneck."""
    if pp == 1 or blocks % pp:
        return None
    sizes = [blocks // pp] * pp
    sizes[0] += 1
    sizes[-1] += 1
    return sizes


def predict(run: published.PublishedRun) -> Prediction:
    gpu = published.gpu_type(run.gpu)
    if gpu.name not in GPU_CATALOG:  # a table variant (torchtitan's 500 W H100): its own name
        register_gpu(gpu)
        set_price(gpu.name, 0.0, source="sim_published: cost not compared")
    model = published.model_spec(run.model, run.seq)
    kwargs, missing = job_options(run)
    job = Job(model, run.global_batch, run.seq, run.dtype, "adamw", **kwargs)
    plan = Plan.uniform(
        job,
        gpu.name,
        ZONE,
        pp=run.pp,
        dp=run.dp,
        tp=run.tp,
        microbatch_size=run.microbatch,
        layer_split=framework_split(model.num_layers, run.pp),
    )
    estimate = Simulator(network=network_for(run, gpu.name)).estimate(job, plan)
    tps = run.tokens_per_iteration / estimate.iteration_time_s / run.gpus
    peak = estimate.peak_memory_bytes
    if published.memory_measure(run.source) == "allocator_reserved":
        peak -= framework_overhead(gpu).cuda_context  # what PyTorch's allocator never sees
    return Prediction(run, tps, peak, missing)


def predict_all(runs) -> tuple[list[Prediction], list[str]]:
    preds, failures = [], []
    for run in runs:
        try:
            preds.append(predict(run))
        except SailorSimError as exc:
            failures.append(f"{run.label}: {exc}")
    return preds, failures


def rel_error(pred: float, real: float) -> float:
    return (pred - real) / real


def throughput_errors(preds) -> list[float]:
    return [rel_error(p.tokens_per_s_per_gpu, p.run.measured_tokens_per_s_per_gpu()) for p in preds]


def memory_errors(preds) -> list[float]:
    return [
        rel_error(p.peak_memory_bytes, p.run.measured_peak_memory_bytes())
        for p in preds
        if p.run.measured_peak_memory_bytes() is not None
    ]


# ---- calibration -----------------------------------------------------------------------------
# The matmul efficiency of each family is the hardware's (analytic.HARDWARE_MATMUL_EFFICIENCY,
# a published GEMM benchmark, not fitted); what is fitted is the framework efficiency per
# (execution style, GPU family): the named ``framework`` term of the estimate.
Fits = dict[tuple[str, str], float]


def _hardware_table() -> dict:
    return {
        (fam, dtype): analytic.MatmulEfficiency(e, 1.0, source)
        for fam, (e, source) in analytic.HARDWARE_MATMUL_EFFICIENCY.items()
        for dtype in ("bf16", "fp16")
    }


def _with(fits: Fits | None) -> None:
    """Predict with the hardware efficiencies and these framework fits (None: uncalibrated,
    the per-GPU fp32 efficiencies of the original Sailor profiles)."""
    analytic.set_calibration({} if fits is None else _hardware_table())
    analytic.set_framework_efficiency({} if fits is None else fits)


def style_of(run: published.PublishedRun) -> str:
    return trust.execution_style(run.options.get("zero"))


def family_of(run: published.PublishedRun) -> str | None:
    return analytic.gpu_family(published.gpu_type(run.gpu))


def _loss(runs, key: tuple[str, str], efficiency: float) -> float:
    _with({key: efficiency})
    preds, _ = predict_all(runs)
    errs = [math.log(p.tokens_per_s_per_gpu / p.run.measured_tokens_per_s_per_gpu()) for p in preds]
    return sum(abs(e) for e in errs) / max(len(errs), 1)


def _golden(f, lo: float, hi: float, steps: int = 14) -> float:
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(steps):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


VALIDATION_ONLY_SOURCES = frozenset({"flash-attention", "ibm-fms-fsdp"})
"""Sources outside issue 21's list of kinds allowed for fitting (a kernel library's benchmark
table, a vendor's training-repository README): predicted and held out like every source, never
fitted on."""


def fittable(runs) -> list:
    """Rows whose every input is published and expressible, from a source allowed for fitting:
    only these train the efficiencies. A row predicted without, say, its recomputation, with
    an input its source does not state (its ``assumed`` list, e.g. the microbatch), or across
    nodes on a fabric its source does not state, would teach the fit to absorb the missing or
    guessed term."""
    return [
        r
        for r in runs
        if r.source not in VALIDATION_ONLY_SOURCES
        and not r.assumed
        and not job_options(r)[1]
        and (r.nodes == 1 or published.fabric(r.source, r.gpu))
    ]


def fit(runs) -> Fits:
    """Per (execution style, GPU family) of the fittable rows of ``runs``: the framework
    efficiency minimizing mean |log(predicted / measured)| throughput over them."""
    fits = {}
    runs = fittable(runs)
    keys = sorted({(style_of(r), family_of(r)) for r in runs if family_of(r) is not None})
    for key in keys:
        rows = [r for r in runs if (style_of(r), family_of(r)) == key]
        fits[key] = round(_golden(lambda x, rs=rows, k=key: _loss(rs, k, x), 0.2, 1.0), 4)
    return fits


def independent_sources(runs) -> set[str]:
    """The independent sources of ``runs``: their documents (``published.document``). Two table
    sources cut from one document (torchtitan's docs/performance.md at two commits, its A100
    and its H100 tables) are one source: the same authors, framework and measurement method."""
    return {published.document(r.source) for r in runs}


def leave_one_source_out(runs) -> list[Prediction]:
    """Each independent source (document) predicted with efficiencies fitted on the others.
    Held out per document rather than per table source: torchtitan-a100 predicted with a fit
    that saw torchtitan-h100 would have learned from the same document (same framework, same
    authors, same way of measuring), which is what leave-one-source-out means to exclude. The
    bar counts documents too (``independent_sources``), so the unit held out is the unit
    counted."""
    preds = []
    for doc in sorted(independent_sources(runs)):
        train = [r for r in runs if published.document(r.source) != doc]
        _with(fit(train))
        preds += predict_all([r for r in runs if published.document(r.source) == doc])[0]
    preds.sort(key=lambda p: p.run.index)
    return preds


# ---- report ----------------------------------------------------------------------------------
def print_rows(title: str, preds: list[Prediction]) -> None:
    print(f"\n### {title}\n")
    print(
        "| row | source | model | GPU | GPUs | fabric | TP/PP/DP | mbs | seq | options "
        "| tok/s/GPU pred | tok/s/GPU real | err | mem pred GiB | mem real GiB | err |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p in preds:
        r = p.run
        real = r.measured_tokens_per_s_per_gpu()
        mem_real = r.measured_peak_memory_bytes()
        opts = f"rc={r.options.get('recompute')} {r.options.get('zero')}"
        opts += " sp" if r.options.get("sequence_parallel") else ""
        opts += " *" if p.missing else ""
        mem = (
            f"{p.peak_memory_bytes / 2**30:.1f} | {mem_real / 2**30:.1f} | "
            f"{rel_error(p.peak_memory_bytes, mem_real):+.1%}"
            if mem_real
            else "- | - | -"
        )
        print(
            f"| {r.index} | {r.source} | {r.model} | {r.gpu} | {r.gpus} | "
            f"{fabric_of(r)[1] if r.nodes > 1 else '1 node'} | {r.tp}/{r.pp}/{r.dp} | "
            f"{r.microbatch} | {r.seq} | {opts} | {p.tokens_per_s_per_gpu:,.0f} | {real:,.0f} | "
            f"{rel_error(p.tokens_per_s_per_gpu, real):+.1%} | {mem} |"
        )


def summary(preds: list[Prediction]) -> dict[str, float]:
    t = [abs(e) for e in throughput_errors(preds)]
    m = [abs(e) for e in memory_errors(preds)]
    nan = float("nan")
    return {
        "throughput_mean": sum(t) / len(t) if t else nan,
        "throughput_max": max(t, default=nan),
        "memory_mean": sum(m) / len(m) if m else nan,
        "memory_max": max(m, default=nan),
        "rows": len(t),
        "memory_rows": len(m),
    }


def check_table(runs) -> list[str]:
    """Problems with the table itself: too few rows or sources, architectures whose parameter
    count differs from the count their source published."""
    problems = []
    if len(runs) < 30 or len({r.source for r in runs}) < 4:
        problems.append(f"{len(runs)} rows from {len({r.source for r in runs})} sources")
    for name in sorted({r.model for r in runs}):
        published_count = published.published_params(name)
        if published_count is not None:
            count, seq = published_count
            ours = published.model_spec(name, seq).total_params()
            if ours != count:
                problems.append(f"{name}: {ours:,} parameters, the source says {count:,}")
    return problems


def by_group(preds: list[Prediction]) -> dict:
    """Leave-one-source-out errors per (GPU family, precision, execution style) group and its
    widenings (``sailor_sim.profiles.trust``): what each estimate quotes as its trust."""
    rows = []
    for p in preds:
        r = p.run
        family = analytic.gpu_family(published.gpu_type(r.gpu))
        keys = trust.group_keys(family, r.dtype, trust.execution_style(r.options.get("zero")))
        real_mem = r.measured_peak_memory_bytes()
        mem = rel_error(p.peak_memory_bytes, real_mem) if real_mem else None
        rows.append(
            (keys, rel_error(p.tokens_per_s_per_gpu, r.measured_tokens_per_s_per_gpu()), mem)
        )
    return trust.summarize(rows)


def print_sources(loso: list[Prediction]) -> None:
    """Leave-one-source-out error of each source's rows: what the simulator, fitted on the
    other sources only, gets on the runs of a source it never saw."""
    print("\n### leave-one-source-out error per source\n")
    print(
        "| source | document (held out together) | publisher | rows | fittable rows "
        "| throughput mean | throughput worst |"
    )
    print("|---|---|---|---|---|---|---|")
    fitted = {r.index for r in fittable([p.run for p in loso])}
    for source in sorted({p.run.source for p in loso}):
        preds = [p for p in loso if p.run.source == source]
        errs = [abs(e) for e in throughput_errors(preds)]
        used = sum(p.run.index in fitted for p in preds)
        print(
            f"| {source} | {published.document(source)} | {published.publisher(source)} | "
            f"{len(preds)} | {used} | {sum(errs) / len(errs):.1%} | {max(errs):.1%} |"
        )


def print_groups(groups: dict) -> None:
    print("\n### leave-one-source-out error per group (family/precision/style)\n")
    print("| group | rows | throughput mean | throughput worst | memory mean |")
    print("|---|---|---|---|---|")
    for key, g in groups.items():
        mem = f"{g['memory_mean']:.1%}" if "memory_mean" in g else "-"
        print(
            f"| {key} | {g['rows']} | {g['throughput_mean']:.1%} | "
            f"{g['throughput_max']:.1%} | {mem} |"
        )


def write_calibration(runs, fits: Fits, uncalibrated, in_sample, loso, groups) -> None:
    doc = {
        "fit_data": (
            f"published_runs.json rows {[r.index for r in fittable(runs)]} "
            f"({', '.join(sorted({r.source for r in fittable(runs)}))})"
        ),
        "form": (
            "matmul efficiency = the hardware's (analytic.HARDWARE_MATMUL_EFFICIENCY, a "
            "published GEMM benchmark), bf16 and fp16; framework term = compute x (1 / "
            "framework_efficiency - 1), framework_efficiency fitted per style/family"
        ),
        "efficiency": {
            f"{fam}/{dtype}": {"e_max": round(e, 4), "knee_flops": 1.0, "source": source}
            for fam, (e, source) in analytic.HARDWARE_MATMUL_EFFICIENCY.items()
            for dtype in ("bf16", "fp16")
        },
        "framework_efficiency": {f"{style}/{fam}": f for (style, fam), f in fits.items()},
        "validation": {
            "uncalibrated": {k: round(v, 4) for k, v in uncalibrated.items()},
            "in_sample": {k: round(v, 4) for k, v in in_sample.items()},
            "leave_one_source_out": {k: round(v, 4) for k, v in loso.items()},
            "leave_one_source_out_by_group": groups,
        },
        "written_by": "bench/sim_published.py --fit",
    }
    analytic.CALIBRATION_FILE.write_text(json.dumps(doc, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        runs = published.load_runs()
    except SailorSimError as exc:
        print(f"sim_published: no published-run table: {exc}")
        return 1
    stored = dict(analytic.CALIBRATION), dict(analytic.FRAMEWORK_EFFICIENCY)
    problems = check_table(runs)

    _with(None)
    uncal, failures = predict_all(runs)
    fits = fit(runs)
    _with(fits if "--fit" in args else stored[1])
    if "--fit" not in args:
        analytic.set_calibration(stored[0])
    calibrated, _ = predict_all(runs)
    loso = leave_one_source_out(runs)
    analytic.set_calibration(stored[0])
    analytic.set_framework_efficiency(stored[1])

    print_rows("(a) uncalibrated", uncal)
    print_rows(
        "(b) calibrated, in-sample (" + ("refitted" if "--fit" in args else "stored fit") + ")",
        calibrated,
    )
    print_rows("(c) leave-one-source-out", loso)
    results = {
        "uncalibrated": summary(uncal),
        "in-sample": summary(calibrated),
        "leave-one-source-out": summary(loso),
    }
    print("\n| metric | uncalibrated | in-sample | leave-one-source-out | target |")
    print("|---|---|---|---|---|")
    for key, target in (
        ("throughput_mean", TARGET_THROUGHPUT),
        ("throughput_max", TARGET_WORST),
        ("memory_mean", TARGET_MEMORY),
        ("memory_max", None),
    ):
        cells = " | ".join(f"{results[m][key]:.1%}" for m in results)
        print(f"| {key.replace('_', ' ')} |{cells} | {f'<= {target:.0%}' if target else '-'} |")
    groups = by_group(loso)
    print_sources(loso)
    print_groups(groups)
    print(f"\nfitted framework efficiency per (style, family), all rows: {fits}")
    if "--fit" in args:
        write_calibration(
            runs,
            fits,
            results["uncalibrated"],
            results["in-sample"],
            results["leave-one-source-out"],
            groups,
        )
        print(f"wrote {analytic.CALIBRATION_FILE}")

    missing = [f"{p.run.label}: {', '.join(p.missing)}" for p in uncal if p.missing]
    bad = []
    if problems:
        bad.append("table: " + "; ".join(problems))
    if failures:
        bad.append(f"{len(failures)} rows failed: " + "; ".join(failures))
    if missing:
        bad.append(
            f"{len(missing)} rows predicted without options the simulator cannot "
            "express yet (marked *): " + "; ".join(missing)
        )
    loso_s = results["leave-one-source-out"]
    if not loso_s["throughput_mean"] <= TARGET_THROUGHPUT:
        bad.append(
            f"throughput mean error {loso_s['throughput_mean']:.1%} > 12% (leave-one-source-out)"
        )
    if not loso_s["throughput_max"] <= TARGET_WORST:
        bad.append(f"throughput worst error {loso_s['throughput_max']:.1%} > 35%")
    for family in BAR_FAMILIES:
        g = groups.get(f"{family}/*/*")
        if g is None or not g["throughput_mean"] <= TARGET_FAMILY:
            got = "no rows" if g is None else f"{g['throughput_mean']:.1%}"
            bad.append(f"{family} throughput mean error {got} > 15% (leave-one-source-out)")
    # Issue 21 counts independent sources of the kinds it allows for fitting: the validation-only
    # ones (VALIDATION_ONLY_SOURCES) are predicted like the others but do not count, and table
    # sources cut from one document count once (independent_sources). Publishers are printed
    # too: one organization may publish several documents (NVIDIA: a paper, a recipe README and,
    # with Microsoft, the MT-NLG paper); the bar counts documents, not organizations.
    allowed = [r for r in runs if r.source not in VALIDATION_ONLY_SOURCES]
    allowed_sources = len({r.source for r in allowed})
    independent = len(independent_sources(allowed))
    publishers = len({published.publisher(r.source) for r in allowed})
    print(
        f"\nsources: {len({r.source for r in runs})} in the table, {allowed_sources} of the kinds "
        f"issue 21 allows for fitting, {independent} of them independent (one per document: the "
        f"bar, >= {MIN_SOURCES}), from {publishers} publishers"
    )
    if independent < MIN_SOURCES:
        bad.append(f"{independent} independent allowed sources < {MIN_SOURCES}")
    if not loso_s["memory_mean"] <= TARGET_MEMORY:
        bad.append(f"memory mean error {loso_s['memory_mean']:.1%} > 10% (leave-one-source-out)")
    for line in bad:
        print(f"sim_published: FAIL: {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
