"""The sailor-sim CLI through typer's CliRunner: outputs, --json and one-line errors (exit 2)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from sailor_sim.cli.app import app
from sailor_sim.spec.examples import example_job, example_plan

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def test_demo_prints_an_estimate_table():
    r = run("demo")
    assert r.exit_code == 0, r.output
    assert "iteration time" in r.output and "dp_sync" in r.output


def test_simulate_our_plan_file_json(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"job": example_job().to_dict(), "plan": example_plan().to_dict()}))
    r = run("simulate", str(path), "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["iteration_time_s"] > 0 and data["fits"] is True
    assert abs(sum(data["breakdown"].values()) - data["iteration_time_s"]) < 1e-9
    table = run("simulate", str(path))
    assert table.exit_code == 0 and "peak memory" in table.output


def test_simulate_sailor_plan_exact_form(sailor_root, validation_files):
    r = run(
        "simulate",
        "--sailor-root",
        str(sailor_root),
        "--model",
        "OPT-350",
        "--sailor-plan",
        str(validation_files[0]),
        "--dtype",
        "fp32",
        "--json",
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    for key in (
        "iteration_time_s",
        "peak_memory_bytes",
        "throughput_iters_per_s",
        "cost_per_iteration_usd",
        "fits",
        "breakdown",
    ):
        assert key in data
    assert data["sources"] == ["imported:sailor"]


def test_memory_command():
    r = run(
        "memory",
        "--model",
        "OPT-350M",
        "--gpu",
        "A100-40",
        "--tp",
        "2",
        "--pp",
        "2",
        "--mbs",
        "4",
        "--json",
    )
    assert r.exit_code == 0, r.output
    stages = json.loads(r.output)["stages"]
    assert len(stages) == 2 and all(s["fits"] for s in stages)
    big = run("memory", "--model", "LLaMA-3-8B", "--gpu", "V100-16", "--mbs", "4")
    assert big.exit_code == 0 and "NO" in big.output


def one_line_error(r, text: str) -> None:
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and text in lines[0], r.output


def test_errors_are_one_line_exit_2(tmp_path):
    plan = example_plan().to_dict()
    job = example_job().to_dict()
    bad = tmp_path / "bad.json"
    plan["stages"][1]["first_layer"] = 12
    bad.write_text(json.dumps({"job": job, "plan": plan}))
    one_line_error(run("simulate", str(bad)), "exactly once")
    job2 = dict(job, global_batch_size=999)
    bad.write_text(json.dumps({"job": job2, "plan": example_plan().to_dict()}))
    one_line_error(run("simulate", str(bad)), "global batch")
    plan3 = example_plan().to_dict()
    plan3["stages"][0]["replicas"][0]["zone"] = "mars-1a"
    bad.write_text(json.dumps({"job": job, "plan": plan3}))
    one_line_error(run("simulate", str(bad)), "unknown zone")
    plan4 = example_plan().to_dict()
    plan4["stages"][0]["replicas"][0]["gpu_type"] = "B300"
    bad.write_text(json.dumps({"job": job, "plan": plan4}))
    one_line_error(run("simulate", str(bad)), "unknown GPU type")
    plan5 = example_plan().to_dict()
    plan5["stages"][0]["replicas"][0]["tp"] = 16
    bad.write_text(json.dumps({"job": job, "plan": plan5}))
    one_line_error(run("simulate", str(bad)), "exceeds the 8 GPUs")
    bad.write_text('{"job": {')
    one_line_error(run("simulate", str(bad)), "not valid JSON")
    one_line_error(run("memory", "--model", "OPT-350M", "--gpu", "A100-40", "--tp", "16"), "tp")


def test_truncated_profile_dir_is_one_line_error(tmp_path):
    (tmp_path / "p.json").write_text('{"format": "sailor-profile/1", "model"')
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"job": example_job().to_dict(), "plan": example_plan().to_dict()}))
    one_line_error(run("simulate", str(plan), "--profiles", str(tmp_path)), "truncated")


LLAMA_8X_H100 = ["simulate", "--model", "LLaMA-3.1-8B", "--gbs", "64", "--seq", "8192",
                 "--dtype", "bf16", "--gpu", "H100-80", "--dp", "8", "--json"]  # fmt: skip


def test_execution_option_flags_reach_the_estimate():
    """--zero/--recompute change what the simulator predicts the way the options say: ZeRO-3 and
    full recomputation cut the peak below 80 GiB (it does not fit without them), and cost
    recompute time; the JSON says which options it assumed."""
    plain = json.loads(run(*LLAMA_8X_H100).stdout)
    lean = json.loads(run(*LLAMA_8X_H100, "--zero", "zero3", "--recompute", "full").stdout)
    assert not plain["fits"] and lean["fits"]
    assert lean["peak_memory_bytes"] < plain["peak_memory_bytes"] / 2
    # (flash attention, on by default for bf16 on H100, recomputes the scores in backward)
    assert lean["breakdown"]["recompute"] > 5 * plain["breakdown"]["recompute"]
    assert lean["job"]["options"]["zero"] == "zero3"


def test_bad_option_combinations_are_one_line_exit_2():
    for extra, words in (
        (["--zero", "zero9"], "options.zero"),
        (["--sequence-parallel"], "needs tp > 1"),
        (["--virtual-stages", "2"], "pipeline parallelism"),
        (["--dtype", "fp32", "--grad-dtype", "bf16"], "bf16 gradients"),
    ):
        args = [a for a in LLAMA_8X_H100 if a != "bf16"] if "fp32" in extra else LLAMA_8X_H100
        if "fp32" in extra:
            args = [a for a in args if a != "--dtype"]
        result = run(*args, *extra)
        assert result.exit_code == 2, (extra, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], lines


def test_an_option_flag_at_its_default_clashes_with_a_plan_files_job(tmp_path):
    """A plan file whose job sets options (recompute full) with '--recompute none': the flag
    was dropped silently (the clash test compared the flags' options with the defaults, so a
    flag given at its default value looked not given) and the file's full recomputation was
    predicted. Any option flag given is a clash, like --model or --dtype."""
    job = example_job().to_dict()
    job["options"] = {"recompute": "full"}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"job": job, "plan": example_plan().to_dict()}))
    for flags in (["--recompute", "none"], ["--zero", "none"], ["--p2p", "megatron"]):
        r = run("simulate", str(path), *flags)
        assert r.exit_code == 2, (flags, r.output)
        assert r.output.startswith(f"error: {flags[0]}: ") and "already sets the job" in r.output
    assert run("simulate", str(path)).exit_code == 0  # no flag: the file's job


def test_precision_fp8_with_fp8_none_is_a_contradiction_not_a_silent_recipe(tmp_path):
    """--precision fp8 is bf16 with FP8 GEMMs ('delayed' unless a recipe is named): with
    --fp8 none, or both in a --config file, it trained 'delayed' without a word. Now one
    line naming --fp8, exit 2; the Python API refuses the same pair. A recipe named with it
    is taken; --fp8 none alone is plain bf16."""
    import pytest

    import sailor_sim
    from sailor_sim import ValidationError

    base = ["simulate", "--model", "LLaMA-3.1-8B", "--gpu", "H100", "--tp", "8", "--gbs", "8"]
    base += ["--seq", "4096"]
    one_line_error(run(*base, "--precision", "fp8", "--fp8", "none"), "--fp8: none contradicts")
    config = tmp_path / "run.toml"
    config.write_text('precision = "fp8"\n[options]\nfp8 = "none"\n')
    one_line_error(run(*base, "--config", str(config)), "contradicts precision fp8")
    current = run(*base, "--precision", "fp8", "--fp8", "current", "--json")
    assert (
        current.exit_code == 0 and json.loads(current.output)["job"]["options"]["fp8"] == "current"
    )
    plain = run(*base, "--precision", "bf16", "--fp8", "none", "--json")
    assert plain.exit_code == 0 and json.loads(plain.output)["job"]["options"]["fp8"] == "none"
    with pytest.raises(ValidationError, match="contradicts") as e:
        sailor_sim.estimate(
            "LLaMA-3.1-8B", "H100-80", gbs=8, dp=8, seq=4096, dtype="fp8", options={"fp8": "none"}
        )
    assert e.value.field == "options.fp8"
