"""simulate without a plan file, throughput metrics, $/hour by provider, catalog commands."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sailor_sim import Job, Simulator, StageSlice, get_gpu
from sailor_sim.cli.app import app
from sailor_sim.simulate.metrics import model_flops_per_token
from sailor_sim.spec.quickplan import balanced_split

# meta-llama/Llama-3.1-8B config.json, the fields that set the architecture
_LLAMA_31_8B = {
    "model_type": "llama",
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
    "vocab_size": 128256,
}

runner = CliRunner()
README = Path(__file__).resolve().parents[1] / "README.md"


def run(*args: str):
    return runner.invoke(app, list(args))


def one_line_error(r, text: str) -> None:
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and text in lines[0], r.output


LLAMA_ON_8_H100 = ("--gpu", "H100-80", "--tp", "8", "--mbs", "1", "--gbs", "16", "--seq", "8192")


def test_llama_config_on_8_h100_answers_fit_speed_mfu_and_cost(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(_LLAMA_31_8B))
    r = run("simulate", "--model", str(config), *LLAMA_ON_8_H100, "--dtype", "bf16", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    rate = out["throughput"]
    assert rate["tokens_per_s"] == pytest.approx(out["samples_per_s"] * 8192)
    assert rate["tokens_per_s_per_gpu"] == pytest.approx(rate["tokens_per_s"] / 8)
    peak = get_gpu("H100-80").peak_flops("bf16")
    assert rate["peak_tflops_per_gpu"] == pytest.approx(peak / 1e12)
    achieved = rate["tokens_per_s"] * rate["model_flops_per_token"] / 8
    assert rate["mfu"] == pytest.approx(achieved / peak) and 0 < rate["mfu"] < 1
    assert isinstance(out["fits"], bool) and out["provenance"][0]["kind"] == "analytic"
    costs = {c["provider"]: c for c in out["cost_by_provider"]}
    assert costs["aws"]["usd_per_hour"] == pytest.approx(55.04)  # p5.48xlarge
    assert costs["gcp"]["usd_per_hour"] == pytest.approx(88.49)  # a3-highgpu-8g
    assert costs["aws"]["spot_usd_per_hour"] < costs["aws"]["usd_per_hour"]
    assert len(out["plan"]["stages"]) == 1 and out["plan"]["stages"][0]["replicas"][0]["tp"] == 8
    # the table says the same, with units
    table = run("simulate", "--model", str(config), *LLAMA_ON_8_H100, "--dtype", "bf16")
    assert table.exit_code == 0, table.output
    wanted = ("tokens/s", "MFU", "GiB per GPU", "aws", "gcp", "provenance", "memory per GPU, GiB")
    for text in wanted:
        assert text in table.output, text


def test_flops_per_token_is_palm_appendix_b():
    job = Job.create("LLaMA-3.1-8B", 8, 8192, "bf16")
    n = 8_030_261_248 - 128256 * 4096  # all but the input embedding (untied head counts)
    assert model_flops_per_token(job.model, 8192) == 6 * n + 12 * 32 * 4096 * 8192
    gpt2_like = Job.create("GPT-1.7B", 8, 2048).model  # tied: the shared matrix counts once
    tied_n = gpt2_like.total_params() - 2048 * 2304 + (51200 - 51200) * 2304
    assert model_flops_per_token(gpt2_like, 2048) == 6 * tied_n + 12 * 24 * 2304 * 2048


def test_provider_and_region_place_the_plan():
    r = run(
        "simulate", "--model", "LLaMA-2-7B", "--gpu", "A100-80", "--tp", "4", "--dp", "2",
        "--gbs", "16", "--seq", "4096", "--dtype", "bf16", "--provider", "aws",
        "--region", "us-west-2", "--compare", "aws", "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert {rep["zone"] for s in out["plan"]["stages"] for rep in s["replicas"]} == {"us-west-2a"}
    assert [c["provider"] for c in out["cost_by_provider"]] == ["aws"]
    assert out["cost_per_hour_usd"] == pytest.approx(8 * 27.44705 / 8, rel=1e-6)  # p4de.24xlarge


def test_balanced_split_is_no_slower_than_even():
    sim = Simulator()
    job = Job.create("LLaMA-3.1-8B", 16, 4096, "bf16")
    sizes = balanced_split(sim, job, "H100-80", 2, 1, 4)
    assert sum(sizes) == job.model.num_layer_ids and len(sizes) == 4

    def slowest(split):
        first, worst = 0, 0.0
        for size in split:
            st = sim.stage_time(job, StageSlice(first, first + size - 1, "H100-80", 2, 1))
            worst, first = max(worst, st.per_microbatch_s), first + size
        return worst

    assert slowest(sizes) <= slowest([9, 9, 8, 8]) + 1e-12
    assert sizes[-1] < sizes[1]  # the head's large vocabulary weighs on the last stage
    r = run(
        "simulate", "--model", "LLaMA-3.1-8B", "--gpu", "H100-80", "--tp", "2", "--pp", "4",
        "--gbs", "16", "--seq", "4096", "--dtype", "bf16", "--split", "balanced", "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    stages = json.loads(r.output)["plan"]["stages"]
    assert [s["last_layer"] - s["first_layer"] + 1 for s in stages] == sizes


def test_bad_homogeneous_options_are_one_line_errors(tmp_path):
    base = ("simulate", "--model", "LLaMA-3.1-8B", "--gbs", "16", "--seq", "4096")
    one_line_error(run(*base, "--gpu", "H100-80", "--tp", "16"), "tp")
    one_line_error(run(*base, "--gpu", "H100-80", "--provider", "oracle"), "provider")
    one_line_error(run(*base, "--gpu", "H100-80", "--split", "9,9"), "split")
    one_line_error(run(*base, "--gpu", "H100-80", "--split", "10,10,10"),
                   "10,10,10 has 3 stages but pp (--pp) is 1")  # fmt: skip
    one_line_error(run(*base, "--gpu", "H100-80", "--pp", "3", "--split", "10,10,10"),
                   "adds up to 30 layer ids, not the 34 of LLaMA-3.1-8B")  # fmt: skip
    one_line_error(run(*base, "--gpu", "H100-80", "--zone", "us-east-1a", "--provider", "gcp"),
                   "zone")  # fmt: skip
    (tmp_path / "p.json").write_text("{}")
    one_line_error(run(*base, "--gpu", "H100-80", str(tmp_path / "p.json")), "not both")
    one_line_error(run("simulate", "--gpu", "H100-80", "--gbs", "8"), "--model")


def test_readme_plan_example_parses_and_simulates(tmp_path):
    text = README.read_text()
    section = text[text.index("### Plan JSON") :]
    example = re.search(r"```json\n(.*?)```", section, re.S).group(1)
    path = tmp_path / "plan.json"
    path.write_text(example)
    r = run("simulate", str(path), "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert {m["gpu_type"] for m in out["memory"]} == {"A100-40", "V100-16"}
    assert out["throughput"]["tokens_per_s"] > 0


def test_catalog_commands():
    r = run("prices", "--gpu", "H100-80", "--json")
    assert r.exit_code == 0, r.output
    offers = json.loads(r.output)["offers"]
    assert {o["provider"] for o in offers} == {"aws", "gcp", "azure"}
    assert all(o["source"] and o["date"] for o in offers)
    one_line_error(run("prices", "--provider", "oracle"), "provider")
    models = json.loads(run("models", "--json").output)
    assert {"LLaMA-3.1-70B", "GPT-1T", "MPT-7B"} <= {m["name"] for m in models}
    gpus = run("gpus")
    assert gpus.exit_code == 0 and "MI300X" in gpus.output and "memory GiB" in gpus.output


def test_memory_command_prints_gib():
    r = run("memory", "--model", "LLaMA-3.1-8B", "--gpu", "H100-80", "--tp", "8", "--dtype",
            "bf16", "--seq", "8192")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "peak GiB" in r.output and "headroom GiB" in r.output


def test_provenance_says_whether_the_analytic_efficiency_is_calibrated():
    from sailor_sim import Plan
    from sailor_sim.profiles import analytic
    from sailor_sim.simulate.metrics import provenance

    job = Job.create("LLaMA-3.1-8B", 8, 4096, "bf16")
    plan = Plan.uniform(job, "H100-80", "us-east-1a", tp=8, microbatch_size=1)
    saved = dict(analytic.CALIBRATION)
    try:
        analytic.set_calibration({})
        (p,) = provenance(["analytic"], job, plan)
        assert p["kind"] == "analytic" and p["provenance"] == "uncalibrated analytic"
        assert "no published-run calibration for H100-80 in bf16" in p["trust"]
        fit = analytic.MatmulEfficiency(0.5, 1e9, "compute_efficiency.json: fit on test rows")
        analytic.set_calibration({("hopper", "bf16"): fit})
        (p,) = provenance(["analytic"], job, plan)
        assert p["provenance"] == "calibrated analytic"
        assert "calibrated on published runs (compute_efficiency.json)" in p["trust"]
    finally:
        analytic.set_calibration(saved)
    (imported,) = provenance(["imported:sailor"])
    assert "leave-one-out" in imported["trust"]


def test_every_table_fits_120_columns(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(_LLAMA_31_8B))
    for args in (
        ("simulate", "--model", str(config), *LLAMA_ON_8_H100, "--dtype", "bf16"),
        ("demo",),
        ("memory", "--model", "LLaMA-3-8B", "--gpu", "A100-80", "--pp", "4"),
    ):
        r = run(*args)
        assert r.exit_code == 0, r.output
        # the job line names the model file by its path, as long as pytest's tmp_path (a
        # pytest-xdist worker adds a folder): counted as its name
        lines = r.output.replace(str(tmp_path), "").splitlines()
        widest = max(len(line) for line in lines)
        assert widest <= 120, [line for line in lines if len(line) > 120]


EIGHT_GPUS = ("--model", "LLaMA-3.1-8B", "--dp", "8", "--gbs", "64", "--seq", "8192",
              "--dtype", "bf16")  # fmt: skip


def _provider_rows(output: str) -> dict[str, list[str]]:
    """The $/hour table's rows by provider: [region, on demand, spot]."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("provider"))
    rows = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        provider, *cells = line.split()
        rows[provider] = cells
    return rows


def test_a_gpu_no_cloud_offers_shows_its_outside_price_as_other_not_as_every_cloud():
    """MI300X has only a rental price: it used to fill the gcp, aws and azure rows alike."""
    r = run("simulate", "--gpu", "MI300X", *EIGHT_GPUS)
    assert r.exit_code == 0, r.output
    rows = _provider_rows(r.output)
    assert [rows[p][1:] for p in ("gcp", "aws", "azure")] == [["-", "-"]] * 3
    assert rows["other"] == ["-", "48.00", "-"]  # 8 x 6.00 rental, no spot quote
    out = json.loads(run("simulate", "--gpu", "MI300X", *EIGHT_GPUS, "--json").output)
    costs = {c["provider"]: c for c in out["cost_by_provider"]}
    assert costs["aws"]["usd_per_hour"] is None and "MI300X" in costs["aws"]["missing"]
    assert costs["other"]["usd_per_hour"] == 48.0 and costs["other"]["spot_usd_per_hour"] is None
    assert "other" not in _provider_rows(run("simulate", "--gpu", "H100", *EIGHT_GPUS).output)


def test_compare_empty_hides_the_provider_table():
    r = run("simulate", "--gpu", "H100", *EIGHT_GPUS, "--compare", "")
    assert r.exit_code == 0, r.output
    assert "$/hour on demand" not in r.output and "iteration time" in r.output
    out = json.loads(
        run("simulate", "--gpu", "H100", *EIGHT_GPUS, "--compare", "", "--json").output
    )
    assert out["cost_by_provider"] == []
    spaced = json.loads(
        run("simulate", "--gpu", "H100", *EIGHT_GPUS, "--compare", "aws, gcp", "--json").output
    )
    assert [c["provider"] for c in spaced["cost_by_provider"]] == ["aws", "gcp"]


def test_the_provider_table_shows_the_region_asked_for_and_rounds_to_cents():
    where = ("--provider", "aws", "--region", "us-west-2")
    rows = _provider_rows(run("simulate", "--gpu", "H100", *EIGHT_GPUS, *where).output)
    assert rows["aws"][0] == "us-west-2" and rows["gcp"][0] == "us-central1"
    out = json.loads(run("simulate", "--gpu", "H100", *EIGHT_GPUS, *where, "--json").output)
    for row in out["cost_by_provider"]:
        for key in ("usd_per_hour", "spot_usd_per_hour"):
            assert row[key] == round(row[key], 2), row  # as the table prints it
    aws = next(c for c in out["cost_by_provider"] if c["provider"] == "aws")
    assert aws["region"] == "us-west-2" and aws["spot_usd_per_hour"] == 24.77  # not 24.768


@pytest.mark.parametrize("gpu, seller", [("B200", "aws"), ("GB200", None), ("A10G", "aws"),
                                         ("L40S", "aws")])  # fmt: skip
def test_a_gpu_without_a_price_in_the_zone_still_gets_time_memory_and_mfu(gpu, seller):
    """These used to fail with 'no price for B200 in us-central1-a (gcp)...; add one with
    set_price()': a Python function, and nothing else printed."""
    r = run("simulate", "--gpu", gpu, *EIGHT_GPUS)
    assert r.exit_code == 0, r.output
    notes = [line for line in r.output.splitlines() if line.startswith("Note:")]
    assert len(notes) == 1 and f"no price for {gpu} in us-central1-a (gcp)" in notes[0]
    assert "--catalog FILE" in r.output and "set_price" not in r.output
    if seller is not None:
        assert f"--provider {seller}" in notes[0]
    for shown in ("iteration time", "tokens/s", "MFU", "peak memory"):
        assert shown in r.output
    cost = next(line for line in r.output.splitlines() if line.startswith("cost "))
    assert cost.split() == ["cost", "-"]
    out = json.loads(run("simulate", "--gpu", gpu, *EIGHT_GPUS, "--json").output)
    assert out["cost_per_hour_usd"] is None and out["cost_per_iteration_usd"] is None
    assert out["iteration_time_s"] > 0 and 0 < out["throughput"]["mfu"] < 1
    assert len(out["notes"]) == 1 and "no price" in out["notes"][0]
    if seller is not None:  # following the note's fix prices it
        fixed = json.loads(
            run("simulate", "--gpu", gpu, *EIGHT_GPUS, "--provider", seller, "--json").output
        )
        assert fixed["cost_per_hour_usd"] > 0 and fixed["notes"] == []


def test_a_plan_file_without_a_price_names_a_zone_to_use(tmp_path):
    from sailor_sim import Plan

    job = Job.create("LLaMA-3.1-8B", 8, 2048, "bf16")
    plan = Plan.uniform(job, "A10G", "europe-west4-a", dp=8, microbatch_size=1)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"job": job.to_dict(), "plan": plan.to_dict()}))
    out = json.loads(run("simulate", str(path), "--json").output)
    assert out["cost_per_hour_usd"] is None
    (note,) = out["notes"]
    assert "a zone of aws in the plan (e.g. us-east-1a)" in note and "--provider" not in note


def test_a_sequence_beyond_max_position_embeddings_is_a_note_not_an_error(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**_LLAMA_31_8B, "max_position_embeddings": 8192}))
    args = ("--model", str(config), "--dtype", "bf16", "--seq", "16384")
    r = run("simulate", *args, "--gpu", "H100-80", "--gbs", "8")
    assert r.exit_code == 0, r.output
    (note,) = [line for line in r.output.splitlines() if line.startswith("Note:")]
    assert "sequence 16384 is beyond the 8192 positions" in note
    out = json.loads(run("simulate", *args, "--gpu", "H100-80", "--gbs", "8", "--json").output)
    assert any("max_position_embeddings" in n for n in out["notes"])
    memory = run("memory", *args, "--gpu", "H100-80")
    assert memory.exit_code == 0 and "Note: sequence 16384 is beyond" in memory.output
    mem_json = json.loads(run("memory", *args, "--gpu", "H100-80", "--json").output)
    assert len(mem_json["notes"]) == 1
    within = json.loads(run("simulate", "--model", str(config), "--dtype", "bf16", "--seq",
                            "8192", "--gpu", "H100-80", "--gbs", "8", "--json").output)  # fmt: skip
    assert within["notes"] == []


def test_the_optimizer_default_is_the_one_help_shows():
    help_text = run("simulate", "--help").output
    helped = re.search(r"--optimizer\b.*?\[default: \(?(\w+)\)?\]", help_text, re.S)
    out = json.loads(run("simulate", "--gpu", "H100", *EIGHT_GPUS, "--json").output)
    assert helped is not None and out["job"]["optimizer"] == helped.group(1) == "adamw"


def test_gpus_without_bf16_show_a_dash_not_zero():
    rows = {line.split()[0]: line.split() for line in run("gpus").output.splitlines()[1:]}
    assert rows["T4"][3] == "-" and rows["V100-16"][3] == "-"
    assert float(rows["A100-40"][3]) > 0
    listed = {g["name"]: g for g in json.loads(run("gpus", "--json").output)}
    assert listed["T4"]["bf16_tflops"] is None and listed["A100-40"]["bf16_tflops"] > 0


def test_the_readme_context_parallel_example_runs():
    """It lacked --dp: context_parallel 4 must divide the replicas, so it failed."""
    line = next(
        line
        for line in README.read_text().splitlines()
        if line.startswith("uv run sailor-sim memory") and "--cp" in line
    )
    r = run(*line.split()[3:])
    assert r.exit_code == 0, r.output
    assert "context_parallel=4" in r.output
