"""Profiling a few blocks and copying them to the rest (``--blocks K``)."""

from __future__ import annotations

from sailor_profiler.compute.measure import ComputeConfig, full_model_seconds, profile_rank
from sailor_profiler.compute.sweep import to_entries
from sailor_profiler.devices import DeviceSpec
from sailor_sim import get_model


def test_blocks_are_copied_with_a_note_and_exact_parameters():
    spec = get_model("tiny-llama")
    cfg = ComputeConfig(
        "tiny-llama", DeviceSpec("cpu"), mbs=(1, 2), seq_len=32, warmup=0, reps=1, blocks=2
    )
    rows = profile_rank(cfg)
    assert [r.layer_id for r in rows if r.mbs == 1] == list(range(spec.num_layer_ids))
    for r in rows:
        assert r.params == spec.params(r.layer_id)
        copied = r.note.startswith("copied from layer")
        assert copied == (3 <= r.layer_id <= spec.num_layers)
    by_key = {(r.layer_id, r.mbs): r for r in rows}
    assert by_key[(5, 2)].fwd == by_key[(1, 2)].fwd and by_key[(4, 1)].bwd == by_key[(2, 1)].bwd
    entries, records = to_entries(rows, cfg, "CPU", {})
    assert len(entries) == 2 and all(len(e.layers) == spec.num_layer_ids for e in entries)
    assert all("copied" in r.note for r in records)


def test_full_model_measurement_runs():
    cfg = ComputeConfig("tiny-gpt", DeviceSpec("cpu"), seq_len=32, warmup=0, reps=2)
    stat = full_model_seconds(cfg, 1)
    assert stat.n == 2 and stat.median > 0
