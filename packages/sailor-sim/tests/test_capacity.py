"""The capacity-planning API (``sailor_sim.estimate`` and the solve-for helpers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sailor_sim
from sailor_sim import SailorSimError
from sailor_sim.capacity import DEFAULT_MAX_SEQUENCE

FSDP = {"zero": "zero3", "recompute": "selective"}


def test_estimate_is_callable_and_consistent_with_the_simulator() -> None:
    e = sailor_sim.estimate("LLaMA-3-8B", "H100-80", dp=8, gbs=64, seq=8192, dtype="bf16",
                            options=FSDP)  # fmt: skip
    assert e.num_gpus == 8 and e.fits
    job = e.job
    assert job is not None and job.options.zero == "zero3"
    samples_per_s = job.global_batch_size / e.iteration_time_s
    assert e.tokens_per_s == pytest.approx(samples_per_s * 8192)
    assert e.tokens_per_s_per_gpu == pytest.approx(e.tokens_per_s / 8)
    assert 0 < e.mfu < 1 and e.tflops_per_gpu > 0
    assert sum(e.memory_breakdown_bytes.values()) == e.peak_memory_bytes
    assert sum(e.time_breakdown_s.values()) == pytest.approx(e.iteration_time_s)
    assert set(e.cost_per_hour_usd) == {"gcp", "aws", "azure"}
    assert e.cost_per_hour_usd["gcp"] > 0
    assert e.provenance and "trust" in e.provenance[0]
    json.dumps(e.to_dict())  # plain data all the way down


def test_defaults_come_from_the_config_and_are_stated(tmp_path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": 512, "intermediate_size": 1536, "num_attention_heads": 8,
        "num_hidden_layers": 4, "num_key_value_heads": 8, "vocab_size": 32000,
        "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
    }))  # fmt: skip
    e = sailor_sim.estimate(str(config), "A100-80", gbs=8)
    assert e.job.dtype == "bf16" and "torch_dtype" in e.assumed["dtype"]
    assert e.job.sequence_length == DEFAULT_MAX_SEQUENCE and "131072" in e.assumed["seq"]
    given = sailor_sim.estimate(str(config), "A100-80", gbs=8, seq=1024, dtype="fp32")
    assert "dtype" not in given.assumed and "seq" not in given.assumed


def test_largest_microbatch_is_the_boundary_of_fitting() -> None:
    kwargs = dict(
        gbs=256, seq=2048, dtype="bf16", dp=8, options={"zero": "zero3", "recompute": "full"}
    )
    best = sailor_sim.largest_microbatch("LLaMA-3-8B", "A100-40", **kwargs)
    mbs = int(best.plan.split("mbs")[1].split("]")[0])
    assert best.fits
    assert not sailor_sim.estimate("LLaMA-3-8B", "A100-40", mbs=2 * mbs, **kwargs).fits


def test_largest_sequence_and_gpus_for_tokens() -> None:
    s = sailor_sim.largest_sequence("LLaMA-3-8B", "A100-40", gbs=64, dp=8, dtype="bf16",
                                    options={"zero": "zero3"}, step=1024)  # fmt: skip
    assert s.fits and s.job.sequence_length % 1024 == 0
    g = sailor_sim.gpus_for_tokens("LLaMA-3-8B", "H100-80", gbs=512, seq=8192, dtype="bf16",
                                   tokens=1e11, days=30, options={"zero": "zero3"})  # fmt: skip
    assert g.fits and g.hours_for_tokens(1e11) <= 30 * 24


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(model="no-such-model", gpu="H100-80", gbs=8),
        dict(model="LLaMA-3-8B", gpu="H1000", gbs=8),
        dict(model="LLaMA-3-8B", gpu="H100-80", gbs=8, options={"zero": "zero9"}),
        dict(model="LLaMA-3-8B", gpu="H100-80", gbs=0),
    ],
)
def test_bad_input_is_a_typed_error(kwargs) -> None:
    with pytest.raises(SailorSimError):
        sailor_sim.estimate(**kwargs)


def test_no_solution_is_a_typed_error() -> None:
    with pytest.raises(SailorSimError, match="microbatch"):
        sailor_sim.largest_microbatch("LLaMA-3.1-70B", "V100-16", gbs=8, dtype="fp16")


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: sailor_sim.estimate("tiny-llama", "H100-80", gbs=64, tp=True), "tp"),
        (lambda: sailor_sim.estimate("tiny-llama", "H100-80", gbs=64, dp="8"), "dp"),
        (lambda: sailor_sim.estimate("tiny-llama", "H100-80", gbs=64, pp=2.5), "pp"),
        (lambda: sailor_sim.estimate("tiny-llama", "H100-80", gbs=64, mbs="1"), "mbs"),
        (lambda: sailor_sim.largest_microbatch("tiny-llama", "H100-80", gbs="64"), "gbs"),
        (lambda: sailor_sim.largest_microbatch("tiny-llama", "H100-80", gbs=64, dp="2"), "dp"),
        (lambda: sailor_sim.largest_microbatch("tiny-llama", "H100-80", gbs=64, limit="4"),
         "limit"),
        (lambda: sailor_sim.largest_sequence("tiny-llama", "H100-80", gbs=64, step=True), "step"),
        (lambda: sailor_sim.gpus_for_tokens("tiny-llama", "H100-80", gbs=64, tokens=1e6, days=1,
                                            max_dp="8"), "max_dp"),
    ],
)  # fmt: skip
def test_integer_arguments_refuse_bools_strings_and_fractions(call, field) -> None:
    """``True`` used to pass as 1 (a plan printing 'tpTrue') and "8" to reach a raw
    TypeError: every integer argument goes through ``inputs.integral``."""
    with pytest.raises(sailor_sim.ValidationError) as e:
        call()
    assert e.value.field == field


def test_a_whole_float_degree_becomes_an_int() -> None:
    assert "mbs1]" in sailor_sim.estimate("tiny-llama", "H100-80", gbs=64, mbs=1.0).plan


def test_gpus_for_tokens_says_the_model_does_not_fit_rather_than_blaming_days() -> None:
    with pytest.raises(sailor_sim.ValidationError, match="does not fit") as e:
        sailor_sim.gpus_for_tokens("LLaMA-3.1-70B", "H100", gbs=512, seq=4096, dtype="bf16",
                                   tokens=1e10, days=30)  # fmt: skip
    assert e.value.field == "memory"
    assert all(fix in str(e.value) for fix in ("tp/pp", "ZeRO", "recomputation"))
    with pytest.raises(sailor_sim.ValidationError) as slow:  # fits, but far too slow
        sailor_sim.gpus_for_tokens("tiny-llama", "H100", gbs=8, seq=512, dtype="bf16",
                                   tokens=1e15, days=1)  # fmt: skip
    assert slow.value.field == "days"


def test_a_gpu_without_a_price_in_the_zone_still_gets_an_estimate(prices_restored) -> None:
    """B200 is offered on aws only: the default (gcp) zone used to raise 'no price'."""
    e = sailor_sim.estimate("LLaMA-3.1-8B", "B200", dp=8, gbs=64, seq=8192, dtype="bf16")
    assert e.iteration_time_s > 0 and 0 < e.mfu < 1 and e.peak_memory_bytes > 0
    assert e.cost_per_hour_usd["gcp"] is None and e.cost_per_hour_usd["aws"] > 0
    (note,) = e.notes
    assert "no price for B200 in us-central1-a (gcp)" in note and "zone='us-east-1a'" in note
    sailor_sim.set_price("B200", 5.0, region="us-central1")  # the same plan, priced
    priced = sailor_sim.estimate("LLaMA-3.1-8B", "B200", dp=8, gbs=64, seq=8192, dtype="bf16")
    assert priced.notes == [] and priced.cost_per_hour_usd["gcp"] == 8 * 5.0
    assert priced.iteration_time_s == e.iteration_time_s and priced.mfu == e.mfu


def test_the_simulator_still_refuses_an_unpriced_plan() -> None:
    """What the planner relies on to skip pools it cannot price; and the estimate without
    cost must not leave a zero price in the simulator's caches."""
    from sailor_sim import Job, Plan, PriceUnavailableError, Simulator
    from sailor_sim.capacity import estimate_maybe_unpriced

    sim = Simulator()
    job = Job.create("tiny-llama", 8, 512, "bf16")
    plan = Plan.uniform(job, "A10G", "us-central1-a", dp=2, microbatch_size=1)
    with pytest.raises(PriceUnavailableError):
        sim.estimate(job, plan)
    free, missing = estimate_maybe_unpriced(sim, job, plan)
    assert free.cost_per_hour_usd is None and missing.gpu_type == "A10G"
    with pytest.raises(PriceUnavailableError):
        sim.estimate(job, plan)


def test_a_sequence_beyond_the_models_positions_is_noted() -> None:
    long = sailor_sim.estimate("LLaMA-2-7B", "H100-80", gbs=8, seq=8192, dtype="bf16")
    (note,) = long.notes
    assert "beyond the 4096 positions of LLaMA-2-7B" in note and "RoPE scaling" in note
    assert sailor_sim.estimate("LLaMA-2-7B", "H100-80", gbs=8, seq=4096, dtype="bf16").notes == []


MIXTRAL = str(Path(__file__).parents[3] / "examples" / "configs" / "mixtral-8x7b")


@pytest.mark.parametrize(
    "model, options, degree",
    [(MIXTRAL, {"expert_parallel": 8}, 8), ("LLaMA-3.1-8B", {"context_parallel": 2}, 2),
     (MIXTRAL, {"expert_parallel": 4, "context_parallel": 2}, 4)],
)  # fmt: skip
def test_gpus_for_tokens_searches_the_dp_degrees_the_options_allow(model, options, degree):
    """An EP or CP group is made of a stage's replicas, so dp must be a multiple of the degree;
    the search started at dp 1 and raised PlanError 'expert_parallel 8 does not divide the 1
    replicas' instead of answering. Under CP the replicas take gbs x cp samples."""
    e = sailor_sim.gpus_for_tokens(model, "H100", gbs=64, seq=4096, dtype="bf16", tokens=1e9,
                                   days=30, pp=4, options=options)  # fmt: skip
    assert e.fits and (e.num_gpus // 4) % degree == 0


def test_options_that_are_not_a_mapping_are_a_typed_error() -> None:
    """options='zero3' was a raw ValueError from dict('zero3')."""
    with pytest.raises(sailor_sim.ValidationError) as e:
        sailor_sim.estimate("tiny-llama", "H100-80", gbs=8, options="zero3")
    assert e.value.field == "options" and "zero" in str(e.value)


def test_largest_microbatch_counts_the_samples_context_parallelism_adds() -> None:
    """With cp 2 a replica takes gbs x cp / dp samples: gbs 8 on dp 8 gives each replica 2,
    so microbatch 2 is a candidate (the search stopped at gbs / dp = 1)."""
    e = sailor_sim.largest_microbatch("tiny-llama", "H100-80", gbs=8, dp=8, seq=128,
                                      dtype="bf16", options={"context_parallel": 2})  # fmt: skip
    assert e.plan.endswith("mbs2]")


def test_the_api_notes_a_price_quoted_for_another_region() -> None:
    e = sailor_sim.estimate("LLaMA-3.1-8B", "H100-80", gbs=8, dp=8, seq=2048,
                            zone="europe-west4-a")  # fmt: skip
    assert any("gcp's us-central1 list price" in n and "region='europe-west4'" in n
               for n in e.notes)  # fmt: skip


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: sailor_sim.Plan.uniform(sailor_sim.Job.create("tiny-llama", 8), "H100",
                                          "us-central1-a", microbatch_size=0), "microbatch_size"),
        (lambda: sailor_sim.Simulator().estimate(*_tiny(), tokens=-1.0), "tokens"),
        (lambda: sailor_sim.Simulator().estimate(*_tiny(), iterations=float("nan")), "iterations"),
        (lambda: sailor_sim.set_price("H100", -1.0), "price"),
        (lambda: sailor_sim.set_price("H100", float("nan")), "price"),
        (lambda: sailor_sim.set_price("H100", "2"), "price"),
        (lambda: sailor_sim.set_price("H100", 2.0, region="mars-1"), "region"),
    ],
)  # fmt: skip
def test_python_api_bad_values_are_typed_errors(call, field, prices_restored) -> None:
    """Plan.uniform(microbatch_size=0) was a ZeroDivisionError; estimate(tokens=-1) and
    iterations=NaN gave whole-run figures of -1 and NaN; set_price stored -1, NaN, the string
    '2' and a region no zone has, corrupting every later estimate of the process."""
    with prices_restored():
        with pytest.raises(sailor_sim.SailorSimError) as e:
            call()
    assert e.value.field == field


def _tiny():
    job = sailor_sim.Job.create("tiny-llama", 8)
    return job, sailor_sim.Plan.uniform(job, "H100", "us-central1-a")


LLAMA_3_1_8B = {  # meta-llama/Llama-3.1-8B config.json, as json.load gives it
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}  # fmt: skip


def test_a_parsed_config_json_is_a_model_and_gives_its_dtype() -> None:
    e = sailor_sim.estimate(dict(LLAMA_3_1_8B), "H100-80", gbs=8, dp=8, seq=8192)
    assert e.job is not None and e.job.model.total_params() == 8_030_261_248
    assert e.job.dtype == "bf16" and "torch_dtype 'bfloat16'" in e.assumed["dtype"]
    assert sailor_sim.read_hf_config(LLAMA_3_1_8B).total_params() == 8_030_261_248


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: sailor_sim.estimate({"hidden_size": 8}, "H100-80", gbs=8), "model"),
        (lambda: sailor_sim.estimate({**LLAMA_3_1_8B, "model_type": "xlnet"}, "H100-80", gbs=8),
         "model_type"),
        (lambda: sailor_sim.read_hf_config({"hidden_size": 8}), "model_type"),
        (lambda: sailor_sim.read_hf_config(8), "model"),
        (lambda: sailor_sim.estimate("OPT-350M", "A100-40", gbs=8, simulator={}), "simulator"),
        (lambda: sailor_sim.estimate("OPT-350M", "A100-40", gbs=8, seq={}), "seq"),
        (lambda: sailor_sim.estimate("OPT-350M", "A100-40", gbs=8, seq=0), "seq"),
        (lambda: sailor_sim.Simulator().estimate([], {"stages": []}), "job"),
        (lambda: sailor_sim.Simulator().estimate(_opt_job(), "plan.json"), "plan"),
    ],
)  # fmt: skip
def test_dicts_and_other_wrong_kinds_are_typed_errors_naming_what_to_pass(call, field) -> None:
    with pytest.raises(SailorSimError) as err:
        call()
    assert err.value.field == field


def _opt_job():
    return sailor_sim.Job.create("OPT-350M", global_batch_size=64)


def test_the_simulator_takes_a_job_and_a_plan_as_their_dicts() -> None:
    job = _opt_job()
    plan = sailor_sim.Plan.uniform(job, "A100-40", "us-central1-a", dp=8, microbatch_size=8)
    sim = sailor_sim.Simulator()
    expected = sim.estimate(job, plan).iteration_time_s
    assert sim.estimate(job.to_dict(), plan.to_dict()).iteration_time_s == expected


def test_a_huge_homogeneous_question_builds_no_entry_per_replica() -> None:
    """estimate() read the fullest GPU from Estimate.memory, an entry per replica: a
    1M-GPU gpus_for_tokens search took 17 s, most of it building entries it dropped. The
    fullest GPU now comes from each stage's distinct replicas; it is the plan's peak."""
    import tracemalloc

    sailor_sim.estimate("LLaMA-3.1-8B", "H100-80", gbs=64, dp=64, seq=2048, dtype="bf16")
    tracemalloc.start()
    try:
        e = sailor_sim.estimate("LLaMA-3.1-8B", "H100-80", gbs=2**18, dp=2**18, seq=2048,
                                dtype="bf16", options={"zero": "zero1"})  # fmt: skip
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert e.num_gpus == 2**18 and e.fits
    assert peak < 48 * 2**20, f"{peak / 2**20:.0f} MiB traced"  # 8 now, 167 with entries
    assert sum(e.memory_breakdown_bytes.values()) == e.peak_memory_bytes
    assert e.memory_capacity_bytes == sailor_sim.get_gpu("H100-80").memory_bytes


INTERLEAVED = {"virtual_stages": 2, "recompute": "full"}


def test_largest_microbatch_skips_sizes_interleaving_cannot_run() -> None:
    """Interleaved 1F1B needs each pipeline's microbatch count to be a multiple of its stages:
    at gbs 64 on 4 stages, mbs 32 and 64 leave 2 and 1 microbatches. The binary search tried
    mbs 32 and raised that rule's PlanError ('use a microbatch count that is a multiple of
    4') for a size the caller never chose; the answer is the largest runnable size."""
    kwargs = dict(gbs=64, pp=4, seq=2048, dtype="bf16", options=INTERLEAVED)
    best = sailor_sim.largest_microbatch("LLaMA-3.1-8B", "B200", **kwargs)
    assert best.fits and "mbs16" in best.plan  # 4 microbatches: the largest that runs


def test_gpus_for_tokens_skips_replica_counts_interleaving_cannot_run() -> None:
    """dp 32 leaves 2 microbatches per pipeline of 4 interleaved stages: skipped, so a budget
    no runnable dp meets is the 'days' error, not the interleaving rule's PlanError."""
    with pytest.raises(sailor_sim.ValidationError) as e:
        sailor_sim.gpus_for_tokens(
            "LLaMA-3.1-8B", "H100-80", gbs=64, pp=4, seq=2048, dtype="bf16",
            options=INTERLEAVED, tokens=1e11, days=1,
        )  # fmt: skip
    assert e.value.field == "days"


def test_largest_sequence_skips_lengths_context_parallelism_cannot_split() -> None:
    """CP 4 splits a sequence into 8 equal chunks: with step 100 the search tried 65500 and
    raised the CP rule's ValidationError; lengths that do not split are skipped."""
    options = {"context_parallel": 4, "zero": "zero3"}
    best = sailor_sim.largest_sequence("LLaMA-3.1-8B", "H100-80", gbs=8, dp=8, dtype="bf16",
                                       step=100, options=options)  # fmt: skip
    seq = best.job.sequence_length
    assert best.fits and seq % 100 == 0 and seq % 8 == 0


def test_largest_microbatch_without_a_runnable_size_is_the_rule_not_an_index_error() -> None:
    """gbs 4 over dp 8 leaves no microbatch size to try: an IndexError from the search; now
    the estimate's own typed error, naming dp."""
    with pytest.raises(sailor_sim.ValidationError) as e:
        sailor_sim.largest_microbatch("LLaMA-3.1-8B", "H100-80", gbs=4, dp=8, dtype="bf16")
    assert e.value.field == "dp"


def test_the_default_dtype_is_read_from_the_dtype_key_transformers_now_writes(tmp_path) -> None:
    """transformers >= 4.56 saves a config's dtype as "dtype" (huggingface/transformers#39782;
    "torch_dtype" is only read back from older files, and "dtype" wins where both are): a
    config saved so trained in fp32 by default ('no torch_dtype in the model definition'),
    8x slower and twice the memory of the bf16 it states."""
    fields = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": 512, "intermediate_size": 1536, "num_attention_heads": 8,
        "num_hidden_layers": 4, "num_key_value_heads": 8, "vocab_size": 32000,
        "max_position_embeddings": 4096,
    }  # fmt: skip
    for stated, expected in (({"dtype": "bfloat16"}, "bf16"),
                             ({"dtype": "float16", "torch_dtype": "float32"}, "fp16")):  # fmt: skip
        config = tmp_path / "config.json"
        config.write_text(json.dumps({**fields, **stated}))
        for model in (str(config), str(tmp_path), {**fields, **stated}):
            e = sailor_sim.estimate(model, "A100-80", gbs=8, seq=1024)
            assert e.job.dtype == expected, (stated, model)
            assert "(dtype '" in e.assumed["dtype"]  # the key it was read from
    assert sailor_sim.default_dtype(str(config))[0] == "fp16"
