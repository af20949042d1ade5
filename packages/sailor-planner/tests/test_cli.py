"""`sailor-planner plan`: JSON output and one-line errors (the real console script)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sailor_planner import cli
from sailor_planner.cli import app
from sailor_sim import Job, Plan
from sailor_sim.simulate.simulator import Simulator

SCRIPT = str(Path(sys.executable).parent / "sailor-planner")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=120)


def test_plan_json_has_plan_estimate_and_search_time() -> None:
    out = run(
        "plan",
        "--model",
        "OPT-350M",
        "--gbs",
        "256",
        "--seq-len",
        "2048",
        "--dtype",
        "fp32",
        "--gpus",
        "A100-40@us-central1-a=8",
        "--gpus",
        "V100-16@us-central1-b=8",
        "--objective",
        "cost",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {"plan", "estimate", "search_time_s"} <= set(data)
    job = Job.create("OPT-350M", 256, 2048, "fp32")
    plan = Plan.from_dict(data["plan"])
    expected = Simulator().estimate(job, plan).to_dict()
    assert {k: data["estimate"][k] for k in expected} == json.loads(json.dumps(expected))
    assert data["search_time_s"] > 0 and data["stats"]["candidates_evaluated"] > 0


def test_plan_json_estimate_is_what_simulate_json_prints(tmp_path) -> None:
    """Every figure of ``plan --json``'s estimate (tokens/s, MFU, provenance and cost per
    provider included) is ``sailor-sim simulate --json``'s for the same plan and options."""
    job_flags = ["--model", "OPT-350M", "--gbs", "64", "--seq-len", "2048", "--dtype", "bf16"]
    job_flags += ["--zero", "zero1", "--recompute", "selective"]
    out = run("plan", *job_flags, "--gpus", "A100-40@us-central1-a=8", "--fixed-options", "--json")
    assert out.returncode == 0, out.stderr
    estimate = json.loads(out.stdout)["estimate"]
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(json.loads(out.stdout)["plan"]))
    sim = subprocess.run(
        [str(Path(sys.executable).parent / "sailor-sim"), "simulate", str(plan_file), *job_flags,
         "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert sim.returncode == 0, sim.stderr
    simulated = json.loads(sim.stdout)
    assert {"throughput", "provenance", "cost_by_provider"} <= set(estimate)
    assert estimate == {k: simulated[k] for k in estimate}


def test_plan_from_an_inventory_file_with_a_budget(tmp_path) -> None:
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"A100-40": {"us-central1-a": 16}}))
    out = run(
        "plan",
        "--model",
        "OPT-350M",
        "--gbs",
        "128",
        "--inventory",
        str(inventory),
        "--max-cost-per-iteration",
        "0.2",
        "--top",
        "2",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert len(data["plans"]) == 2
    assert all(p["estimate"]["cost_per_iteration_usd"] <= 0.2 for p in data["plans"])


def test_table_output() -> None:
    out = CliRunner().invoke(
        app, ["plan", "--model", "tiny-gpt", "--gbs", "16", "--gpus", "A100-40@us-central1-a=4"]
    )
    assert out.exit_code == 0, out.output
    assert "iter/s" in out.stdout and "candidates evaluated" in out.stdout


@pytest.mark.parametrize(
    "args,field",
    [
        (["--model", "GPT-9", "--gbs", "8", "--gpus", "A100-40@us-central1-a=4"], "model"),
        (
            ["--model", "OPT-350M", "--gbs", "0", "--gpus", "A100-40@us-central1-a=4"],
            "global_batch_size",
        ),
        (["--model", "OPT-350M", "--gbs", "8", "--gpus", "A100-40@us-central1-a"], "gpus"),
        (["--model", "OPT-350M", "--gbs", "8"], "gpus"),
        (
            [
                "--model",
                "OPT-350M",
                "--gbs",
                "8",
                "--gpus",
                "A100-40@us-central1-a=4",
                "--objective",
                "speed",
            ],
            "objective",
        ),
        (
            [
                "--model",
                "OPT-350M",
                "--gbs",
                "8",
                "--gpus",
                "A100-40@us-central1-a=4",
                "--min-throughput",
                "-1",
            ],
            "min_throughput",
        ),
        (
            [
                "--model",
                "OPT-350M",
                "--gbs",
                "8",
                "--gpus",
                "A100-40@us-central1-a=4",
                "--sailor-root",
                "/nonexistent",
            ],
            "--sailor-root",
        ),
        (
            ["--model", "OPT-350M", "--gbs", "8", "--gpus", "A100-40@us-central1-a=4"]
            + ["--profile-dir", "/nonexistent"],
            "--profile-dir",
        ),
        (
            [
                "--model",
                "OPT-350M",
                "--gbs",
                "8",
                "--gpus",
                "A100-40@us-central1-a=4",
                "--min-throughput",
                "1e9",
            ],
            "constraints",
        ),
        # a constraint names its flag too (hE: "max_cost_per_hour: must be a positive number")
        (
            ["--model", "OPT-350M", "--gbs", "8", "--gpus", "A100-40@us-central1-a=4"]
            + ["--max-cost-per-hour", "0"],
            "(CLI --max-cost-per-hour)",
        ),
        # the flag, not only the request field (hC: "deadline_s: must be positive")
        (
            ["--model", "OPT-350M", "--gbs", "8", "--gpus", "A100-40@us-central1-a=4"]
            + ["--deadline", "-1"],
            "(CLI --deadline)",
        ),
        (
            ["--model", "OPT-350M", "--gbs", "8", "--gpus", "A100-40@us-central1-a=4"]
            + ["--max-pipeline-depth", "0"],
            "(CLI --max-pipeline-depth)",
        ),
        # a pool's bad part is named with the --gpus value it came from (was 'gpu_type: ...')
        (
            ["--model", "OPT-350M", "--gbs", "8", "--gpus", "A100-40@us-central1-a=4"]
            + ["--gpus", "Z80@us-central1-a=4"],
            "gpus: 'Z80@us-central1-a=4': gpu_type: unknown GPU type 'Z80'",
        ),
        (
            ["--model", "OPT-350M", "--gbs", "8", "--gpus", "A100-40@mars=4"],
            "gpus: 'A100-40@mars=4': zone: unknown zone 'mars'",
        ),
    ],
)
def test_errors_are_one_line_with_exit_status_2(args, field) -> None:
    out = CliRunner().invoke(app, ["plan", *args])
    assert out.exit_code == 2, out.output
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and field in lines[0]


def test_max_pipeline_depth_one_plans_without_pipelining() -> None:
    """Each of the 3 best ZeRO-2 plans of OPT-350M on 8 V100s is pipelined; depth 1 asks
    for those without pipeline parallelism (what FSDP runs)."""
    args = ["plan", "--model", "OPT-350M", "--gbs", "16", "--seq-len", "2048", "--top", "3"]
    args += ["--gpus", "V100-16@us-central1-a=8", "--zero", "zero2", "--fixed-options", "--json"]
    depths = []
    for extra in ([], ["--max-pipeline-depth", "1"]):
        out = CliRunner().invoke(app, [*args, *extra])
        assert out.exit_code == 0, out.output
        plans = json.loads(out.stdout)["plans"]
        depths.append({len(p["plan"]["stages"]) for p in plans})
    assert min(depths[0]) > 1 and depths[1] == {1}


def test_console_script_errors_are_one_line() -> None:
    out = run("plan", "--gbs", "8", "--gpus", "A100-40@us-central1-a=1")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "--model" in out.stderr


def test_pareto_prints_a_table_and_ranked_rows_name_their_zones() -> None:
    """--pareto printed nothing without --json, and two ranked plans that differ only in their
    zones printed identical rows."""
    args = ["plan", "--model", "OPT-350M", "--gbs", "512", "--seq-len", "2048", "--top", "2"]
    args += ["--gpus", "A100-40@us-central1-a=16", "--gpus", "A100-40@us-west1-b=16"]
    args += ["--gpus", "V100-16@us-central1-a=32", "--pareto", "4", "--fixed-options"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    text = out.stdout
    assert "frontier" in text
    head, frontier = text.split("frontier", 1)
    assert "zones" in head and "@us-" in head
    assert frontier.count("$/iter") == 1 and "@us-" in frontier


PROCESS_SETUP = """
import gc, os, sys
sys.argv = ["sailor-planner", "version"]
from sailor_planner import cli
try:
    cli.main()
except SystemExit:
    pass
print(os.environ.get("OPENBLAS_NUM_THREADS"), gc.get_threshold()[0] == cli.SEARCH_GC_THRESHOLD)
"""


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("4", "4")])
def test_the_command_sets_up_its_process_for_searching(given, expected):
    """The console script runs with one BLAS thread (idle OpenBLAS workers cost ~0.1 s CPU of
    a plan command) unless the user chose a count, and with the search's GC threshold; the
    library leaves both alone (``import sailor_planner.planner`` changes neither)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    out = subprocess.run([sys.executable, "-c", PROCESS_SETUP], env=env, capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    assert out.stdout.split()[-2:] == [expected, "True"], out.stdout + out.stderr
    library = subprocess.run(
        [sys.executable, "-c", "import gc, sailor_planner.planner; print(gc.get_threshold()[0])"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert int(library.stdout) < cli.SEARCH_GC_THRESHOLD


def test_plan_exits_without_teardown_and_loses_no_output(tmp_path) -> None:
    """``plan`` ends with ``os._exit`` after flushing (``cli.exit_now``): its whole output
    reaches a file as well as a pipe, with the command's exit status, and a bad request is
    still one line and exit 2."""
    args = ["plan", "--model", "OPT-350M", "--gbs", "64", "--top", "3", "--pareto", "4"]
    args += ["--gpus", "A100-40@us-central1-a=4", "--gpus", "V100-16@us-central1-b=4", "--json"]
    target = tmp_path / "out.json"
    with target.open("w") as f:
        done = subprocess.run([SCRIPT, *args], stdout=f, stderr=subprocess.PIPE, timeout=120)
    assert done.returncode == 0, done.stderr
    written = json.loads(target.read_text())
    piped = json.loads(run(*args).stdout)
    assert len(written["plans"]) == len(piped["plans"]) == 3 and written["pareto"]
    bad = run("plan", "--model", "OPT-350M", "--gbs", "0", "--gpus", "A100-40@us-central1-a=4")
    assert bad.returncode == 2 and bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1 and bad.stderr.startswith("error:")


def test_a_json_plan_never_imports_rich() -> None:
    """``plan --json`` prints one JSON line; the tables' library (~20 ms of a 0.5 s command's
    CPU, issue 22's bar) is imported only where a table is printed. The entry point ends a
    plan with ``os._exit`` (``cli.exit_now``), turned here into SystemExit to look after it."""
    code = (
        "import os, sys, runpy\n"
        "def finished(status):\n"
        "    raise SystemExit(status)\n"
        "os._exit = finished\n"
        "sys.argv = ['sailor-planner', 'plan', '--model', 'OPT-350M', '--gbs', '64', '--json',\n"
        "            '--gpus', 'A100-40@us-central1-a=8', '--fixed-options']\n"
        "try:\n"
        "    runpy.run_module('sailor_planner.cli', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "else:\n"
        "    raise AssertionError('the plan command did not exit')\n"
        "assert 'rich' not in sys.modules, 'a --json plan imported rich'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["plans"]


@pytest.mark.parametrize("content", ['{"pools": []}', '{"A100-40": {"us-central1-a": 0}}'])
def test_an_inventory_file_without_gpus_is_named(tmp_path, content) -> None:
    """It said 'error: gpus: the inventory has no GPUs': a flag the command was not given, and
    no fix."""
    path = tmp_path / "inv.json"
    path.write_text(content)
    out = CliRunner().invoke(app, ["plan", "--model", "OPT-350M", "--gbs", "8",
                                   "--inventory", str(path)])  # fmt: skip
    assert out.exit_code == 2, out.output
    assert out.stderr == (
        f"error: inventory: {path} has no GPUs; list at least one pool with a count above 0\n"
    )
    out = CliRunner().invoke(app, ["plan", "--model", "OPT-350M", "--gbs", "8",
                                   "--gpus", "A100-40@us-central1-a=0"])  # fmt: skip
    assert out.exit_code == 2, out.output
    assert out.stderr == (
        "error: gpus: the --gpus pools hold no GPUs; give at least one pool a count above 0\n"
    )


def test_an_inventory_file_saved_with_a_byte_order_mark_is_read(tmp_path) -> None:
    """A BOM (Notepad, PowerShell's Out-File) made the file 'not valid JSON, truncated?', while
    --gpus with the same pool planned; a trace CSV with a BOM was already read."""
    path = tmp_path / "inv.json"
    path.write_bytes(b'\xef\xbb\xbf{"A100-40": {"us-central1-a": 4}}\r\n')
    args = ["plan", "--model", "OPT-350M", "--gbs", "8", "--json"]
    out = CliRunner().invoke(app, [*args, "--inventory", str(path)])
    assert out.exit_code == 0, out.output
    same = CliRunner().invoke(app, [*args, "--gpus", "A100-40@us-central1-a=4"])
    assert json.loads(out.stdout)["plan"] == json.loads(same.stdout)["plan"]


def test_plan_takes_the_defaults_every_cli_takes_and_says_so(tmp_path) -> None:
    """Without --seq-len / --precision, `plan` plans what `sailor-sim simulate` and `sailor
    run` would: the model's maximum sequence capped at 8192 and the config.json's torch_dtype
    (it planned a 131072-position model at 131072 tokens per sample, in fp32, while its help
    said 'at most 8192' and 'the config's torch_dtype'); the JSON and the table name the job
    and the defaults assumed."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 512,
        "intermediate_size": 1536,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    flags = ["--model", str(path), "--gbs", "8", "--gpus", "A100-80@us-central1-a=2"]
    out = run("plan", *flags, "--fixed-options", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert (data["job"]["sequence_length"], data["job"]["dtype"]) == (8192, "bf16")
    assert set(data["assumed"]) == {"seq", "dtype"}
    tokens = data["estimate"]["throughput"]["tokens_per_s"]
    assert tokens == pytest.approx(8 * 8192 * data["estimate"]["throughput_iters_per_s"])
    table = run("plan", *flags, "--seq-len", "4096", "--fixed-options")
    assert table.returncode == 0, table.stderr
    first = table.stdout.splitlines()[0]
    assert "sequence 4096, bf16" in first and "assumed dtype bf16" in first


def test_table_figures_keep_four_significant_digits() -> None:
    """A small job's $/iteration printed 0.0000 in every ranked row (the cost objective's own
    ranking figure unreadable) and s/iter 0.001 in each; now each keeps 4 significant digits."""
    args = ["plan", "--model", "tiny-llama", "--gbs", "16", "--objective", "cost", "--top", "3"]
    out = CliRunner().invoke(app, [*args, "--gpus", "A100-40@us-central1-a=4"])
    assert out.exit_code == 0, out.output
    rows = [line.split() for line in out.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 3, out.stdout
    for column in (2, 3):  # s/iter, $/iter
        figures = [row[column] for row in rows]
        assert all(float(f) > 0 for f in figures) and len(set(figures)) == 3, out.stdout
