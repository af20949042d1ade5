"""This machine's profile, as the simulator needs it to predict a local run.

A local run runs each device as a rank process on this CPU, with the threads and cores of its
CPU worker type. The simulator
models every GPU as a device of its own; here R ranks share C cores, next to whatever else
runs. What the prediction uses, and why:

- per-layer forward / backward / optimizer seconds of one rank process alone, one thread (the
  agents set OMP_NUM_THREADS=1 per rank): ``sailor-profiler compute``. Per-layer medians of
  millisecond kernels run inside one scheduler slice and do not see the sharing, so they are
  scaled by the stretch the ranks' CPU work gets from it. For planning that is max(1, N / C)
  (``contention``), N = the processes runnable before the run (``procs_running`` in
  /proc/stat) plus the R ranks to come (CFS shares the cores evenly among runnable processes
  of equal niceness). For the prediction of the plan that ran, the kernel says what share the
  ranks actually got: /proc/PID/schedstat gives a rank's main thread (its layers, one
  intra-op thread) time on a CPU and time waiting in the run queue, and (run + wait) / run
  while the ranks trained is the stretch (``CpuShare``);
- gloo p2p and the ring all-reduce over loopback, as ``links.json``: ``sailor-profiler
  network`` with R processes and ``--busy-ms`` of compute before each repetition, so the
  collectives are measured as training meets them. On shared cores a collective right after
  compute waits for the scheduler at every ring step (measured on 2 cores, 4 ranks: a 16-byte
  all-reduce 0.8 ms back to back, ~5 ms after compute), which neither a back-to-back benchmark
  nor a uniform stretch of one would show. The sharing is in these numbers already, so they are
  not scaled;
- each CPU worker type (``cpu-<N>t``, ``agent.cputypes``) is profiled as it runs: the compute
  profile runs with its N threads pinned to its N cores, and is filed under its own name. A
  type that is not a CPU worker type (the legacy ``CPU``) is one thread, as before. The links
  are loopback between processes of this machine whatever their types, so one measurement
  serves every pair.

Measurements are kept in ``RUN_DIR/profiling`` and reused when already there, and kept per
machine for later runs of the same model and settings (``profilecache``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from sailor_sim import get_gpu

from ..agent.cputypes import CpuWorkerType, cpu_worker_type, usable_cpus
from ..engine.backend import is_cpu_type
from ..errors import SailorRuntimeError
from . import profilecache

MICROBATCH_SIZES = (1, 2, 4, 8, 16)
CPU_TP_DEGREES = (1, 2)
"""TP degrees measured for a CPU type whose nodes hold several devices (gloo ranks of one
machine); a type of one device per node (``cpu-Nt``) or a GPU worker's one GPU gets TP 1."""


def _profiler(*args: str) -> list[str]:
    return [sys.executable, "-m", "sailor_profiler.cli", *args]


def _run(cmd: list[str], what: str, worker: CpuWorkerType | None = None) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(worker.env() if worker else {})}
    pin = (lambda: os.sched_setaffinity(0, worker.cpus)) if worker else None
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, preexec_fn=pin)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-400:]
        raise SailorRuntimeError(f"sailor-profiler {what} failed: {tail}", field="profile")


def measure_compute(run_dir: Path, job, gpu_type: str) -> dict:
    """The compute profile of ``job`` on ``gpu_type`` as it runs here (a CPU worker type's
    threads and cores), cached in the run folder."""
    worker = cpu_worker_type(gpu_type)
    gpu = not is_cpu_type(gpu_type)  # a GPU of this machine (sailor run --local on GPUs)
    label = gpu_type if worker or gpu else "CPU"
    compute = run_dir / "profiling" / f"compute-{label}"
    if not list(compute.glob("*.json")):
        args = compute_args(job, compute, gpu, label)
        _measure_or_reuse(
            "compute", args, compute, job.model, f"{job.model.name} on {gpu_type}", worker
        )
    return json.loads(sorted(compute.glob("*.json"))[0].read_text())


def _measure_or_reuse(kind: str, args: list[str], out: Path, model, what: str, worker=None):
    """Fill ``out`` with ``sailor-profiler KIND ARGS``'s measurement: the one kept for the same
    key (``profilecache``: same arguments, model, software and hardware) where one reads back,
    else measured now and kept."""
    root = profilecache.cache_root()  # None (off): no key either (it reads the sources)
    key = profilecache.profile_key(kind, args, model) if root else ""
    sweep = profilecache.sweep_pairs(args)
    meta = profilecache.restore(key, out, sweep) if root else None
    if meta is not None:
        line = f"profile of {what}: measured {meta.get('measured_at', '?')}, reused from {root}"
        print(
            f"{line} ({profilecache.CACHE_ENV}=off measures it again)", file=sys.stderr, flush=True
        )
        _record(out, line)
        return
    print(f"profiling {what} ...", file=sys.stderr, flush=True)
    _run(_profiler(kind, *args), kind, worker)
    _record(out, f"profile of {what}: measured {profilecache.timestamp()} for this run")
    if root:
        profilecache.keep(key, out, what, sweep)


PROVENANCE = "provenance.txt"
"""In ``RUN_DIR/profiling``: one line per measurement the run used, measured for it or reused
(``profilecache``), copied into the planning profile's README.txt."""


def _record(out: Path, line: str) -> None:
    with open(out.parent / PROVENANCE, "a") as f:
        f.write(line + "\n")


def compute_args(job, out: Path, gpu: bool, label: str) -> list[str]:
    """``sailor-profiler compute``'s arguments: the microbatch sizes and TP degrees a plan of
    ``job`` can use on ``label`` (``profiled_shapes``)."""
    mbs, tps = profiled_shapes(job, gpu, label)
    return [
        "--model", job.model.name, "--out", str(out), "--device", "cuda" if gpu else "cpu",
        "--dtype", job.dtype, "--mbs", ",".join(map(str, mbs)),
        "--tp", ",".join(map(str, tps)), "--seq", str(job.sequence_length), "--blocks", "1",
        "--warmup", "1", "--reps", "5", "--optimizer", job.optimizer, "--gpu-type", label,
        "--no-plot", "--json",
    ]  # fmt: skip


def profiled_shapes(job, gpu: bool, label: str) -> tuple[list[int], list[int]]:
    """(microbatch sizes, TP degrees) worth measuring. A microbatch holds at most the global
    batch, and TP spans the devices of one node (the planner's ``tp_degrees`` limit): a GPU
    worker of ``sailor run --local`` holds one GPU (TP 2 failed the first run on a one-GPU
    H200), a ``cpu-Nt`` node one device. Sizes no plan can use were measured for nothing: the
    largest microbatch is as long as all the smaller ones together, and a TP 2 sweep starts a
    gloo group (the Shakespeare run, gbs 8 on one cpu-2t worker, profiled 1-16 x TP 1-2)."""
    mbs = [m for m in MICROBATCH_SIZES if m <= job.global_batch_size] or [1]
    per_node = 1 if gpu else get_gpu(label).gpus_per_node
    return mbs, [t for t in CPU_TP_DEGREES if t <= per_node]


def measure(run_dir: Path, job, ranks: int = 2, gpu_type: str = "CPU") -> tuple[dict, dict]:
    """(compute profile JSON of ``gpu_type``, links JSON) measured on this machine, cached in
    the run folder."""
    measured = measure_compute(run_dir, job, gpu_type)
    net = run_dir / "profiling" / "net"
    if not (net / "links.json").exists():
        args = [
            "--out", str(net), "--device", "cpu", "--procs", str(max(2, ranks)),
            "--min-bytes", "4K", "--max-bytes", "4M", "--reps", "7", "--busy-ms", "10",
            "--zone", "local", "--gpu-type", "CPU", "--json",
        ]  # fmt: skip
        _measure_or_reuse("network", args, net, None, f"the links of {max(2, ranks)} processes")
    return measured, json.loads((net / "links.json").read_text())


def cores() -> int:
    """Cores this process may run on (``agent.cputypes.usable_cpus``, its CPU affinity)."""
    return len(usable_cpus())


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


def _relabel_links(links: dict, gpu_types: list[str]) -> dict:
    """The CPU<->CPU measurements for every pair of emulated types (all are this CPU)."""
    out = {"format": links["format"], "links": [], "intra_node": []}
    for link in links.get("links", []):
        for a in gpu_types:
            for b in gpu_types:
                out["links"].append(
                    {
                        **link,
                        "src": {**link["src"], "gpu_type": a},
                        "dst": {**link["dst"], "gpu_type": b},
                    }
                )
    for entry in links.get("intra_node", []):
        out["intra_node"] += [{**entry, "gpu_type": t} for t in gpu_types]
    return out


def machine_profile(
    run_dir: Path, job, gpu_types: list[str], factor: float, name: str, ranks: int = 2
) -> str:
    """A profile folder ``run_dir/name`` for ``job``, filed under every type in ``gpu_types``:
    layer times scaled by ``factor`` (the stretch from sharing the cores), links measured with
    ``ranks`` busy processes."""
    _, links = measure(run_dir, job, ranks, gpu_types[0])
    folder = run_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    for gpu_type in gpu_types:
        measured = measure_compute(run_dir, job, gpu_type)
        stem = re.sub(r"[^A-Za-z0-9.+-]+", "_", job.model.name).strip("_")  # as the sim does
        name = f"{stem}__{gpu_type}__{job.dtype}__s{job.sequence_length}.json"
        stretch = factor if is_cpu_type(gpu_type) else 1.0  # GPUs do not share the cores
        (folder / name).write_text(json.dumps(_scaled(measured, gpu_type, stretch)))
    (folder / "links.json").write_text(json.dumps(_relabel_links(links, gpu_types)))
    provenance = run_dir / "profiling" / PROVENANCE
    (folder / "README.txt").write_text(
        "Measured on this machine, each CPU worker type with its threads and cores; layer and "
        f"optimizer times scaled by {factor:.2f} for sharing its {cores()} cores; links "
        f"measured with {ranks} busy ranks, as they are; see sailor_runtime.run.profile.\n"
        + (provenance.read_text() if provenance.is_file() else "")
    )
    return str(folder)


def _parents() -> dict[int, int]:
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            out[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return out


def _ranks(agents: set[int]) -> list[int]:
    """PIDs of the rank processes of ``agents``: their descendants (forked by the agent's
    zygote, or its children when started cold) whose stdout is a rank log."""
    parents = _parents()
    out = []
    for pid in parents:
        ancestor, hops = parents.get(pid), 0
        while ancestor is not None and ancestor not in agents and hops < 4:
            ancestor, hops = parents.get(ancestor), hops + 1
        if ancestor in agents:
            try:
                if os.readlink(f"/proc/{pid}/fd/1").endswith(".log"):
                    out.append(pid)
            except OSError:
                continue
    return out


def rank_pids(agents: set[int], generation: int) -> dict[int, int]:
    """rank -> PID of the rank processes of ``agents`` in ``generation`` (from the rank log
    each writes, ``.../gen-N/rank-R.log``)."""
    out = {}
    for pid in _ranks(agents):
        try:
            log = Path(os.readlink(f"/proc/{pid}/fd/1"))
        except OSError:
            continue
        if log.parent.name == f"gen-{generation}" and log.name.startswith("rank-"):
            out[int(log.name[len("rank-") :].split(".")[0])] = pid
    return out


def _schedstat(pid: int) -> tuple[int, int] | None:
    """(ns on a CPU, ns waiting in the run queue) of the main thread of ``pid``: where a rank
    runs its layers and optimizer (one intra-op thread). Its gloo threads serve collectives,
    whose waits for a core are in the busy link benchmark already."""
    try:
        run_ns, wait_ns, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
        return int(run_ns), int(wait_ns)
    except (OSError, ValueError):
        return None


class CpuShare:
    """Run-queue stretch of the ranks' layer work between the first and last ``sample``:
    (run + wait) / run of their main threads."""

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
