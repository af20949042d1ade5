"""Published training measurements (``data/published_runs.json``) and how to simulate them.

The table holds runs that others measured and published (MosaicML llm-foundry's benchmark
tables, torchtitan's performance docs, the Megatron-LM activation-recomputation paper, NVIDIA's
DGX Cloud recipes, FlashAttention's training README, BigScience's BLOOM log, IBM's fms-fsdp
README, TinyLlama's README, the MT-NLG 530B paper, Ai2's OLMo-core README), one row
per run with its source, the model, GPU, parallelism, precision, batch, sequence, execution
options and what was measured (tokens/s per GPU, iteration seconds, peak memory). Each source
names the exact document (repository commit or arXiv table), its ``document`` (sources cut from
one document share it and count as one independent source) and its ``publisher``.
``bench/sim_published.py`` predicts every row with the simulator before comparing, and
``analytic`` fits its compute efficiency on them (leave-one-source-out reported next to the
in-sample error).

This module only reads the table and turns a row into the simulator's inputs; it invents
nothing: a row whose option the simulator cannot express is reported by the caller, not guessed.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ..catalog.gpus import GiB, get_gpu
from ..errors import ValidationError
from ..model.spec import ModelSpec, get_model

DATA_FILE = Path(__file__).resolve().parents[1] / "data" / "published_runs.json"

# The table's own architecture families in ModelSpec's vocabulary (models the catalog holds are
# referenced by name instead). MPT as llm-foundry benchmarked it (scripts/train/yamls/pretrain/
# mpt-*.yaml on MPTConfig's defaults): learned positions, biases, LayerNorm with bias, GELU MLP,
# tied head -- the parameter counts then equal the benchmark README's NumParams exactly; the
# released checkpoints differ (ALiBi, no biases). Megatron GPT: the same layout.
_FAMILY = {
    "mpt": dict(family="mpt", position="learned", tie_word_embeddings=True),
    "gpt": dict(family="gpt", position="learned", tie_word_embeddings=True),
    # BLOOM (bigscience tr11-176B-ml README): ALiBi, a LayerNorm after the embedding, GELU,
    # biases, the head tied to the embedding.
    "bloom": dict(family="bloom", position="alibi", tie_word_embeddings=True, embedding_norm=True),
    # Llama 2 shapes as fms-fsdp builds them (LLaMAConfig): RoPE, RMSNorm, SwiGLU, no biases,
    # an untied head.
    "llama": dict(family="llama", position="rotary", norm="rmsnorm", mlp="swiglu", bias=False),
}


@dataclass(frozen=True)
class PublishedRun:
    """One published measurement (a row of ``published_runs.json``)."""

    index: int
    source: str
    model: str
    gpu: str
    nodes: int
    gpus: int
    tp: int
    pp: int
    dp: int
    precision: str
    """As published (e.g. 'amp_bf16', 'bf16 PURE', 'fp16 mixed (Megatron)')."""
    global_batch: int
    microbatch: int
    grad_accum: int
    seq: int
    options: dict[str, Any]
    """In ExecutionOptions' vocabulary: flash_attention, recompute ('none' | 'selective' |
    'full'), zero ('none' | 'zero3' = FSDP FULL_SHARD), sequence_parallel, virtual_stages
    (interleaved 1F1B), grad_dtype."""
    measured: dict[str, float]
    """tokens_per_s_per_gpu, iteration_s, mfu, peak_memory_gib: whichever was published."""
    note: str = ""
    assumed: tuple[str, ...] = ()
    """Inputs the source does not state (e.g. 'microbatch'), set to an assumed value: such a row
    is predicted and held out, never fitted on."""

    @property
    def label(self) -> str:
        return f"{self.source}#{self.index} {self.model} {self.gpu} x{self.gpus}"

    @property
    def dtype(self) -> str:
        """The simulator's training dtype for the published precision."""
        return "fp16" if "fp16" in self.precision else "bf16"

    @property
    def tokens_per_iteration(self) -> int:
        return self.global_batch * self.seq

    def measured_tokens_per_s_per_gpu(self) -> float | None:
        """Tokens/s per GPU as published, or derived from the published iteration time."""
        if "tokens_per_s_per_gpu" in self.measured:
            return float(self.measured["tokens_per_s_per_gpu"])
        if "iteration_s" in self.measured:
            return self.tokens_per_iteration / self.measured["iteration_s"] / self.gpus
        return None

    def measured_peak_memory_bytes(self) -> float | None:
        gib = self.measured.get("peak_memory_gib")
        return None if gib is None else gib * GiB


@cache
def _document(path: str = str(DATA_FILE)) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValidationError(f"cannot read {path} ({exc})", field="published_runs") from None


def sources(path: Path = DATA_FILE) -> dict[str, dict[str, str]]:
    return _document(str(path))["sources"]


def load_runs(path: Path = DATA_FILE) -> list[PublishedRun]:
    """Every row of the table, checked: each names a known source, model and GPU."""
    doc = _document(str(path))
    fields = {f.name for f in dataclasses.fields(PublishedRun)} - {"index"}
    runs = []
    for i, row in enumerate(doc["runs"]):
        unknown = set(row) - fields
        if unknown:
            raise ValidationError(f"row {i}: unknown keys {sorted(unknown)}", field="runs")
        row = {**row, "assumed": tuple(row.get("assumed", ()))}
        run = PublishedRun(index=i, **row)
        if run.source not in doc["sources"]:
            raise ValidationError(f"row {i}: unknown source {run.source!r}", field="source")
        if run.model not in doc["models"]:
            raise ValidationError(f"row {i}: unknown model {run.model!r}", field="model")
        if run.tp * run.pp * run.dp != run.gpus:
            raise ValidationError(
                f"row {i}: tp {run.tp} x pp {run.pp} x dp {run.dp} != {run.gpus} GPUs", field="gpus"
            )
        runs.append(run)
    return runs


def model_spec(name: str, seq: int, path: Path = DATA_FILE) -> ModelSpec:
    """The ModelSpec of a table model: a catalog model it names, or its own architecture;
    learned-position models get room for ``seq`` positions."""
    arch = _document(str(path))["models"][name]
    if "catalog" in arch:
        spec = get_model(arch["catalog"])
        return spec if seq <= spec.max_seq_len else dataclasses.replace(spec, max_seq_len=seq)
    return ModelSpec(
        name,
        num_layers=arch["layers"],
        hidden_size=arch["hidden"],
        num_heads=arch["heads"],
        num_kv_heads=arch["kv_heads"],
        ffn_hidden_size=arch["ffn"],
        vocab_size=arch["vocab"],
        max_seq_len=seq,
        **_FAMILY[arch["family"]],
    )


def published_params(name: str, path: Path = DATA_FILE) -> tuple[int, int] | None:
    """(parameter count, at sequence length) as the source published it, if it did."""
    arch = _document(str(path))["models"][name]
    if "num_params_published" not in arch:
        return None
    return arch["num_params_published"], arch["num_params_at_seq"]


def base_gpu_name(name: str, path: Path = DATA_FILE) -> str:
    """The catalog GPU a table variant is based on (the name itself for catalog GPUs)."""
    variant = _document(str(path)).get("gpus", {}).get(name)
    return get_gpu(variant["base"] if variant else name).name


def gpu_type(name: str, path: Path = DATA_FILE):
    """A catalog GPU, or a table variant of one (e.g. torchtitan's 96 GB HBM2e, 500 W H100)."""
    variant = _document(str(path)).get("gpus", {}).get(name)
    if variant is None:
        return get_gpu(name)
    base = get_gpu(variant["base"])
    return dataclasses.replace(
        base,
        name=name,
        memory_bytes=int(variant["memory_gib"] * GiB),
        memory_bandwidth=variant["memory_bandwidth_gbps"] * 1e9,
        source=variant["source"],
    )


def document(source: str, path: Path = DATA_FILE) -> str:
    """The document a source's figures come from (its ``document`` field; the source name when
    it has none). Sources cut from one document (torchtitan's docs/performance.md at two
    commits: ``torchtitan-a100``, ``torchtitan-h100``) share it: they are one independent
    source, not two."""
    return _document(str(path))["sources"][source].get("document") or source


def publisher(source: str, path: Path = DATA_FILE) -> str:
    """The organization that published a source (its ``publisher`` field)."""
    return _document(str(path))["sources"][source].get("publisher") or source


def memory_measure(source: str, path: Path = DATA_FILE) -> str:
    """What a source's peak memory counts: 'device' (nvidia-smi: CUDA context included, the
    simulator's peak) or 'allocator_reserved' (PyTorch's caching allocator: no context)."""
    return _document(str(path))["sources"][source].get("memory_measure", "device")


def fabric(source: str, gpu: str, path: Path = DATA_FILE) -> dict[str, Any] | None:
    """The inter-node fabric a source states for its runs on ``gpu`` (Gb/s per GPU), if any."""
    return _document(str(path)).get("fabrics", {}).get(f"{source}/{gpu}")
