"""--precision fp8, --fp8, --ep and --cp on the sailor-sim CLI: estimates that show the option's
term, and one-line errors (exit 2) naming the option. GB200 NVL72 as a GPU type."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sailor_sim import Job, Plan, Simulator, get_gpu
from sailor_sim.cli.app import app

MIXTRAL = str(Path(__file__).parents[3] / "examples" / "configs" / "mixtral-8x7b" / "config.json")
BASE = ["simulate", "--model", "LLaMA-3.1-8B", "--gpu", "H100", "--tp", "2", "--dp", "8"]


def run(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize(
    ("flags", "option"),
    [
        (["--ep", "0"], "options.expert_parallel"),
        (["--ep", "2"], "options.expert_parallel"),  # a dense model has no experts
        (["--cp", "-1"], "options.context_parallel"),
        (["--cp", "3"], "options.context_parallel"),  # 4096 does not split into 6 chunks
        (["--fp8", "e4m3"], "options.fp8"),
        (["--precision", "fp32", "--fp8", "delayed"], "options.fp8"),
    ],
)
def test_bad_flags_are_one_line_naming_the_option(flags, option):
    r = run(*BASE, "--gbs", "16", "--seq", "4096", *flags)
    assert r.exit_code == 2, r.output
    assert r.output.strip().count("\n") == 0 and option in r.output


def test_moe_with_ep_and_long_context_with_cp_show_their_terms():
    moe = run(
        "simulate", "--model", MIXTRAL, "--gpu", "H100", "--pp", "4", "--dp", "8", "--gbs", "64",
        "--seq", "4096", "--precision", "fp8", "--ep", "8", "--recompute", "full", "--json",
    )  # fmt: skip
    assert moe.exit_code == 0, moe.output
    data = json.loads(moe.output)
    assert data["breakdown"]["expert_comm"] > 0 and data["job"]["options"]["fp8"] == "delayed"
    cp = run(*BASE, "--gbs", "8", "--seq", "8192", "--precision", "bf16", "--cp", "2", "--json")
    assert cp.exit_code == 0, cp.output
    assert json.loads(cp.output)["job"]["options"]["context_parallel"] == 2


def test_gb200_nvl72_is_one_nvlink_domain_of_72():
    gb200 = get_gpu("gb200-nvl72")
    assert gb200.name == "GB200" and gb200.gpus_per_node == 72
    assert gb200.bf16_flops == pytest.approx(2.5e15) and "NVL72" in gb200.source
    # TP beyond an 8-GPU board stays on NVLink in the rack
    job = Job.create("GPT-145B", 32, 2048, "fp8")
    from sailor_sim.catalog.prices import set_price

    set_price("GB200", 0.0, source="test: cost not compared")
    e = Simulator().estimate(job, Plan.uniform(job, "GB200", "us-central1-a", tp=16, dp=2))
    assert e.iteration_time_s > 0 and e.time_breakdown_s["tp_comm"] > 0


def test_memory_needs_replicas_for_the_expert_and_context_groups():
    r = run("memory", "--model", MIXTRAL, "--gpu", "H100", "--seq", "4096", "--ep", "8")
    assert r.exit_code == 2 and "options.expert_parallel" in r.output
    ok = run(
        "memory", "--model", MIXTRAL, "--gpu", "H100", "--seq", "4096", "--ep", "8", "--dp", "8"
    )
    assert ok.exit_code == 0, ok.output
    r = run("memory", "--model", "LLaMA-3.1-8B", "--gpu", "H100", "--seq", "8192", "--cp", "2")
    assert r.exit_code == 2 and "options.context_parallel" in r.output


def test_no_fused_loss_shows_the_eager_loss_s_logits_at_the_head():
    """--no-fused-loss (torchtitan's eager F.cross_entropy): 8 bytes per logit of transient
    where the fused default holds the bf16 logits (2), a one-stage plan having the head."""
    args = [*BASE, "--gbs", "16", "--seq", "4096", "--precision", "bf16", "--json"]
    fused, eager = run(*args), run(*args, "--no-fused-loss")
    assert fused.exit_code == 0 and eager.exit_code == 0, fused.output + eager.output
    terms = [json.loads(r.output)["memory"][0]["breakdown_bytes"] for r in (fused, eager)]
    assert json.loads(eager.output)["job"]["options"]["fused_loss"] is False
    assert terms[1]["transient"] == 4 * terms[0]["transient"]
