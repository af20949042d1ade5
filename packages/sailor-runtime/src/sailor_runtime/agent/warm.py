"""A warm rank process: torch and the engine already imported, waiting for its command.

Importing torch costs seconds (tens of seconds on a busy small machine), and a re-plan restarts
every rank, so each agent keeps one of these per device. On its single stdin line, a JSON
object {"argv": [...], "env": {...}, "log": PATH}, it points stdout/stderr at the log, applies
the environment (CUDA_VISIBLE_DEVICES is read at CUDA's first use, after this) and runs the
engine's rank entry point. EOF on stdin (the agent is closing) exits quietly.
"""

from __future__ import annotations

import json
import os
import sys


def _tie_to_agent() -> None:
    """Die with the agent (PR_SET_PDEATHSIG), as the ranks of a failed node do."""
    import ctypes
    import signal

    from .ranks import AGENT_PID_ENV

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: a rank may outlive a killed agent
    agent = os.environ.get(AGENT_PID_ENV)
    if agent and os.getppid() != int(agent):
        sys.exit(0)  # the agent died before the death signal was armed


def main() -> int:
    _tie_to_agent()
    import torch  # noqa: F401 - the point: import before the command arrives

    from ..engine import worker

    print("ready", flush=True)  # the agent registers only once its ranks can start at once
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    cmd = json.loads(line)
    fd = os.open(cmd["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.update(cmd.get("env", {}))
    return worker.main(cmd["argv"])


if __name__ == "__main__":
    sys.exit(main())
