"""Hostile and careless input to the real ``sailor-sim`` process: one line on stderr, exit 2.

Issue 13, items 7 (tracebacks and hangs) and 8 (nonsense accepted as numbers).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sailor_sim import Job, Plan, ProfileStore, inputs
from sailor_sim.errors import ValidationError
from sailor_sim.profiles.files import save_profile_dir
from sailor_sim.profiles.store import LayerProfile, ProfileEntry, ProfileKey
from sailor_sim.spec.examples import example_job, example_plan


def sailor_sim(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sailor_sim.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line_error(r: subprocess.CompletedProcess, needle: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr and needle in lines[0], lines[0]


@pytest.fixture()
def plan_file(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"job": example_job().to_dict(), "plan": example_plan().to_dict()}))
    return path


def test_garbage_files_are_refused_in_one_line(tmp_path):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 8)
    null = tmp_path / "null.json"
    null.write_text("null")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    one_line_error(sailor_sim("simulate", str(garbage)), "binary")
    one_line_error(sailor_sim("simulate", str(null)), "holds null")
    one_line_error(sailor_sim("simulate", str(deep)), "nests deeper")
    # Reading /dev/zero or a FIFO would block forever: refused by stat() before open().
    one_line_error(sailor_sim("simulate", "/dev/zero", timeout=30), "not a regular file")
    one_line_error(sailor_sim("simulate", str(fifo), timeout=30), "not a regular file")
    one_line_error(sailor_sim("simulate", str(tmp_path)), "is a folder")


def test_nan_and_fractional_numbers_in_a_plan_file(tmp_path, plan_file):
    data = json.loads(plan_file.read_text())
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(data).replace('"global_batch_size": 1024', '"global_batch_size": NaN')
    )
    one_line_error(sailor_sim("simulate", str(bad)), "NaN")
    data["plan"]["stages"][0]["replicas"][0]["microbatch_size"] = 2.5
    bad.write_text(json.dumps(data))
    one_line_error(sailor_sim("simulate", str(bad)), "microbatch_size: must be a whole number")
    data["plan"]["stages"][0]["replicas"][0]["microbatch_size"] = "2"
    bad.write_text(json.dumps(data))
    one_line_error(sailor_sim("simulate", str(bad)), "must be an integer")


def test_negative_and_nan_whole_run_figures(plan_file):
    one_line_error(sailor_sim("simulate", str(plan_file), "--iterations", "-5"), "--iterations")
    one_line_error(sailor_sim("simulate", str(plan_file), "--iterations", "nan"), "finite")
    ok = sailor_sim("simulate", str(plan_file), "--iterations", "5", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["run"]


def test_iterations_and_tokens_together_are_refused(plan_file):
    # Both were taken and --tokens silently ignored.
    args = ("simulate", str(plan_file), "--iterations", "5", "--tokens", "5")
    one_line_error(sailor_sim(*args), "not both")


def test_a_zone_outside_the_given_region_is_refused():
    # --region was silently ignored next to --zone.
    args = ["simulate", "--model", "OPT-350M", "--gbs", "16", "--gpu", "A100-40"]
    r = sailor_sim(*args, "--zone", "us-central1-a", "--region", "us-east-1")
    one_line_error(r, "is in us-central1, not us-east-1")
    ok = sailor_sim(*args, "--zone", "us-central1-a", "--region", "us-central1")
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("torch_dtype", ["float99", ["bf16"]])
def test_a_torch_dtype_it_cannot_take_is_named_not_called_missing(tmp_path, torch_dtype):
    # A list was an internal error (exit 1); an unknown name was reported as "no torch_dtype".
    config = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8,
              "num_hidden_layers": 4, "intermediate_size": 1024, "vocab_size": 32000,
              "max_position_embeddings": 2048, "torch_dtype": torch_dtype}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = sailor_sim("simulate", "--model", str(path), "--gbs", "16", "--gpu", "A100-40", "--json")
    assert r.returncode == 0, r.stderr
    assumed = json.loads(r.stdout)["assumed"]["dtype"]
    assert assumed.startswith("fp32 (torch_dtype") and "pass --precision" in assumed, assumed


def test_a_config_with_a_billion_blocks_is_refused_not_run_for_hours(tmp_path):
    # Every layer id costs work (profiles, plans, prefix sums): 10^9 blocks ran for hours.
    config = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8,
              "num_hidden_layers": 10**9, "intermediate_size": 1024, "vocab_size": 32000,
              "max_position_embeddings": 2048}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = sailor_sim("simulate", "--model", str(path), "--gbs", "16", "--gpu", "A100-40", timeout=30)
    one_line_error(r, "num_hidden_layers")


def test_an_empty_profiles_folder_is_a_warning_not_silence(tmp_path):
    """It estimated on the analytic profiles and said nothing, as if it held measurements."""
    flags = ["--model", "OPT-350M", "--gpu", "A100-40", "--profiles", str(tmp_path)]
    for command in (["simulate", "--gbs", "64"], ["memory"]):
        r = sailor_sim(*command, *flags)
        assert r.returncode == 0, r.stderr
        assert r.stderr.strip().splitlines() == [
            f"warning: --profiles {tmp_path} holds no profile files (*.json); using the "
            "built-in analytic profiles and default links instead"
        ]


def test_an_empty_name_or_path_is_refused_naming_the_flag():
    """``--profiles ""`` read the current folder ("" is Path(".")), ``prices --gpu ""`` listed
    every GPU type."""
    job = ["--model", "OPT-350M", "--gbs", "64", "--gpu", "A100-40"]
    one_line_error(sailor_sim("simulate", *job, "--profiles", ""), "'--profiles': is empty")
    one_line_error(sailor_sim("prices", "--gpu", ""), "unknown GPU type ''")


def test_negative_microbatch_count_is_refused():
    args = ["memory", "--model", "OPT-350M", "--gpu", "A100-40"]
    one_line_error(sailor_sim(*args, "--num-microbatches", "-3"), "--num-microbatches")
    one_line_error(sailor_sim(*args, "--mbs", "2.5"), "--mbs")
    one_line_error(sailor_sim(*args, "--pp", "0"), "--pp")


def test_flags_next_to_a_plan_file_with_a_job_are_an_error(plan_file):
    one_line_error(sailor_sim("simulate", str(plan_file), "--gbs", "64"), "--gbs")
    one_line_error(sailor_sim("simulate", str(plan_file), "--dtype", "bf16"), "--dtype")
    assert sailor_sim("simulate", str(plan_file)).returncode == 0


def test_an_overflowing_layer_time_is_no_finite_estimate(tmp_path):
    job = Job.create("tiny-gpt", 8, 128)
    layers = tuple(LayerProfile(1e308, 1e308, 1e-4) for _ in range(job.model.num_layer_ids))
    key = ProfileKey(job.model.name, "A100-40", "fp32", 1, 1)
    save_profile_dir(
        ProfileStore([ProfileEntry(key, 128, layers, "measured")]), tmp_path / "profiles"
    )
    plan = Plan.uniform(job, "A100-40", "us-central1-a", pp=1, dp=1, tp=1, microbatch_size=1)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"job": job.to_dict(), "plan": plan.to_dict()}))
    r = sailor_sim("simulate", str(path), "--profiles", str(tmp_path / "profiles"), "--json")
    assert "Infinity" not in r.stdout and "NaN" not in r.stdout and '"fits": true' not in r.stdout
    one_line_error(r, "overflows")


def _depth_by_characters(text: str) -> int:
    """The nesting depth outside strings, read character by character (the definition
    ``inputs.json_depth`` computes with regular expressions)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


@given(st.text(alphabet='[]{}"\\ a1,:\n', max_size=80))
@settings(max_examples=400, deadline=None)
def test_json_depth_counts_brackets_outside_strings(text):
    from sailor_sim.inputs import json_depth

    assert json_depth(text) == _depth_by_characters(text)


def test_json_depth_is_linear_on_unterminated_escapes():
    """Quotes that open strings never closed (each escaped in the one before) must not make
    the string pattern backtrack: 600 kB of them are read at once, not in hours."""
    from sailor_sim.inputs import json_depth

    assert json_depth('"\\"' * 200_000 + "\\") == 0
    assert json_depth('["a]", [[1]], "\\\\"]') == 3


def test_a_host_listens_when_any_of_its_addresses_binds(monkeypatch):
    """gRPC listens on every address a host resolves to and fails only when none binds; the
    probe before it refused 'localhost' resolving to an unbindable ::1 first (a machine
    without IPv6), now that it probes the default port 0 too. 192.0.2.1: TEST-NET-1."""

    def entry(ip):
        return (socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, 0))

    answers = {"two": [entry("192.0.2.1"), entry("127.0.0.1")], "none": [entry("192.0.2.1")]}
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: answers[host])
    inputs.listenable("two:0")
    with pytest.raises(ValidationError, match=r"^--host: cannot listen on none \(Cannot assign"):
        inputs.listenable("none:0")


def test_a_cache_folder_is_the_variables_off_or_under_the_xdg_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SAILOR_X_CACHE", str(tmp_path / "mine"))
    assert inputs.cache_folder("SAILOR_X_CACHE", "sailor", "x") == tmp_path / "mine"
    monkeypatch.setenv("SAILOR_X_CACHE", "off")
    assert inputs.cache_folder("SAILOR_X_CACHE", "sailor", "x") is None
    monkeypatch.delenv("SAILOR_X_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert inputs.cache_folder("SAILOR_X_CACHE", "sailor", "x") == tmp_path / "xdg" / "sailor" / "x"
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # set but empty: the home's .cache, as XDG says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / ".cache" / "sailor" / "x"
    assert inputs.cache_folder("SAILOR_X_CACHE", "sailor", "x") == expected
