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


def main() -> int:
    import torch  # noqa: F401 - the point: import before the command arrives

    from ..engine import worker

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
