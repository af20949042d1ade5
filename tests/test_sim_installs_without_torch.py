"""sailor-sim installs and imports on its own, without torch (it serves capacity planning)."""

from __future__ import annotations

import json
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

    # The capacity planner's question, in one command of the torch-free install: LLaMA-3.1-8B
    # from its config.json on 8 H100, bf16, FSDP, selective recompute, seq 8192.
    config = tmp_path / "Llama-3.1-8B" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(LLAMA_31_8B_CONFIG))
    answer = run(
        str(venv / "bin" / "sailor-sim"), "simulate", "--model", str(config), "--gpu", "H100-80",
        "--dp", "8", "--gbs", "64", "--seq", "8192", "--dtype", "bf16", "--zero", "zero3",
        "--recompute", "selective", "--compare", "gcp,aws", "--json",
    )  # fmt: skip
    assert answer.returncode == 0, answer.stderr
    out = json.loads(answer.stdout)
    assert out["fits"] and out["job"]["options"]["zero"] == "zero3"
    assert out["throughput"]["tokens_per_s_per_gpu"] > 0 and 0 < out["throughput"]["mfu"] < 1
    providers = {row["provider"]: row for row in out["cost_by_provider"]}
    assert providers["gcp"]["usd_per_hour"] > 0 and providers["aws"]["usd_per_hour"] > 0

    # The README's Python example runs as written in the same torch-free venv.
    example = tmp_path / "readme_example.py"
    example.write_text(readme_python_example())
    ran = run(python, str(example))
    assert ran.returncode == 0, ran.stderr
    assert "fits: True" in ran.stdout and "tokens/s/GPU" in ran.stdout


def readme_python_example() -> str:
    """The ```python block under the README's "Capacity planning from Python" heading."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Capacity planning from Python", 1)[1]
    return section.split("```python", 1)[1].split("```", 1)[0]


LLAMA_31_8B_CONFIG = {  # meta-llama/Llama-3.1-8B config.json (the fields the reader uses)
    "architectures": ["LlamaForCausalLM"],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
