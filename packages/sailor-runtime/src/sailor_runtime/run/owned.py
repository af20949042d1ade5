"""Children that die with their parent: ``python -m sailor_runtime.run.owned PID MODULE ARGS``.

`sailor run` starts its planner server and its worker agents through this trampoline: it arms
PR_SET_PDEATHSIG (SIGKILL when the parent dies, ``agent.zygote.tie_to_parent``), exits at once
if PID is already gone, then runs MODULE as ``__main__`` with ARGS. The death signal is armed
in the child after exec, not in a ``preexec_fn`` (Python code between fork and exec in a
process with gRPC threads can crash). An agent's zygote and ranks are tied to the agent the same
way, so a `sailor run` killed with -9 leaves no process behind. Linux ties the signal to the
parent *thread* that forked: `sailor run` starts these children from its main thread.
"""

from __future__ import annotations

import os
import runpy
import sys

from ..agent.zygote import tie_to_parent


def command(module: str, *args: str) -> list[str]:
    """The argv that runs ``python -m module args`` as a child owned by this process."""
    return [sys.executable, "-m", __name__, str(os.getpid()), module, *args]


def main(argv: list[str]) -> None:
    parent, module, *args = argv
    tie_to_parent(int(parent))
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
