"""CPU worker types: the name says what a rank is, and the rank really is that."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sailor_runtime.agent.cputypes import cpu_worker_type, usable_cpus
from sailor_runtime.errors import SailorRuntimeError
from sailor_sim.catalog.gpus import get_gpu


def test_names_map_to_threads_and_cores():
    one = cpu_worker_type("cpu-1t")
    assert one.threads == 1 and one.cpus == (usable_cpus()[0],)
    assert cpu_worker_type("T4") is None and cpu_worker_type("CPU") is None
    assert get_gpu("cpu-1t").name == "cpu-1t" and get_gpu("cpu-2t").platform == "cpu"


def test_more_threads_than_cores_is_refused_with_the_fix():
    n = len(usable_cpus())
    with pytest.raises(SailorRuntimeError, match=f"cpu-1t..cpu-{n}t"):
        cpu_worker_type(f"cpu-{n + 1}t")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_a_rank_applies_its_type():
    """The environment the agent gives a rank pins it and sets torch's threads."""
    kind = cpu_worker_type(f"cpu-{len(usable_cpus())}t")
    code = (
        "import os, torch; from sailor_runtime.agent.cputypes import apply_from_env; "
        "print(apply_from_env(), torch.get_num_threads(), sorted(os.sched_getaffinity(0)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **kind.env()},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split(None, 2)
    assert int(out[0]) == kind.threads and int(out[1]) == kind.threads
    assert out[2].strip() == str(list(kind.cpus))


def test_workers_spread_over_the_cores():
    cpus = usable_cpus()
    assert cpu_worker_type("cpu-1t", first_core=1).cpus == (cpus[1 % len(cpus)],)
    assert cpu_worker_type("cpu-1t", first_core=len(cpus)).cpus == (cpus[0],)  # wraps
    assert set(cpu_worker_type(f"cpu-{len(cpus)}t", first_core=1).cpus) == set(cpus)


def test_a_worker_with_more_threads_per_rank_than_cores_is_refused_before_it_starts(tmp_path):
    """`sailor worker --threads-per-rank N` gives each rank an OpenMP pool of N threads: more
    than the cores this worker may use is refused in one line (exit 2), before it registers."""
    n = len(usable_cpus())
    done = subprocess.run(
        [sys.executable, "-m", "sailor_runtime.cli", "worker", "--controller", "127.0.0.1:1",
         "--gpu-type", "CPU", "--cold", "--workdir", str(tmp_path / "w"),
         "--threads-per-rank", str(n + 1)],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--threads-per-rank" in lines[0] and f"{n} cores" in lines[0], lines


def test_a_local_run_with_more_workers_than_the_profiler_measures_is_refused_at_once(
    tmp_path, monkeypatch
):
    """`sailor run --local` measures this machine's links with one process per worker; more
    workers than the profiler's limit (SAILOR_PROFILER_MAX_CPU_TP) is one line naming
    --workers and the ways out, before anything is profiled (it failed after ~10 s of
    profiling with four lines about a TP degree)."""
    from typer.testing import CliRunner

    from sailor_runtime.cli import app

    monkeypatch.setenv("SAILOR_PROFILER_MAX_CPU_TP", "3")
    out = CliRunner().invoke(
        app, ["run", "--local", "--workers", "4", "--run-dir", str(tmp_path / "run")]
    )
    assert out.exit_code == 2, out.output
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "--workers" in lines[0] and "SAILOR_PROFILER_MAX_CPU_TP" in lines[0]
    assert not (tmp_path / "run" / "profiling").exists()
