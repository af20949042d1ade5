"""Zoo layers built from Hugging Face config.json models count what ModelSpec counts, and run.

Small configs of each family the reader knows (GeGLU, Q/K/V-only biases, OPT's extra position
rows, tied embeddings, padded vocabulary), written to a temporary folder.
"""

from __future__ import annotations

import json

import pytest
import torch

from sailor_profiler.compute.measure import params_per_layer
from sailor_profiler.zoo import build_stage
from sailor_sim import get_model

BASE = {"hidden_size": 64, "num_attention_heads": 8, "num_hidden_layers": 2}
CONFIGS = {
    "gemma": {
        **BASE,
        "model_type": "gemma",
        "intermediate_size": 128,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
        "vocab_size": 256,
    },
    "qwen2": {
        **BASE,
        "model_type": "qwen2",
        "intermediate_size": 128,
        "num_key_value_heads": 4,
        "max_position_embeddings": 64,
        "vocab_size": 300,
    },
    "opt": {
        **BASE,
        "model_type": "opt",
        "ffn_dim": 128,
        "max_position_embeddings": 64,
        "vocab_size": 250,
    },
    "gpt2": {
        "model_type": "gpt2",
        "n_embd": 64,
        "n_head": 8,
        "n_layer": 2,
        "n_positions": 64,
        "vocab_size": 250,
    },
    "gpt_neox": {  # the sequential variant: the zoo builds no parallel blocks (refused below)
        **BASE,
        "model_type": "gpt_neox",
        "use_parallel_residual": False,
        "intermediate_size": 128,
        "max_position_embeddings": 64,
        "vocab_size": 256,
    },
}


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_zoo_counts_and_runs_config_models(tmp_path, family):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS[family]))
    spec = get_model(str(path))
    for tp in (1, 2):
        assert params_per_layer(spec.name, tp) == {
            i: spec.params(i, tp) for i in range(spec.num_layer_ids)
        }
    stage = build_stage(spec, 0, spec.head_layer_id, 0, 1, seed=0)
    tokens = torch.randint(0, 250, (2, 16))
    x = stage.layers["0"](tokens)
    for lid in range(1, spec.head_layer_id):
        x = stage.layers[str(lid)](x)
    loss = stage.layers[str(spec.head_layer_id)](x, tokens)
    loss.backward()
    assert torch.isfinite(loss)


def test_zoo_refuses_architectures_it_does_not_build(tmp_path):
    """A mixture-of-experts config is simulated, but the zoo has no expert layers: building it
    must fail naming the feature, not train a dense model of other counts."""
    from sailor_sim import ValidationError

    moe = {
        **BASE,
        "model_type": "mixtral",
        "intermediate_size": 128,
        "num_key_value_heads": 4,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "max_position_embeddings": 64,
        "vocab_size": 256,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(moe))
    with pytest.raises(ValidationError, match="does not build moe") as e:
        build_stage(get_model(str(path)), 0, 1, 0, 1, seed=0)
    assert e.value.field == "model"


def test_zoo_refuses_a_parallel_residual_block(tmp_path):
    """Pythia's GPT-NeoX layer adds attention and MLP to the same input (Hugging Face's
    default ``use_parallel_residual``): the zoo's sequential block would train another model,
    so building it fails naming the feature."""
    from sailor_sim import ValidationError

    pythia = {k: v for k, v in CONFIGS["gpt_neox"].items() if k != "use_parallel_residual"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(pythia))
    with pytest.raises(ValidationError, match="does not build parallel_block"):
        build_stage(get_model(str(path)), 0, 1, 0, 1, seed=0)
