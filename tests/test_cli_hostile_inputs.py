"""Every CLI, as a real process, on hostile and careless input: one line on stderr, exit 2
(issue 13, items 7 and 10). sailor-sim has its own cases in its package's tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sailor_testing import free_port

ENTRY = {
    "sailor-planner": "from sailor_planner.cli import main; main()",
    "sailor-profiler": "from sailor_profiler.cli import run; run()",
    "sailor": "from sailor_runtime.cli import entry; entry()",
}


def cli(tool: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", ENTRY[tool], *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line_error(r: subprocess.CompletedProcess, needle: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr[-2000:]
    assert needle in lines[0], lines[0]


@pytest.fixture()
def files(tmp_path) -> dict[str, Path]:
    out = {
        "garbage": tmp_path / "garbage.bin",
        "null": tmp_path / "null.json",
        "deep": tmp_path / "deep.json",
        "huge": tmp_path / "huge.json",
        "half": tmp_path / "half.json",
        "garbage_dir": tmp_path / "gdir",
    }
    out["garbage"].write_bytes(os.urandom(4096) + b"\x00")
    out["null"].write_text("null")
    out["deep"].write_text("[" * 100_000)
    pool = '{"pools": [{"gpu_type": "A100-40", "zone": "us-central1-a", "count": %s}]}'
    out["huge"].write_text(pool % "1e400")
    out["half"].write_text(pool % "1.5")
    out["garbage_dir"].mkdir()
    (out["garbage_dir"] / "p.json").write_bytes(os.urandom(2048) + b"\x00")
    return out


PLAN = ["plan", "--model", "OPT-350M", "--gbs", "64"]


@pytest.mark.parametrize(
    "name, needle",
    [
        ("garbage", "binary"),
        ("null", "holds null"),
        ("deep", "nests deeper"),
        ("huge", "count: must be a whole number"),
        ("half", "count: must be a whole number"),
    ],
)
def test_planner_inventory_files(files, name, needle):
    one_line_error(cli("sailor-planner", *PLAN, "--inventory", str(files[name])), needle)


def test_planner_profiles_and_serve_settings(files):
    gpus = ["--gpus", "A100-40@us-central1-a=8"]
    one_line_error(
        cli("sailor-planner", *PLAN, *gpus, "--profile-dir", str(files["garbage"])), "not a folder"
    )
    one_line_error(cli("sailor-planner", "serve", "--workers", "0"), "workers")
    one_line_error(cli("sailor-planner", "serve", "--host", "8.8.8.8"), "--token")


SPOT_TRACE = (
    Path(__file__).resolve().parents[1] / "packages/sailor-planner/examples/traces/spot.csv"
)


@pytest.mark.parametrize("seconds", ["1e-300", "0.5"])
def test_replay_refuses_a_checkpoint_interval_under_a_second(seconds):
    """1e-300 s replayed to 2e302 $ per million tokens and exit 0: every state was all saves."""
    replay = ["replay", "--trace", str(SPOT_TRACE), "--model", "OPT-350M", "--policies", "sailor"]
    one_line_error(
        cli("sailor-planner", *replay, "--checkpoint-interval", seconds),
        "--checkpoint-interval: must be at least 1 s",
    )


@pytest.mark.parametrize(
    "flag, value, needle",
    [
        ("--plan-s", "nan", "--plan-s: must be a finite number"),
        ("--plan-s", "-1", "--plan-s: must be >= 0"),
        ("--hold-last", "0", "--hold-last: must be > 0"),
        ("--min-throughput", "nan", "(CLI --min-throughput)"),
        ("--max-cost-per-iteration", "-1", "(CLI --max-cost-per-iteration)"),
    ],
)
def test_replay_names_the_flag_of_a_bad_number(flag, value, needle):
    """--plan-s nan said 'reconfig.plan_s: must be >= 0', --hold-last 0 'hold_last_s: ...' and
    --min-throughput nan 'min_throughput: ...': fields of the request, not the flags typed."""
    replay = ["replay", "--trace", str(SPOT_TRACE), "--model", "OPT-350M", "--policies", "sailor"]
    one_line_error(cli("sailor-planner", *replay, flag, value), needle)


def test_an_empty_profile_folder_is_a_warning_not_silence(tmp_path):
    """A folder without a profile file estimated on the analytic profiles and said nothing, as
    if it held this machine's measurements."""
    empty = tmp_path / "profiles"
    empty.mkdir()
    gpus = ["--gpus", "A100-40@us-central1-a=8"]
    replay = ["replay", "--trace", str(SPOT_TRACE), "--model", "OPT-350M", "--policies", "sailor"]
    for args in ([*PLAN, *gpus], replay):
        r = cli("sailor-planner", *args, "--profile-dir", str(empty))
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stderr.strip().splitlines() == [
            f"warning: --profile-dir {empty} holds no profile files (*.json); using the "
            "built-in analytic profiles and default links instead"
        ]


def test_profiler_merge_inputs_and_outputs(files, tmp_path):
    one_line_error(
        cli("sailor-profiler", "merge", str(files["garbage_dir"]), "--out", str(tmp_path / "m")),
        "binary",
    )
    one_line_error(
        cli("sailor-profiler", "merge", str(files["garbage"]), "--out", str(tmp_path / "m")),
        "not a folder",
    )
    one_line_error(
        cli("sailor-profiler", "merge", str(tmp_path), "--out", str(files["garbage"])),
        "is a file",
    )
    one_line_error(cli("sailor-profiler", "merge", str(tmp_path), "--out", "/proc/x"), "--out")


@pytest.mark.parametrize(
    "args, needle",
    [
        # a typo ran for years: a billion timed repetitions of every message size or layer
        (["network", "--reps", "1000000000"], "reps: must be from 1 to 1000"),
        (["network", "--warmup", "1000000000"], "warmup: must be from 0 to 1000"),
        (["compute", "--model", "tiny-gpt", "--reps", "1000000000"], "reps: must be from 1"),
        # every rank asked for a terabyte buffer
        (["network", "--max-bytes", "1000G"], "max_bytes: must be at most 8G"),
        # refused before any rank process starts: no multiprocessing warning after the line
        (["network", "--reps", "0"], "reps: must be from 1 to 1000"),
    ],
)
def test_profiler_repetitions_and_message_sizes_are_bounded(tmp_path, args, needle):
    one_line_error(cli("sailor-profiler", *args, "--out", str(tmp_path / "p")), needle)


QUICK_SWEEP = ["--mbs", "1", "--reps", "1", "--warmup", "0", "--blocks", "1", "--no-plot"]


@pytest.mark.parametrize(
    "tool, args, needle",
    [
        # Path("") is ".": these read or wrote the current folder as if it had been named
        ("sailor-profiler", ["compute", "--model", "nope", "--out", ""], "'--out': is empty"),
        ("sailor-planner", [*PLAN, "--profile-dir", ""], "'--profile-dir': is empty"),
        ("sailor", ["run", "--local", "--model", "nope", "--run-dir", ""], "'--run-dir': is empty"),
        # "" meant "not given": filed under the detected type, or measured as --zone
        (
            "sailor-profiler",
            ["compute", "--model", "tiny-gpt", *QUICK_SWEEP, "--out", "OUT", "--gpu-type", ""],
            "unknown GPU type ''",
        ),
        ("sailor-profiler", ["network", "--out", "OUT", "--peer-zone", ""], "peer_zone: is empty"),
        # "" meant "detect CUDA"
        (
            "sailor",
            ["worker", "--controller", "127.0.0.1:1", "--workdir", "OUT", "--gpu-type", ""],
            "--gpu-type: is empty",
        ),
    ],
)
def test_an_empty_name_or_path_is_refused_naming_the_flag(tmp_path, tool, args, needle):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    one_line_error(cli(tool, *args), needle)


def test_run_refuses_what_cannot_work_at_once(files):
    start = time.monotonic()
    one_line_error(cli("sailor", "run", "--local", "--gpu-types", "XYZ"), "XYZ")
    assert time.monotonic() - start < 60  # not the 900 s wait for refused workers
    one_line_error(cli("sailor", "run", "--local", "--run-dir", str(files["garbage"])), "is a file")
    one_line_error(cli("sailor", "run", "--local", "--json", "/proc/x/summary.json"), "--json")
    one_line_error(cli("sailor", "controller", "--planner", "x:1", "--port", "70000"), "--port")


def test_a_local_run_without_profiling_still_bounds_its_workers():
    """--no-profile skipped the only bound on --workers: 100000 set out to start 300000
    processes. (The unknown model stops a run that passed the check before it starts.)"""
    r = cli("sailor", "run", "--local", "--no-profile", "--workers", "100000", "--model", "nope")
    one_line_error(r, "--workers: must be at most")
    assert "per core" in r.stderr and "got 100000" in r.stderr


def test_a_worker_added_after_the_last_step_is_warned_about(tmp_path):
    args = ["run", "--local", "--workers", "1", "--steps", "4", "--add-worker-at-step", "50"]
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY["sailor"], *args, "--run-dir", str(tmp_path / "run")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its planner and workers die with it below
    )
    try:
        first = proc.stderr.readline() if proc.stderr else ""
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert first.startswith("warning: --add-worker-at-step 50") and "not be used" in first


def test_a_taken_port_is_one_line_from_every_server(tmp_path):
    """No gRPC C-core line (``add_port.cc ... Failed to add port``) before ours."""
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = str(holder.getsockname()[1])
        one_line_error(cli("sailor-planner", "serve", "--port", port), "in use")
        controller = ["controller", "--planner", "127.0.0.1:9", "--run-dir", str(tmp_path / "r")]
        one_line_error(cli("sailor", *controller, "--port", port), "in use")
        worker = ["worker", "--controller", "127.0.0.1:9", "--gpu-type", "CPU", "--cold"]
        one_line_error(cli("sailor", *worker, "--workdir", str(tmp_path / "w"), "--port", port),
                       "in use")  # fmt: skip


@pytest.mark.parametrize("host", ["192.0.2.1", "no-such-host.invalid"])
def test_a_host_not_of_this_machine_is_one_line_naming_host_from_every_server(tmp_path, host):
    """With --port 0 (every server's default) the address was not probed: the planner printed
    the C-core line and 'address: cannot bind' (no flag, no reason), the worker the C-core
    line, and the controller locked its run folder and loaded torch (~15 s) to blame
    --store-port. 192.0.2.1 is TEST-NET-1 (RFC 5737): never a local address."""
    need = f"--host: cannot listen on {host} ("
    serve = ["serve", "--host", host, "--token", "t"]
    one_line_error(cli("sailor-planner", *serve), need)
    controller = ["controller", "--planner", "127.0.0.1:9", "--run-dir", str(tmp_path / "r")]
    one_line_error(cli("sailor", *controller, "--host", host, "--token", "t"), need)
    worker = ["worker", "--controller", "127.0.0.1:9", "--gpu-type", "CPU", "--cold"]
    one_line_error(cli("sailor", *worker, "--workdir", str(tmp_path / "w"), "--host", host,
                       "--token", "t"), need)  # fmt: skip


def test_a_model_file_that_is_not_a_config_json_is_named_so(tmp_path):
    (tmp_path / "mytext.txt").write_text("to be or not to be\n")
    r = subprocess.run(
        [sys.executable, "-c", ENTRY["sailor"], "run", "--local", "--model", "mytext.txt"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    one_line_error(r, "is a file but not a JSON config.json")


def test_a_worker_without_its_controller_says_it_waits(tmp_path):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY["sailor"], "worker", "--controller", address,
         "--gpu-type", "CPU", "--cold", "--workdir", str(tmp_path / "w")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        first = proc.stderr.readline() if proc.stderr else ""  # blocks until the line comes
    finally:
        proc.kill()
        proc.wait()
    assert f"waiting for the controller at {address}" in first, first
