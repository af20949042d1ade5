"""This machine's profile, as the simulator needs it to predict a local run.

What a prediction of a local run needs, and where it comes from (sailor-profiler):

- per-layer forward / backward / optimizer seconds of one rank process: one thread (the agents
  set OMP_NUM_THREADS=1 per rank), measured once by ``sailor-profiler compute``;
- the share of a core each rank gets: a local run puts R rank processes on C cores, next to
  whatever else runs there. Per-layer timings are medians of millisecond-long kernels that
  mostly run inside one scheduler time slice, so they do not see the sharing, but a whole
  iteration does. For planning, the profile is scaled by max(1, N / C) (``contention``), N =
  the processes runnable before the run (``procs_running`` in /proc/stat) plus the R ranks to
  come (CFS shares the cores evenly among runnable processes of equal niceness). For the
  prediction of the plan that ran, the kernel says what share the ranks actually got:
  /proc/PID/schedstat gives each rank's time on a CPU and time waiting in the run queue, and
  (run + wait) / run while it trained is the slowdown of its CPU work (``CpuShare``);
- gloo p2p and all-reduce over loopback (``sailor-profiler network``), as ``links.json``,
  measured with as many processes as the run has ranks: on a few shared cores a message's cost
  is mostly the wait until the receiving process gets a core again (measured here: all-reduce
  latency ~0.5 ms with 2 processes on 2 cores, ~6 ms with 4), which a 2-process measurement
  would miss;
- every emulated GPU type is this same CPU: the measured file is filed under each type.

Measurements are kept in ``RUN_DIR/profiling`` and reused when already there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ..errors import SailorRuntimeError

MICROBATCH_SIZES = "1,2,4,8,16"


def _profiler(*args: str) -> list[str]:
    return [sys.executable, "-m", "sailor_profiler.cli", *args]


def _run(cmd: list[str], what: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-400:]
        raise SailorRuntimeError(f"sailor-profiler {what} failed: {tail}", field="profile")


def measure(run_dir: Path, job, ranks: int = 2) -> tuple[dict, dict]:
    """(compute profile JSON, links JSON) measured on this machine, cached in the run folder."""
    work = run_dir / "profiling"
    compute, net = work / "compute", work / "net"
    if not list(compute.glob("*.json")):
        print(f"profiling {job.model.name} on this machine ...", file=sys.stderr, flush=True)
        _run(_profiler(
            "compute", "--model", job.model.name, "--out", str(compute), "--device", "cpu",
            "--dtype", job.dtype, "--mbs", MICROBATCH_SIZES, "--tp", "1,2",
            "--seq", str(job.sequence_length), "--blocks", "1", "--warmup", "1", "--reps", "5",
            "--optimizer", job.optimizer, "--gpu-type", "CPU", "--no-plot", "--json",
        ), "compute")  # fmt: skip
    if not (net / "links.json").exists():
        _run(_profiler(
            "network", "--out", str(net), "--device", "cpu", "--procs", str(max(2, ranks)),
            "--min-bytes", "64K", "--max-bytes", "2M", "--reps", "3", "--zone", "local",
            "--gpu-type", "CPU", "--json",
        ), "network")  # fmt: skip
    measured = json.loads(sorted(compute.glob("*.json"))[0].read_text())
    return measured, json.loads((net / "links.json").read_text())


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def runnable_now() -> int:
    """Processes running or ready to run right now, this one excluded (/proc/stat)."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("procs_running"):
                return max(0, int(line.split()[1]) - 1)
    except OSError:
        pass
    return 0


def sample_runnable(seconds: float = 1.0, every: float = 0.1) -> float:
    samples = []
    for _ in range(max(1, int(seconds / every))):
        samples.append(runnable_now())
        time.sleep(every)
    return sum(samples) / len(samples)


def contention(runnable: float) -> float:
    """How much longer CPU work takes with ``runnable`` processes sharing this machine's cores."""
    return max(1.0, runnable / cores())


def _scaled(measured: dict, gpu_type: str, factor: float) -> dict:
    entries = [
        {
            **e,
            "layers": [
                {
                    **layer,
                    "forward_s": layer["forward_s"] * factor,
                    "backward_s": layer["backward_s"] * factor,
                    "optimizer_s": layer["optimizer_s"] * factor,
                }
                for layer in e["layers"]
            ],
        }
        for e in measured["entries"]
    ]
    return {**measured, "gpu_type": gpu_type, "entries": entries}


def _slowed(link: dict, factor: float) -> dict:
    if "points" in link:
        link = {**link, "points": [[size, bw / factor] for size, bw in link["points"]]}
    return {
        **link,
        "latency_s": link["latency_s"] * factor,
        "max_bandwidth": link["max_bandwidth"] / factor,
    }


def _relabel_links(links: dict, gpu_types: list[str], factor: float) -> dict:
    """The CPU<->CPU measurements for every pair of emulated types (all are this CPU),
    slowed down by ``factor``."""
    out = {"format": links["format"], "links": [], "intra_node": []}
    for link in links.get("links", []):
        for a in gpu_types:
            for b in gpu_types:
                pair = {
                    **link,
                    "src": {**link["src"], "gpu_type": a},
                    "dst": {**link["dst"], "gpu_type": b},
                }
                out["links"].append(_slowed(pair, factor))
    for entry in links.get("intra_node", []):
        out["intra_node"] += [_slowed({**entry, "gpu_type": t}, factor) for t in gpu_types]
    return out


def machine_profile(
    run_dir: Path, job, gpu_types: list[str], factor: float, name: str, ranks: int = 2
) -> str:
    """A profile folder ``run_dir/name`` for ``job``, its CPU times scaled by ``factor`` (the
    slowdown from sharing the cores), filed under every type in ``gpu_types``; links measured
    with ``ranks`` processes."""
    measured, links = measure(run_dir, job, ranks)
    folder = run_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    for gpu_type in gpu_types:
        name = f"{job.model.name}__{gpu_type}__{job.dtype}__s{job.sequence_length}.json"
        (folder / name).write_text(json.dumps(_scaled(measured, gpu_type, factor)))
    (folder / "links.json").write_text(json.dumps(_relabel_links(links, gpu_types, 1.0)))
    (folder / "README.txt").write_text(
        f"Measured on this machine with one thread per rank, CPU times scaled by {factor:.2f} "
        f"for sharing its {cores()} cores; see sailor_runtime.run.profile.\n"
    )
    return str(folder)


def _ranks(agents: set[int]) -> list[int]:
    """PIDs of the rank processes of ``agents``: their children whose stdout is a rank log
    (warm processes still waiting for a command write to a pipe)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) in agents and os.readlink(stat.parent / "fd" / "1").endswith(".log"):
                out.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def _schedstat(pid: int) -> tuple[int, int] | None:
    try:
        run_ns, wait_ns, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
        return int(run_ns), int(wait_ns)
    except (OSError, ValueError):
        return None


class CpuShare:
    """Run-queue slowdown of the rank processes between ``start`` and the last ``sample``."""

    def __init__(self) -> None:
        self.first: dict[int, tuple[int, int]] = {}
        self.last: dict[int, tuple[int, int]] = {}

    def sample(self, agent_pids: set[int]) -> None:
        for pid in _ranks(agent_pids):
            stat = _schedstat(pid)
            if stat is not None:
                self.first.setdefault(pid, stat)
                self.last[pid] = stat

    @property
    def slowdown(self) -> float:
        run = sum(self.last[p][0] - self.first[p][0] for p in self.last)
        wait = sum(self.last[p][1] - self.first[p][1] for p in self.last)
        return (run + wait) / run if run > 0 else 1.0
