"""Property-based fuzzing (hypothesis) of every parser: a valid value or the package's own
error naming the field, never another exception, a crash or a hang (issue 13).

Inputs are arbitrary JSON and, reaching deeper, valid documents with a few values replaced or
removed (``mutated``). Examples per test: $SAILOR_FUZZ_EXAMPLES (default 60, derandomized so
`make test` is reproducible; raise it and drop derandomize locally to search harder).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sailor_profiler.cli import parse_bytes, parse_int_list
from sailor_profiler.errors import SailorProfilerError
from sailor_sim import Inventory, Job, Plan, SailorSimError, inputs
from sailor_sim.model.hf_config import fields_from_hf_dict
from sailor_sim.model.spec import ModelSpec
from sailor_sim.original import read_sailor_plan
from sailor_sim.profiles.files import parse_profile_dict, profile_file_dict
from sailor_sim.profiles.store import LayerProfile, ProfileEntry, ProfileKey
from sailor_sim.simulate.network import load_network_file
from sailor_sim.spec.examples import example_job, example_plan

EXAMPLES = int(os.environ.get("SAILOR_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

NASTY = st.sampled_from(
    [0, -1, 1, 2**31, 2**63, 2**64, -(2**63), 1e308, 2.5, 1.5, -0.0, math.inf, -math.inf]
) | st.just(math.nan)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | NASTY
    | st.text(max_size=12)
    | st.sampled_from(["", "A100-40", "us-central1-a", "tiny-gpt", "fp32", "2", "nan", "\x00"])
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw, valid: Any, max_changes: int = 3) -> Any:
    """``valid`` with up to ``max_changes`` values replaced by arbitrary JSON, or removed."""
    doc = copy.deepcopy(valid)
    for _ in range(draw(st.integers(0, max_changes))):
        path = draw(st.sampled_from(_paths(doc)))
        if not path:
            doc = draw(JSON)
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(JSON)
    return doc


def document(valid: Any):
    """Mostly near-valid documents, some arbitrary JSON."""
    return mutated(valid) | JSON


def accepts_or_refuses(parse, *args, errors=(SailorSimError,)):
    """Run a parser: a value or one of ``errors`` with a message; anything else fails."""
    try:
        return parse(*args)
    except errors as exc:
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        return None


JOB = example_job()
VALID_PLAN = example_plan().to_dict()
VALID_JOB = JOB.to_dict()
VALID_INVENTORY = {"pools": [{"gpu_type": "A100-40", "zone": "us-central1-a", "count": 8}]}
TINY = Job.create("tiny-gpt", 8, 128)
VALID_PROFILE = profile_file_dict(
    [
        ProfileEntry(
            ProfileKey("tiny-gpt", "A100-40", "fp32", 1, 1),
            128,
            tuple(LayerProfile(1e-3, 2e-3, 1e-4) for _ in range(TINY.model.num_layer_ids)),
            "measured",
        )
    ]
)
VALID_SAILOR_PLAN = {
    "mbs": 1,
    "gbs": 8,
    "pipeline_list": [
        {
            "layers_per_stage": [list(range(TINY.model.num_layer_ids))],
            "tmp_per_stage": [[[[["A100-40", 4, "us-central1-a"]], 1]]],
            "dp": [1],
        }
    ],
}
VALID_NETWORK = {
    "format": "sailor-network/1",
    "links": [
        {
            "src": {"zone": "local", "gpu_type": "CPU", "count": 1},
            "dst": {"zone": "local", "gpu_type": "CPU", "count": 1},
            "max_bandwidth": 4e9,
            "latency_s": 1e-4,
            "source": "measured: test",
        }
    ],
}
VALID_HF = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_act": "silu",
    "hidden_size": 256,
    "intermediate_size": 512,
    "max_position_embeddings": 1024,
    "model_type": "llama",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "tie_word_embeddings": False,
    "vocab_size": 1000,
}


@FUZZ
@given(document(VALID_PLAN))
def test_plan_from_dict(doc):
    plan = accepts_or_refuses(Plan.from_dict, doc)
    if plan is not None:
        accepts_or_refuses(plan.check, JOB)


@FUZZ
@given(document(VALID_JOB))
def test_job_from_dict(doc):
    accepts_or_refuses(Job.from_dict, doc)


@FUZZ
@given(document(VALID_INVENTORY) | document({"A100-40": {"us-central1-a": 8}}))
def test_inventory_from_dict(doc):
    accepts_or_refuses(Inventory.from_dict, doc)


@FUZZ
@given(st.lists(st.text(max_size=30) | st.just("A100-40@us-central1-a=1e400"), max_size=3))
def test_inventory_parse(specs):
    accepts_or_refuses(Inventory.parse, specs)


@FUZZ
@given(document(VALID_PROFILE))
def test_profile_file(doc):
    accepts_or_refuses(parse_profile_dict, doc, "fuzz")


@FUZZ
@given(document(VALID_SAILOR_PLAN))
def test_original_sailor_plan(doc):
    if isinstance(doc, dict):  # a non-dict is read as a path by this API
        accepts_or_refuses(read_sailor_plan, doc)


def spec_from_hf_dict(doc: dict, name: str) -> ModelSpec:
    """What get_model('config.json') does after reading the file: fields, then the spec."""
    return ModelSpec(**fields_from_hf_dict(doc, name))


@FUZZ
@given(document(VALID_HF))
def test_hugging_face_config(doc):
    if isinstance(doc, dict):
        accepts_or_refuses(lambda: ModelSpec(**fields_from_hf_dict(doc, "fuzz-model")))


@FUZZ
@given(doc=document(VALID_NETWORK))
def test_network_file(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("net") / "links.json"
    path.write_text(json.dumps(doc, allow_nan=True))
    accepts_or_refuses(load_network_file, path)


@FUZZ
@given(st.text(max_size=200) | st.builds(json.dumps, JSON) | st.just("[" * 5000))
def test_json_text(text):
    accepts_or_refuses(inputs.parse_json, text, "fuzz")


@FUZZ
@given(SCALARS | JSON)
def test_numbers(value):
    got = accepts_or_refuses(inputs.integral, value, "n")
    assert got is None or (isinstance(got, int) and got >= 1)
    got = accepts_or_refuses(inputs.positive_number, value, "x")
    assert got is None or (math.isfinite(got) and got > 0)


@FUZZ
@given(st.text(max_size=20))
def test_profiler_list_and_size_parsers(text):
    errors = (SailorProfilerError,)
    accepts_or_refuses(parse_int_list, text, "mbs", errors=errors)
    accepts_or_refuses(parse_bytes, text, "min_bytes", errors=errors)


def run_sailor_sim(args: list[str]) -> tuple[int, str]:
    """The sailor-sim CLI in this process (the console script's own entry, run_app)."""
    from sailor_sim.cli.app import app

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            inputs.run_app(app, "sailor-sim", args)
        except SystemExit as exc:
            return int(exc.code or 0), err.getvalue()
    return 0, err.getvalue()


@FUZZ
@given(
    doc=document({"job": VALID_JOB, "plan": VALID_PLAN}), flags=st.sampled_from([[], ["--json"]])
)
def test_sailor_sim_simulate_cli(tmp_path_factory, doc, flags):
    path: Path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(json.dumps(doc, allow_nan=True))
    code, err = run_sailor_sim(["simulate", str(path), *flags])
    assert code in (0, 2), err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err
