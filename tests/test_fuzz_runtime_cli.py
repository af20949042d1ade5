"""Property-based test of every option of the runtime's commands (`sailor run`, `controller`,
`worker`; issue 24, item 1): a hostile value is refused with exit 2 and one line naming that
flag, before anything starts; a valid value passes the checks.

Every invocation also carries a value that is refused *after* the option checks (an unknown
model, an unknown device type), so a check that wrongly accepts ends there with a message that
names the other flag (the test fails) instead of starting a controller or a worker.
"""

from __future__ import annotations

import contextlib
import io
import math
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sailor_runtime.cli import app
from sailor_sim import inputs

FUZZ = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])

RUN_DIR = tempfile.mkdtemp(prefix="sailor-fuzz-")  # the controller checks it is writable
BASE = {
    "run": ["run", "--local", "--model", "no-such-model"],
    "controller": [
        "controller",
        "--planner",
        "127.0.0.1:1",
        "--model",
        "no-such-model",
        "--run-dir",
        RUN_DIR,
    ],
    "worker": ["worker", "--controller", "127.0.0.1:1", "--gpu-type", "no-such-device"],
}
LATE_FLAG = {"run": "model", "controller": "model", "worker": "gpu"}
"""What the late refusal names when every checked option was accepted."""

bad_count = st.integers(max_value=0) | st.sampled_from(["2.5", "x", "1e3", ""])
bad_step = st.integers(max_value=-1) | st.sampled_from(["-0.5", "three"])
bad_seconds = st.sampled_from(["nan", "inf", "-inf", "0", "-1", "x"]) | st.floats(max_value=0)
bad_address = st.text(max_size=40).filter(lambda t: ":" not in t) | st.sampled_from(
    ["host:0", "host:70000", ":80", "a b:1", "::1:5", "h:-1", "garbage"]
)
bad_id = st.sampled_from(["../../x", "/etc", "-rf", "", "a/b", "x" * 65, "a b", "é"])
bad_policy = st.text(max_size=12).filter(lambda t: t not in ("stop", "continue"))
bad_host = st.sampled_from(["a b", "../x", "-x", "a/b", "é", "h;rm", "", "[::1"])

OPTIONS = {
    "run": {
        "--workers": bad_count,
        "--steps": bad_count,
        "--global-batch-size": bad_count,
        "--seq-len": bad_count,
        "--checkpoint-every": bad_count,
        "--kill-rank-at-step": bad_step,
        "--kill-worker-at-step": bad_step,
        "--add-worker-at-step": bad_step,
        "--heartbeat-timeout": bad_seconds,
        "--seed": st.integers(max_value=-1) | st.integers(min_value=2**32),
        "--timeout": bad_seconds,
        "--time-scale": bad_seconds,
        "--gpu-types": st.sampled_from([",,", "cpu-1t,", " ", "../x", "cpu-1t,,cpu-2t"]),
        "--on-save-error": bad_policy,
    },
    "controller": {
        "--planner": bad_address,
        "--steps": bad_count,
        "--checkpoint-every": bad_count,
        "--global-batch-size": bad_count,
        "--seq-len": bad_count,
        "--host": bad_host,
        "--port": st.integers(max_value=-1) | st.integers(min_value=65536),
        "--min-workers": bad_count,
        "--heartbeat-interval": bad_seconds,
        "--heartbeat-timeout": bad_seconds,
        "--debounce": st.sampled_from(["nan", "inf", "-1", "-0.001"]),
        "--max-failures": st.integers(max_value=-1),
        "--seed": st.integers(max_value=-1) | st.integers(min_value=2**32),
        "--lr": st.sampled_from(["nan", "inf", "-1e-3"]),
        "--on-save-error": bad_policy,
        "--run-dir": st.sampled_from(["/proc/sailor-x", "/dev/null", "/etc/hostname"]),
    },
    "worker": {
        "--controller": bad_address,
        "--gpus": bad_count,
        "--zone": bad_id,
        "--host": bad_host,
        "--worker-id": bad_id,
        "--threads-per-rank": bad_count,
        "--first-core": st.integers(max_value=-1),
        "--controller-timeout": bad_seconds,
    },
}
GOOD = {
    "--workers": "2", "--steps": "3", "--global-batch-size": "8", "--seq-len": "16",
    "--checkpoint-every": "2", "--kill-rank-at-step": "0", "--kill-worker-at-step": "2",
    "--add-worker-at-step": "1", "--heartbeat-timeout": "9", "--seed": "4294967295",
    "--timeout": "0.5", "--time-scale": "2", "--gpu-types": "cpu-2t,cpu-1t",
    "--planner": "[::1]:5", "--host": "127.0.0.1", "--port": "0", "--min-workers": "1",
    "--heartbeat-interval": "0.5", "--debounce": "0", "--max-failures": "0", "--lr": "0.01",
    "--controller": "localhost:50051", "--gpus": "2", "--zone": "us-central1-a",
    "--worker-id": "node-1.a_b", "--threads-per-rank": "2", "--first-core": "0",
    "--controller-timeout": "1e-3", "--on-save-error": "continue", "--run-dir": RUN_DIR,
}  # fmt: skip

CASES = [(command, flag) for command, options in OPTIONS.items() for flag in options]


def invoke(command: str, flag: str, value) -> tuple[int, list[str]]:
    """The `sailor` entry point (``inputs.run_app``) in this process: (exit status, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exited:
        inputs.run_app(app, "sailor", [*BASE[command], f"{flag}={value}"])
    return exited.value.code, [line for line in err.getvalue().splitlines() if line.strip()]


@pytest.mark.parametrize("command, flag", CASES)
@FUZZ
@given(data=st.data())
def test_a_hostile_option_is_one_line_and_exit_2(command, flag, data):
    value = data.draw(OPTIONS[command][flag], label=flag)
    if isinstance(value, float) and math.isnan(value):
        value = "nan"
    code, lines = invoke(command, flag, value)
    assert code == 2, (command, flag, value, lines)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert flag in lines[0], (flag, value, lines[0])


def test_valid_options_pass_every_check():
    for command, flag in CASES:
        code, lines = invoke(command, flag, GOOD[flag])
        assert code == 2, (command, flag, lines)
        assert LATE_FLAG[command] in " ".join(lines).lower(), (command, flag, lines)
