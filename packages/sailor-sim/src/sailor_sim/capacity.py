"""The capacity-planning API: one call answers "will this model, with these options, fit on
these GPUs, at what tokens/s, MFU and $/hour?".

```python
import sailor_sim
e = sailor_sim.estimate("LLaMA-3-8B", "H100-80", dp=8, gbs=64, seq=8192, dtype="bf16",
                        options={"zero": "zero3", "recompute": "selective"})
print(e.fits, e.tokens_per_s_per_gpu, e.mfu, e.cost_per_hour_usd["gcp"])
```

Solve-for helpers answer the inverse questions: the largest microbatch or sequence that fits,
and how long (and how many GPUs) a token budget takes. Every answer carries the assumptions it
made (``assumed``: defaults the caller did not give) and the trust of its numbers
(``provenance``: the validation error of the profile source behind it).

Defaults a user would pick, stated in ``assumed``: the dtype is the config.json's ``dtype``
(``torch_dtype`` in files saved before transformers 4.56; fp32 for catalog models, which have
none), the sequence length is the model's maximum capped at ``DEFAULT_MAX_SEQUENCE`` (a
long-context model's 131072 positions are a capability, not what it is trained at).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import inputs
from .errors import PriceUnavailableError, SailorSimError, ValidationError
from .model.spec import DEFAULT_MAX_SEQUENCE, ModelSpec, default_sequence, get_model  # noqa: F401 (API)
from .simulate.features.context_parallel import sequence_splits
from .simulate.result import Estimate
from .simulate.simulator import Simulator
from .spec.interleave import microbatch_step
from .spec.job import Job, check_fp8_precision
from .spec.options import ExecutionOptions

PROVIDERS = ("gcp", "aws", "azure")
_HF_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


@dataclass(frozen=True)
class CapacityEstimate:
    """One plan's predicted speed, memory and cost, with the assumptions behind it."""

    model: str
    gpu: str
    num_gpus: int
    plan: str
    """The plan in one line (``Plan.describe``)."""
    fits: bool
    iteration_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    """Achieved model TFLOP/s per GPU (6N + 12LHQT per token, PaLM App. B)."""
    mfu: float
    peak_memory_bytes: int
    memory_capacity_bytes: int
    memory_breakdown_bytes: dict[str, int]
    """The fullest GPU's memory by term (weights, grads, optimizer, activations, ...)."""
    time_breakdown_s: dict[str, float]
    cost_per_hour_usd: dict[str, float | None]
    """On-demand $/hour of the plan's GPUs per provider (None: the provider lacks the GPU)."""
    spot_cost_per_hour_usd: dict[str, float | None]
    provenance: list[dict[str, Any]]
    assumed: dict[str, str] = field(default_factory=dict)
    """Defaults chosen for the caller: field -> what and why."""
    notes: list[str] = field(default_factory=list)
    """What else the caller should know, one line each: no price for the GPU in the zone (the
    per-provider costs still come), a sequence beyond the model's positions."""
    job: Job | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "job"}
        out["job"] = self.job.to_dict() if self.job is not None else None
        return out

    def hours_for_tokens(self, tokens: float) -> float:
        """Wall-clock hours to train on ``tokens`` tokens at this throughput."""
        _positive(tokens, "tokens")
        return tokens / self.tokens_per_s / 3600.0


HF_DTYPE_KEYS = ("dtype", "torch_dtype")
"""Where a config.json states its weights' dtype, first found wins: transformers >= 4.56 saves
``dtype`` (huggingface/transformers#39782) and reads ``torch_dtype`` only from older files,
keeping ``dtype`` when a file has both."""


def default_dtype(model: str | ModelSpec) -> tuple[str, str]:
    """(dtype, reason): a config.json's ``dtype`` / ``torch_dtype`` (or a parsed one's), else
    fp32."""
    if isinstance(model, Mapping) and "model_type" in model:
        return _hf_dtype(model, "the config.json dict")
    if isinstance(model, str) and (model.endswith(".json") or _is_dir(model)):
        file = Path(model).expanduser()
        file = file / "config.json" if _is_dir(model) else file
        try:  # bounded, regular files only (never a FIFO); reading the model says what is wrong
            config = json.loads(inputs.read_text(file, "model"))
        except (SailorSimError, OSError, ValueError):
            config = None
        return _hf_dtype(config if isinstance(config, Mapping) else {}, file.name)
    return "fp32", "no torch_dtype in the model definition"


def _hf_dtype(config: Mapping[str, Any], where: str) -> tuple[str, str]:
    key = next((k for k in HF_DTYPE_KEYS if config.get(k) is not None), None)
    if key is None:
        return "fp32", "no torch_dtype in the model definition"
    raw = config[key]
    if isinstance(raw, str) and raw in _HF_DTYPES:
        return _HF_DTYPES[raw], f"{key} {raw!r} of {where}"
    # e.g. float8_e4m3fn: say why it was not taken
    why = f"{key} {str(raw)[:40]!r} of {where} is none of {', '.join(_HF_DTYPES)}"
    return "fp32", f"{why}; pass --precision to choose"


def _is_dir(model: str) -> bool:
    try:
        return Path(model).expanduser().is_dir()
    except (OSError, ValueError):  # a name too long for a path, or with a NUL
        return False


def make_job(
    model: str | ModelSpec,
    gbs: int,
    seq: int | None = None,
    dtype: str | None = None,
    optimizer: str = "adamw",
    options: ExecutionOptions | Mapping[str, Any] | None = None,
) -> tuple[Job, dict[str, str]]:
    """A Job with user-sensible defaults, and the defaults it chose (``assumed``)."""
    spec = get_model(model)
    check_fp8_precision(dtype, options)  # before the mapping becomes ExecutionOptions
    options = _options(options)
    assumed: dict[str, str] = {}
    if dtype is None:
        dtype, why = default_dtype(model)
        assumed["dtype"] = f"{dtype} ({why})"
    if seq is None:
        seq, why = default_sequence(spec)
        assumed["seq"] = why
    else:  # Job.create takes a falsy length (0, {}) as "the default": refuse it here
        seq = inputs.integral(seq, "seq")
    return Job.create(spec, gbs, seq, dtype, optimizer, options), assumed


def _options(options: ExecutionOptions | Mapping[str, Any] | None) -> ExecutionOptions:
    """``options`` as ExecutionOptions; a value that is no mapping (``options='zero3'``) is
    refused naming the field (``dict('zero3')`` was a raw ValueError)."""
    if isinstance(options, ExecutionOptions):
        return options
    if not isinstance(options, Mapping | None):
        raise ValidationError(
            f"must be a mapping of option names to values, e.g. {{'zero': 'zero3'}}, or "
            f"ExecutionOptions, got {options!r}",
            field="options",
        )
    return ExecutionOptions.from_dict(dict(options or {}))


def estimate(
    model: str | ModelSpec | Mapping[str, Any],
    gpu: str,
    *,
    gbs: int,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    mbs: int = 1,
    seq: int | None = None,
    dtype: str | None = None,
    optimizer: str = "adamw",
    options: ExecutionOptions | Mapping[str, Any] | None = None,
    zone: str | None = None,
    simulator=None,
) -> CapacityEstimate:
    """Predict a homogeneous plan (``pp`` stages x ``dp`` replicas of ``tp`` GPUs of ``gpu``,
    layers split evenly) for ``model`` (catalog name, config.json path or its parsed dict,
    ModelSpec). Raises a
    ``SailorSimError`` subclass naming the bad argument."""
    from .catalog.zones import default_zone
    from .simulate.metrics import cost_by_provider, provenance, throughput
    from .spec.quickplan import homogeneous_plan

    job, assumed = make_job(model, gbs, seq, dtype, optimizer, options)
    sim = simulator if simulator is not None else _default_simulator()
    if not isinstance(sim, Simulator):
        raise ValidationError(
            f"must be a sailor_sim.Simulator (or None: the built-in catalogs), got {sim!r:.60}",
            field="simulator",
        )
    if zone is None:
        zone = default_zone("gcp")
        assumed["zone"] = f"{zone} (gcp's default; fabric and $ follow the zone)"
    plan = homogeneous_plan(sim, job, gpu, zone, tp=tp, pp=pp, dp=dp, mbs=mbs)
    est, missing = estimate_maybe_unpriced(sim, job, plan)
    notes = model_notes(job)
    if missing is not None:
        notes.append(price_note(missing))
    notes += region_price_notes(plan)
    rate = throughput(job, plan, est)
    peak, capacity, breakdown = _fullest_gpu(sim, job, plan)
    by_provider = {r["provider"]: r for r in cost_by_provider(plan, list(PROVIDERS))}
    return CapacityEstimate(
        model=job.model.name,
        gpu=gpu,
        num_gpus=plan.num_gpus,
        plan=plan.describe(),
        fits=est.fits,
        iteration_time_s=est.iteration_time_s,
        tokens_per_s=rate.tokens_per_s,
        tokens_per_s_per_gpu=rate.tokens_per_s_per_gpu,
        tflops_per_gpu=rate.model_tflops_per_gpu,
        mfu=rate.mfu,
        peak_memory_bytes=est.peak_memory_bytes,
        memory_capacity_bytes=capacity,
        memory_breakdown_bytes=breakdown,
        time_breakdown_s=dict(est.time_breakdown_s),
        cost_per_hour_usd={p: r.get("usd_per_hour") for p, r in by_provider.items()},
        spot_cost_per_hour_usd={p: r.get("spot_usd_per_hour") for p, r in by_provider.items()},
        provenance=provenance(est.sources, job, plan),
        assumed=assumed,
        notes=notes,
        job=job,
    )


def _fullest_gpu(sim: Simulator, job: Job, plan) -> tuple[int, int, dict[str, int]]:
    """(peak, capacity, terms) of the plan's fullest GPU, from each stage's distinct replicas:
    ``Estimate.memory`` builds an entry per replica (a million for a 1M-GPU question)."""
    from .spec.plan import StageSlice

    best = None
    p = len(plan.stages)
    for i, stage in enumerate(plan.stages):
        d = len(stage.replicas)
        for r in {r._key: r for r in stage.replicas}.values():
            s, m = StageSlice.of(stage, r), r.num_microbatches
            peak, capacity = sim.replica_peak(job, s, i, p, m, d)
            if best is None or peak > best[0]:
                best = (peak, capacity, dict(sim.replica_memory(job, s, i, p, m, d)))
    return best


def estimate_maybe_unpriced(
    sim: Simulator, job: Job, plan, **run: Any
) -> tuple[Estimate, PriceUnavailableError | None]:
    """``sim.estimate(job, plan, **run)``, and None; or, when a GPU of the plan has no price in
    its zone, the estimate without cost (its cost fields None: time, memory and throughput do
    not depend on prices) and the error saying where the GPU is offered."""
    try:
        return sim.estimate(job, plan, **run), None
    except PriceUnavailableError as missing:
        # Its own cache: a zero price must not stay in ``sim``'s cached replicas.
        free = _PricelessSimulator(sim.profiles, sim.network).estimate(job, plan, **run)
        no_cost = {"cost_per_iteration_usd": None, "cost_per_hour_usd": None}
        return Estimate.fast({**free.__dict__, **no_cost, "cost_breakdown_usd": {}}), missing


class _PricelessSimulator(Simulator):
    """A simulator whose GPUs cost nothing (``usd_per_s`` is its only price lookup)."""

    def usd_per_s(self, gpu_type: str, zone: str, gpus: int = 1) -> float:
        return 0.0


_PLACE_FIX = {
    "api": "zone={zone!r}",
    "flags": "--provider {provider}",
    "plan": "a zone of {provider} in the plan (e.g. {zone})",
}
"""How a caller places the GPU where a provider offers it, by how the plan was given."""
_PRICE_FIX = {"api": "a price from set_price() or load_catalog()", "flags": "--catalog FILE"}


def price_note(missing: PriceUnavailableError, given: str = "api") -> str:
    """One line: which GPU has no price where, so no cost, and the fixes for a plan ``given``
    as 'api' arguments, CLI 'flags' (--gpu) or a 'plan' file."""
    from .catalog.zones import default_zone

    places = [
        _PLACE_FIX[given].format(provider=p, zone=default_zone(p)) for p in missing.offered_on
    ]
    fixes = [*places, _PRICE_FIX.get(given, _PRICE_FIX["flags"])]
    offered = f"on {', '.join(missing.offered_on)}" if missing.offered_on else "by no provider"
    return (
        f"no price for {missing.gpu_type} in {missing.zone} ({missing.provider}), so no cost; "
        f"it is offered {offered}: use {' or '.join(fixes)}"
    )


def region_price_notes(plan, given: str = "api") -> list[str]:
    """A line per (GPU type, zone) of ``plan`` priced at its provider's quoted region while
    placed in another: the built-in offers are list prices of one region per provider
    (``data/instances.json``), applied to every region of it; real regional prices differ."""
    from .catalog.prices import PRICE_CATALOG, prices_set
    from .catalog.zones import DEFAULT_REGIONS, get_zone

    given_here = {(gpu, region) for gpu, region, *_ in prices_set()}
    fix = {"api": "set_price(gpu, price, region={region!r})", "flags": "--catalog FILE"}
    notes = []
    for gpu, zone in sorted({(r.gpu_type, r.zone) for s in plan.stages for r in s.replicas}):
        z = get_zone(zone)
        quoted = DEFAULT_REGIONS.get(z.provider)
        if quoted in (None, z.region) or (gpu, z.region) in given_here:
            continue
        if z.region not in PRICE_CATALOG.get(gpu, {}):
            continue  # no price there: price_note says so
        notes.append(
            f"{gpu} in {z.region} is priced at {z.provider}'s {quoted} list price (the catalog "
            f"quotes one region per provider); {z.region}'s may differ: give it with "
            + fix.get(given, fix["flags"]).format(region=z.region)
        )
    return notes


def sequence_note(job: Job) -> str | None:
    """A line when the sequence is longer than a rotary model's positions (it needs RoPE
    scaling or a long-context variant: allowed, but worth saying), else None."""
    model, seq = job.model, job.sequence_length
    if model.position != "rotary" or seq <= model.max_seq_len:
        return None
    return (
        f"sequence {seq} is beyond the {model.max_seq_len} positions of {model.name} "
        "(max_position_embeddings): it needs RoPE scaling or a long-context variant"
    )


def mtp_note(job: Job) -> str | None:
    """A line when the config's multi-token-prediction modules are left out of the model
    (DeepSeek-V3 ``num_nextn_predict_layers``), with what they would add, else None."""
    model = job.model
    n = model.unmodelled_mtp_layers
    if not n:
        return None
    h = model.hidden_size
    each = model.params(model.num_layers) + 2 * h * h + 3 * h  # a block, eh_proj, 3 norms
    return (
        f"{n} multi-token-prediction module{'s' * (n > 1)} of {model.name} "
        f"(num_nextn_predict_layers) {'are' if n > 1 else 'is'} left out: each ~{each / 1e9:.1f}B "
        "parameters (a block and a 2h x h projection) and a pass of the shared LM head per "
        "token; parameters, FLOPs, memory and MFU are those of training without MTP"
    )


def window_note(job: Job) -> str | None:
    """A line when the sequence is longer than the model's sliding attention window, which is
    timed as full causal attention, else None."""
    window, seq = job.model.unmodelled_sliding_window, job.sequence_length
    if not window or seq <= window:
        return None
    return (
        f"{job.model.name} attends within a {window}-token sliding window (sliding_window, on "
        f"some or all layers), timed here as full causal attention over {seq} tokens: the "
        "attention time of those layers is over-counted"
    )


def model_notes(job: Job) -> list[str]:
    """The notes the model and sequence give an estimate (a sequence beyond the positions,
    MTP modules left out, a sliding window timed as full attention)."""
    notes = (sequence_note(job), mtp_note(job), window_note(job))
    return [note for note in notes if note]


def largest_microbatch(
    model, gpu: str, *, gbs: int, dp: int = 1, limit: int = 1024, **kwargs
) -> CapacityEstimate:
    """The estimate at the largest microbatch size (<= ``limit``, dividing the per-replica
    batch into a microbatch count the pipeline schedule runs) that fits in memory;
    ``ValidationError`` when even 1 does not fit."""
    kwargs.pop("mbs", None)
    gbs, dp, limit = _integers(gbs=gbs, dp=dp, limit=limit)
    options = kwargs["options"] = _options(kwargs.get("options"))
    per_replica = gbs * options.context_parallel // dp  # CP replicas take gbs x cp samples
    step = _microbatch_step(options, kwargs.get("pp", 1))
    sizes = [
        m
        for m in range(1, min(limit, per_replica) + 1)
        if per_replica % m == 0 and (per_replica // m) % step == 0
    ]
    # None runs (gbs < dp; fewer microbatches than interleaved stages): mbs 1's estimate
    # raises the rule that refuses it, naming the field and the fix.
    return _largest(
        lambda m: estimate(model, gpu, gbs=gbs, dp=dp, mbs=m, **kwargs),
        sizes or [1],
        "microbatch size",
    )


def largest_sequence(model, gpu: str, *, step: int = 256, **kwargs) -> CapacityEstimate:
    """The estimate at the longest sequence (a multiple of ``step`` up to the model's maximum,
    that context parallelism can split) that fits; ``ValidationError`` when even the shortest
    does not fit."""
    kwargs.pop("seq", None)
    (step,) = _integers(step=step)
    top = get_model(model).max_seq_len
    cp = _options(kwargs.get("options")).context_parallel
    # Only lengths context parallelism can cut: the rule refuses the others (an error, not a
    # size that does not fit, for lengths the caller never chose).
    lengths = [s for s in range(step, top + 1, step) if sequence_splits(cp, s)] or [top]
    return _largest(lambda s: estimate(model, gpu, seq=s, **kwargs), lengths, "sequence length")


def gpus_for_tokens(
    model, gpu: str, *, gbs: int, tokens: float, days: float, mbs: int = 1, max_dp: int = 4096,
    **kwargs,
) -> CapacityEstimate:  # fmt: skip
    """The estimate at the fewest data-parallel replicas (``dp``; the global batch is kept;
    only degrees leaving each pipeline a microbatch count its schedule runs) that train
    ``tokens`` tokens within ``days`` days and fit; ``ValidationError`` naming
    ``memory`` if no such dp fits at all, else naming ``days`` if none is fast enough."""
    _positive(tokens, "tokens")
    _positive(days, "days")
    kwargs.pop("dp", None)
    gbs, mbs, max_dp = _integers(gbs=gbs, mbs=mbs, max_dp=max_dp)
    options = kwargs["options"] = _options(kwargs.get("options"))
    # EP and CP groups are made of a stage's replicas; CP replicas take gbs x cp samples
    step = math.lcm(options.expert_parallel, options.context_parallel)
    samples = gbs * options.context_parallel
    per_pipeline = _microbatch_step(options, kwargs.get("pp", 1))
    smallest = None  # the estimate with the lowest peak memory: what the error reports
    for dp in range(step, max_dp + 1, step):
        if samples % (dp * mbs) or (samples // (dp * mbs)) % per_pipeline:
            continue
        e = estimate(model, gpu, gbs=gbs, mbs=mbs, dp=dp, **kwargs)
        if e.fits and e.hours_for_tokens(tokens) <= days * 24:
            return e
        if smallest is None or e.peak_memory_bytes < smallest.peak_memory_bytes:
            smallest = e
    if smallest is not None and not smallest.fits:
        raise ValidationError(
            f"{smallest.model} does not fit in {smallest.gpu} memory at any dp <= {max_dp} "
            f"dividing gbs {gbs} (at best {smallest.peak_memory_bytes / 2**30:.1f} of "
            f"{smallest.memory_capacity_bytes / 2**30:.1f} GiB per GPU, {smallest.plan}); "
            "split it with tp/pp, shard it with ZeRO or use recomputation (options)",
            field="memory",
        )
    raise ValidationError(
        f"no dp <= {max_dp} dividing gbs {gbs} trains {tokens:.3g} tokens in {days} days; "
        "raise gbs, max_dp or days",
        field="days",
    )


def _microbatch_step(options: ExecutionOptions, pp: Any) -> int:
    """What a pipeline's microbatch count must be a multiple of (``interleave.microbatch_step``:
    pp under interleaved 1F1B): the solve-for helpers skip the sizes and replica counts the
    schedule refuses, which are no answer, instead of raising its PlanError on the first one."""
    return microbatch_step(options.virtual_stages, inputs.integral(pp, "pp"))


def _largest(run, candidates: list[int], what: str) -> CapacityEstimate:
    # Memory grows with both knobs, so the fitting ones are a prefix: binary search it.
    lo, hi, best = 0, len(candidates) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        e = run(candidates[mid])
        if e.fits:
            best, lo = e, mid + 1
        else:
            hi = mid - 1
    if best is None:
        raise ValidationError(
            f"no {what} fits (tried down to {candidates[0]}); use more GPUs, tp/pp, ZeRO or "
            "recomputation",
            field=what.replace(" ", "_"),
        )
    return best


def _integers(**named: Any) -> list[int]:
    """The named integer arguments as ints, in order (``inputs.integral``: 2.5, "2" and True
    are refused with a ``ValidationError`` naming the argument)."""
    return [inputs.integral(value, name) for name, value in named.items()]


def _positive(value: float, name: str) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValidationError(f"must be a positive finite number, got {value!r}", field=name)


_SIMULATOR = None


def _default_simulator():
    """One built-in-catalog simulator per process (its caches pay off across calls)."""
    global _SIMULATOR
    if _SIMULATOR is None:
        _SIMULATOR = Simulator()
    return _SIMULATOR
