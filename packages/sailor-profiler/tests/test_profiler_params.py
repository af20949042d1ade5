"""Parameter counts of the zoo layers the profiler measures equal ModelSpec's accounting."""

from __future__ import annotations

import pytest

from sailor_profiler.compute.measure import params_per_layer
from sailor_profiler.zoo import build_stage
from sailor_sim import MODEL_CATALOG, get_model

SMALL_ENOUGH_FOR_CPU = 1e9  # parameters; OPT-350M and the tiny models


@pytest.mark.parametrize("model", sorted(MODEL_CATALOG))
def test_meta_device_counts_match_for_every_catalog_model(model):
    spec = get_model(model)
    for tp in spec.tp_degrees(limit=8):
        counts = params_per_layer(model, tp)
        assert counts == {i: spec.params(i, tp) for i in range(spec.num_layer_ids)}, tp


SMALL_MODELS = [
    m for m, s in sorted(MODEL_CATALOG.items()) if s.total_params() < SMALL_ENOUGH_FOR_CPU
]


@pytest.mark.parametrize("model", SMALL_MODELS)
def test_real_cpu_layers_match(model):
    spec = get_model(model)
    for tp in (1, 2):
        for tp_rank in range(tp):
            for lid in (0, 1, spec.head_layer_id):  # one layer of each kind (blocks are alike)
                layer = build_stage(spec, lid, lid, tp_rank, tp, seed=None).layers[str(lid)]
                assert sum(p.numel() for p in layer.parameters()) == spec.params(lid, tp)
