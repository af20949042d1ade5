"""This machine's profile, as the simulator needs it to predict a local run.

What a prediction of a local run needs (and what this module measures, with sailor-profiler):

- per-layer forward / backward / optimizer seconds *as the real ranks see them*: one thread per
  rank (the agents set OMP_NUM_THREADS=1) while the other ranks of the run compute on the same
  cores. So ``concurrency`` copies of ``sailor-profiler compute`` run at once, one thread each,
  and the profile keeps the copy with the median total time;
- gloo p2p and all-reduce cost over loopback (``sailor-profiler network``), as ``links.json``;
- every emulated GPU type is this same CPU: the measured files are filed under each type.

The result lives in ``RUN_DIR/profile`` and is reused when it is already there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ..agent.ranks import RANK_NICE
from ..errors import SailorRuntimeError

MICROBATCH_SIZES = "1,2,4,8"


def _profiler(*args: str) -> list[str]:
    # As nice as the ranks (agent.ranks.RANK_NICE), so it competes for the cores as they do.
    return ["nice", "-n", str(RANK_NICE), sys.executable, "-m", "sailor_profiler.cli", *args]


def _compute_copies(job, out: Path, concurrency: int) -> Path:
    """Run ``concurrency`` single-threaded profilers at once; the median one's file."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = []
    for i in range(concurrency):
        cmd = _profiler(
            "compute", "--model", job.model.name, "--out", str(out / f"copy-{i}"),
            "--device", "cpu", "--dtype", job.dtype, "--mbs", MICROBATCH_SIZES,
            "--tp", "1", "--seq", str(job.sequence_length), "--blocks", "1",
            "--warmup", "1", "--reps", "3",
            "--optimizer", job.optimizer, "--gpu-type", "CPU", "--no-plot", "--json",
        )  # fmt: skip
        log = open(out / f"copy-{i}.log", "wb")  # noqa: SIM115 - closed after wait
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    files = []
    for i, (p, log) in enumerate(procs):
        code = p.wait()
        log.close()
        found = sorted((out / f"copy-{i}").glob("*.json"))
        if code != 0 or not found:
            tail = (out / f"copy-{i}.log").read_text(errors="replace")[-400:]
            raise SailorRuntimeError(f"sailor-profiler compute failed: {tail}", field="profile")
        files.append(found[0])
    return sorted(files, key=_total_seconds)[len(files) // 2]


def _total_seconds(path: Path) -> float:
    data = json.loads(path.read_text())
    return sum(
        layer["forward_s"] + layer["backward_s"]
        for entry in data["entries"]
        for layer in entry["layers"]
    )


def _network(out: Path) -> Path:
    cmd = _profiler(
        "network", "--out", str(out / "net"), "--device", "cpu", "--procs", "2",
        "--min-bytes", "64K", "--max-bytes", "2M", "--reps", "3", "--zone", "local",
        "--gpu-type", "CPU", "--json",
    )  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    links = out / "net" / "links.json"
    if proc.returncode != 0 or not links.exists():
        raise SailorRuntimeError(
            f"sailor-profiler network failed: {proc.stderr[-400:]}", field="profile"
        )
    return links


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
                    }  # fmt: skip
                )
    for entry in links.get("intra_node", []):
        out["intra_node"] += [{**entry, "gpu_type": t} for t in gpu_types]
    return out


def machine_profile(run_dir: Path, job, gpu_types: list[str], concurrency: int) -> str:
    """The profile folder for ``job`` on this machine, filed under every type in ``gpu_types``."""
    folder = run_dir / "profile"
    if (folder / "links.json").exists():
        return str(folder)
    work = run_dir / "profiling"
    work.mkdir(parents=True, exist_ok=True)
    print(f"profiling {job.model.name} on this machine ({concurrency} ranks at once) ...",
          file=sys.stderr, flush=True)  # fmt: skip
    measured = json.loads(_compute_copies(job, work, max(1, concurrency)).read_text())
    links = json.loads(_network(work).read_text())
    folder.mkdir(parents=True, exist_ok=True)
    for gpu_type in gpu_types:
        data = {**measured, "gpu_type": gpu_type}
        name = f"{job.model.name}__{gpu_type}__{job.dtype}__s{job.sequence_length}.json"
        (folder / name).write_text(json.dumps(data))
    (folder / "links.json").write_text(json.dumps(_relabel_links(links, gpu_types)))
    return str(folder)
