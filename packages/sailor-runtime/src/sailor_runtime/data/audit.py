"""Which samples a run trained, from the sample log the engine writes (``sample_log_path``:
one JSON line per step and replica with its store prefix, one per generation)."""

from __future__ import annotations

import json
from pathlib import Path


def trained_sample_ids(path: str | Path) -> dict[int, list[int]]:
    """Step -> the sample ids of that step as it stands, in global sample order (replica 0's
    first; replica j reads the samples after those of replicas < j). A step trained again
    after a failure (by a later generation, whose lines come later in the file) counts once,
    with the ids of the last generation that trained it."""
    runs: dict[str, int] = {}  # generation prefix -> order of first appearance
    lines: dict[int, dict[str, dict[int, list[int]]]] = {}
    for text in Path(path).read_text().splitlines():
        rec = json.loads(text)
        runs.setdefault(rec["run"], len(runs))
        lines.setdefault(rec["step"], {}).setdefault(rec["run"], {})[rec["replica"]] = rec["ids"]
    out = {}
    for step, by_run in sorted(lines.items()):
        replicas = by_run[max(by_run, key=runs.__getitem__)]
        out[step] = [i for r in sorted(replicas) for i in replicas[r]]
    return out
