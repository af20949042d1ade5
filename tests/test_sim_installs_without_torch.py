"""sailor-sim installs and imports on its own, without torch (it serves capacity planning)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def find_uv() -> str | None:
    # `uv run` exports UV (the running uv binary); else PATH; else the `pip install --user` spot.
    for candidate in (os.environ.get("UV"), shutil.which("uv"), str(Path.home() / ".local/bin/uv")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


UV = find_uv()


@pytest.mark.skipif(UV is None, reason="uv not found (needed to build a fresh venv)")
def test_sim_installs_and_imports_without_torch(tmp_path: Path) -> None:
    assert UV is not None
    drop = {"VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    venv = tmp_path / "venv"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        # cwd=tmp_path so that uv does not read the workspace's [tool.uv] settings.
        return subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True)

    made = run(UV, "venv", "--python", sys.executable, str(venv))
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")

    installed = run(UV, "pip", "install", "--python", python, str(ROOT / "packages" / "sailor-sim"))
    assert installed.returncode == 0, installed.stderr

    imported = run(python, "-c", "import sailor_sim, sys; assert 'torch' not in sys.modules")
    assert imported.returncode == 0, imported.stderr

    find_torch = "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)"
    no_torch = run(python, "-c", find_torch)
    assert no_torch.returncode == 0, "torch is importable in a venv with only sailor-sim installed"
