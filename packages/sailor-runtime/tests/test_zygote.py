"""The agent's zygote on real processes: it forks ranks that run the engine's entry point,
reports how they exit, and takes them down with it when the agent dies (a node failure)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sailor_runtime.agent.zygote import AGENT_PID_ENV, Zygote
from sailor_testing import free_port


def _waiting_rank(tmp: Path) -> tuple[list[str], dict[str, str]]:
    """(argv, env) of rank 1 of a 2-rank job whose store nobody hosts: it waits for rendezvous
    (a rank that runs until stopped), then fails after 60 s."""
    from sailor_runtime.engine.config import TrainConfig
    from sailor_sim import Job, Plan, Replica, Stage

    job = Job.create("tiny-gpt", 8, 32)
    plan = Plan((Stage(0, 7, (Replica("CPU", "local", 1, 1, 4),) * 2),)).check(job)
    cfg = TrainConfig.for_job(
        job=job,
        plan=plan,
        steps=1,
        checkpoint_dir=str(tmp / "ckpt"),
        master_port=free_port(),
        store_is_external=True,
        timeout_s=60,
    )
    return [str(cfg.write(tmp / "train.json"))], {"RANK": "1"}


def _gone(pid: int) -> bool:
    """Exited (no such process, or a zombie nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def _wait_gone(pids: list[int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(_gone(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def zygote():
    env = {**os.environ, AGENT_PID_ENV: str(os.getpid()), "OMP_NUM_THREADS": "1"}
    z = Zygote(env)
    assert z.wait_ready(180), "the zygote did not import torch and the engine"
    yield z
    z.close()


@pytest.mark.timeout(240)
def test_zygote_forks_ranks_and_reports_their_exit(zygote, tmp_path):
    # Bad input: the engine's one-line error in the rank's log, exit status 2.
    bad = zygote.fork([str(tmp_path / "missing.json")], {"RANK": "0"}, str(tmp_path / "bad.log"))
    assert bad.wait(60) == 2
    assert "error: config: cannot read" in (tmp_path / "bad.log").read_text()
    # A rank waiting for its peers runs until stopped; SIGTERM ends it (returncode -15).
    t0 = time.monotonic()
    rank = zygote.fork(*_waiting_rank(tmp_path), str(tmp_path / "r1.log"))
    assert time.monotonic() - t0 < 5, "a fork must not re-import torch"
    time.sleep(1.0)
    assert rank.poll() is None and not _gone(rank.pid)
    rank.send_signal(signal.SIGTERM)
    assert rank.wait(30) == -signal.SIGTERM
    rank.send_signal(signal.SIGKILL)  # after the exit: a no-op, never a reused PID


@pytest.mark.timeout(240)
def test_zygote_refuses_bad_commands_and_keeps_serving(zygote, tmp_path):
    """Garbage on its pipe or a malformed command must not take the node's ranks down."""
    from sailor_runtime.agent.zygote import ZygoteError

    zygote.proc.stdin.write(b"\x00\xffnot json\n" + b'{"id": 99, "argv": "x", "log": 1}\n')
    zygote.proc.stdin.flush()
    with pytest.raises(ZygoteError, match="refused the rank: TypeError"):
        zygote.fork("--rank 0", {}, str(tmp_path / "x.log"))  # argv must be a list
    with pytest.raises(ZygoteError, match="refused the rank: ModuleNotFoundError"):
        zygote.fork(["x"], {}, str(tmp_path / "y.log"), preload=("no_such_module_zz",))
    assert zygote.alive
    # A preload is imported by the zygote before the fork (the rank's first step then skips it).
    rank = zygote.fork(*_waiting_rank(tmp_path), str(tmp_path / "ok.log"), preload=("wave",))
    deadline = time.monotonic() + 30  # the forked rank opens its log itself, just after the fork
    while not (tmp_path / "ok.log").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "ok.log").exists()
    rank.kill()
    assert rank.wait(30) == -signal.SIGKILL


@pytest.mark.timeout(240)
def test_killing_the_agent_takes_its_zygote_and_ranks_down(tmp_path):
    """kill -9 of the agent: the zygote dies with it and the ranks with the zygote
    (PR_SET_PDEATHSIG down the chain), as on a failed node."""
    argv, env = _waiting_rank(tmp_path)
    agent = textwrap.dedent(f"""
        import os, sys, time
        from sailor_runtime.agent.zygote import AGENT_PID_ENV, Zygote
        z = Zygote({{**os.environ, AGENT_PID_ENV: str(os.getpid()), "OMP_NUM_THREADS": "1"}})
        assert z.wait_ready(180)
        r = z.fork({argv!r}, {env!r}, {str(tmp_path / "r.log")!r})
        print(z.proc.pid, r.pid, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", agent], stdout=subprocess.PIPE, text=True)
    try:
        zygote_pid, rank_pid = map(int, proc.stdout.readline().split())
        assert not _gone(zygote_pid) and not _gone(rank_pid)
        proc.kill()
        proc.wait()
        assert _wait_gone([zygote_pid, rank_pid], 10), "the node's processes outlived its agent"
    finally:
        proc.kill()


@pytest.mark.timeout(240)
def test_a_cold_rank_runs_the_engine_and_reports_its_status(tmp_path):
    """The fallback when the zygote is gone: a fresh process per rank."""
    from sailor_runtime.agent.zygote import start_cold

    env = {**os.environ, AGENT_PID_ENV: str(os.getpid()), "OMP_NUM_THREADS": "1"}
    proc = start_cold(
        [str(tmp_path / "missing.json")], {"RANK": "0"}, str(tmp_path / "cold.log"), env
    )
    assert proc.wait(120) == 2
    assert "error: config: cannot read" in (tmp_path / "cold.log").read_text()
