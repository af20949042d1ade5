"""Helpers shared by the tests of every package: a free loopback port, and gloo process groups
of a few local ranks for the model zoo's tensor-parallel tests.

On ``sys.path`` through pytest's ``pythonpath`` setting (the root pyproject.toml: tests run
with ``--import-mode=importlib``, which puts no test folder there). The rank scripts that
``run_ranks`` starts run outside pytest and find it through ``PYTHONPATH``. torch is imported
only by the functions that need it, so a test importing ``free_port`` does not pay for it.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RANK_TIMEOUT_S = 240
"""Longest a rank script may run (seconds): a few tiny models on a shared 2-core machine."""


def wait_until(predicate, timeout_s: float) -> float:
    """Seconds until ``predicate()`` held (polled every 5 ms); fails after ``timeout_s``."""
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout_s, "condition not reached"
        time.sleep(0.005)
    return time.monotonic() - start


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (Linux ``/proc``): how far
    a server got with a request, which a loaded machine stretches in wall time but not here."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


LISTEN_PORTS_FROM = 20000
"""Lowest port ``free_port`` picks; it picks below the kernel's ephemeral range."""


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A TCP port free on every address a moment ago, for a server another process starts, or
    an address where nothing listens. It is drawn at random below the kernel's ephemeral range:
    a port the kernel handed out (bind to 0) went, in between, to the local end of some other
    test's outgoing connection, and the controller of test_deploy_slurm could not listen
    (CI, 2026-11-29). Another process may still take it: where the code under test can bind
    port 0 itself, let it."""
    floor = _ephemeral_floor()
    draw = random.SystemRandom()
    for _ in range(200 if floor - LISTEN_PORTS_FROM >= 1000 else 0):
        port = draw.randrange(LISTEN_PORTS_FROM, floor)
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # no room below the ephemeral range: the kernel's choice
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def run_ranks(tmp: Path, script: str, world: int, *args: str) -> None:
    """Run the Python source ``script`` as ``world`` local processes, each with the argv
    ``rank world port *args`` (``port``: the gloo rendezvous on 127.0.0.1, see ``join``);
    fail the test unless all exit 0 within ``RANK_TIMEOUT_S``. Ranks still running when
    another fails or the time is up are killed, not left behind."""
    path = tmp / "ranks.py"
    path.write_text(script)
    port = str(free_port())
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    )
    procs = [
        subprocess.Popen([sys.executable, str(path), str(r), str(world), port, *args], env=env)
        for r in range(world)
    ]
    try:
        codes = [p.wait(timeout=RANK_TIMEOUT_S) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert codes == [0] * world, f"rank exit codes {codes}"


def join() -> tuple[int, int, list[str]]:
    """In a rank script of ``run_ranks``: join the gloo group of its ranks (one thread each:
    several share a small machine's cores); (rank, world size, the remaining argv)."""
    import torch
    import torch.distributed as dist

    rank, world, port, *rest = sys.argv[1:]
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=int(rank), world_size=int(world)
    )
    return int(rank), int(world), rest


def step_grads(model, group) -> dict:
    """In a rank script: the full gradient of every parameter of a TP-parallel zoo ``model``
    as an optimizer step sees it, by name: the TP ranks' partial gradients of replicated
    parameters summed once (``sync_partial_grads``, as the engine does after the last
    microbatch), then each TP shard all-gathered along its split. Collective over ``group``."""
    import torch
    import torch.distributed as dist

    from sailor_profiler.zoo import get_split, sync_partial_grads

    sync_partial_grads(model, group)
    size = dist.get_world_size(group)
    grads = {}
    for name, p in model.named_parameters():
        g = p.grad.contiguous()
        if get_split(p) is not None:
            parts = [torch.empty_like(g) for _ in range(size)]
            dist.all_gather(parts, g, group=group)
            g = torch.cat(parts, get_split(p)[0])
        grads[name] = g
    return grads


def leave() -> None:
    """End a rank script: wait for every rank, then leave the group."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
