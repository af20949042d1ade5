"""The profile of this machine that the simulator needs to predict a local run.

Placeholder until the profiler CLI lands: returns "" (simulator defaults).
"""

from __future__ import annotations

from pathlib import Path


def machine_profile(run_dir: Path, job, gpu_types: list[str], zone: str) -> str:
    return ""
