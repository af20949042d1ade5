"""What a capacity planner met running the installed ``sailor-sim`` on real configs: each
case runs the CLI as a subprocess and checks what it prints and its exit status."""

from __future__ import annotations

import subprocess
import sys

import pytest

QWEN25_7B = ["--model", "Qwen2.5-7B", "--gpu", "H100"]


def sailor_sim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sailor_sim.cli.app", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert all(n in lines[0] for n in needles), lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--pp", "4", "--virtual-stages", "2", "--num-microbatches", "6"], "multiple of 4"),
        (["--pp", "15", "--virtual-stages", "2"], "too few for 2 chunks"),
    ],
)
def test_memory_refuses_the_interleaved_schedules_simulate_refuses(flags, words):
    """``memory`` printed a table (exit 0) for interleaved plans no framework runs and
    ``simulate`` refuses: 6 microbatches on 4 stages, chunks without a layer."""
    one_line_error(sailor_sim("memory", *QWEN25_7B, *flags), "options.virtual_stages", words)
    assert sailor_sim("memory", *QWEN25_7B, "--pp", "4", "--virtual-stages", "2").returncode == 0
