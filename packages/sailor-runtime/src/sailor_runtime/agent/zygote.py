"""The zygote: one process per agent that imports torch and the engine once, then forks a rank
process per command.

Why: importing torch costs seconds of CPU (tens on a busy small machine). A rank started from
scratch pays that at every (re)start; a spare process kept warm for the next restart pays it
while the current ranks train, competing with them for the cores (measured on a 2-core machine:
four spares importing torch during training made each step 2.5x slower, and skewed every
comparison with the simulator). A fork of a process that already imported torch costs
milliseconds, and nothing runs between restarts. The zygote is single-threaded and never
initializes CUDA or a thread pool, so forking it is safe; ``CUDA_VISIBLE_DEVICES`` and the rest
of a rank's environment are applied in the child, before the engine touches a device.

Protocol, one JSON object per line:

    zygote -> agent   {"ready": true}                 torch and the engine are imported
    agent  -> zygote  {"id": N, "argv": [CONFIG.json], "env": {"RANK": R, ...}, "log": PATH,
                       "preload": [MODULE, ...]}      imported here, once, before the fork
    zygote -> agent   {"started": N, "pid": PID}       the rank is running
                      {"refused": N, "message": M}      a malformed command or a failed fork
                      {"exited": PID, "code": C}        C as ``Popen.returncode`` (-S: signal S)

EOF on stdin ends the zygote. Life is tied down the chain with PR_SET_PDEATHSIG: the zygote
dies with its agent and each rank with the zygote, so a node whose agent is killed loses its
ranks, as a real node failure would.

``python -m sailor_runtime.agent.zygote --once`` is the fallback when there is no zygote: it
reads one command and runs the rank itself (no fork), importing torch after the command
arrived.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable

AGENT_PID_ENV = "SAILOR_AGENT_PID"
PRELOAD_TIMEOUT_S = 25.0
"""How long a fork may wait for the zygote's first import of a preload (3.5 s of CPU for
torch._dynamo, ~10 s on the loaded 2-core dev VM); below the controller's 30 s Assign deadline,
which the agent answers only once its ranks started."""
"""The agent's PID, given to the zygote (and to cold ranks) to check their parent."""


# ---- the zygote process -------------------------------------------------------------------------
def tie_to_parent(parent: int | None) -> None:
    """Die with ``parent`` (SIGKILL on its death); exit now if it is already gone."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: a rank may outlive its node's agent
    if parent is not None and os.getppid() != parent:
        os._exit(0)  # the parent died before the death signal was armed


def run_rank(cmd: dict) -> int:
    """Point stdio at the rank's log, apply its environment and run the engine's entry point."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    fd = os.open(cmd["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.update(cmd.get("env", {}))
    from ..engine import worker

    return worker.main(cmd["argv"])


def _child(cmd: dict, zygote: int, fds: list[int]) -> None:
    """The forked rank: never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in fds:
            os.close(fd)
        tie_to_parent(zygote)
        code = run_rank(cmd)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the agent sees only the exit status: log the cause
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _send(fd: int, obj: dict) -> None:
    os.write(fd, (json.dumps(obj) + "\n").encode())


def _command(
    argv: list[str],
    env: dict[str, str],
    log: str,
    ident: int | None = None,
    preload: tuple[str, ...] = (),
) -> bytes:
    """One agent -> zygote command line."""
    cmd = {"argv": argv, "env": env, "log": log, "preload": list(preload)}
    if ident is not None:
        cmd["id"] = ident
    return (json.dumps(cmd) + "\n").encode()


def _drain(fd: int) -> None:
    """Empty a non-blocking pipe (the signal wakeup fd: its bytes only say 'wake up')."""
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _reap(children: set[int], out: int) -> None:
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            _send(out, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def serve(inp: int = 0, out: int = 1) -> int:
    """Fork a rank per command line on ``inp``; report starts and exits on ``out``. One thread:
    a SIGCHLD wakes ``select`` through the signal wakeup fd."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    me = os.getpid()
    buffered = b""
    _send(out, {"ready": True})
    while True:
        try:
            ready, _, _ = select.select([inp, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            _drain(wake_r)
        _reap(children, out)
        if inp not in ready:
            continue
        data = os.read(inp, 1 << 16)
        if not data:
            return 0
        *lines, buffered = (buffered + data).split(b"\n")
        for line in lines:
            if line.strip():
                _start(line, me, children, [inp, out, wake_r, wake_w])


def _start(line: bytes, me: int, children: set[int], fds: list[int]) -> None:
    """Fork the rank a command line asks for; refuse (and live on) when it cannot."""
    out, ident = fds[1], None
    try:
        cmd = json.loads(line)
        ident = cmd["id"]
        if not isinstance(cmd["argv"], list) or not isinstance(cmd["log"], str):
            raise TypeError("argv must be a list and log a path")
        _preload(cmd.get("preload", []))
        pid = os.fork()
    except (ValueError, KeyError, TypeError, OSError, ImportError) as exc:
        _send(out, {"refused": ident, "message": f"{type(exc).__name__}: {exc}"})
        return
    if pid == 0:
        _child(cmd, me, fds)
    children.add(pid)
    _send(out, {"started": ident, "pid": pid})


def _preload(modules: list[str]) -> None:
    """Import what the rank would import lazily in its first step, once for every later fork
    (``TrainConfig.preload_modules``). Only imports: nothing here may start a thread pool."""
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        raise TypeError("preload must be a list of module names")
    for name in modules:
        if name not in sys.modules:
            importlib.import_module(name)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    agent = os.environ.get(AGENT_PID_ENV)
    tie_to_parent(int(agent) if agent else None)
    if "--once" in argv:
        line = sys.stdin.readline()
        return run_rank(json.loads(line)) if line.strip() else 0
    import torch  # noqa: F401 - the point: import once, before any command arrives

    from ..engine import worker  # noqa: F401 - the rank's imports, done once here
    from ..engine.rank import train  # noqa: F401 - the rank's imports, done once here

    return serve()


# ---- the agent's side ---------------------------------------------------------------------------
class ForkedRank:
    """A rank process forked by a zygote: the part of ``subprocess.Popen``'s interface that the
    agent uses (it cannot ``waitpid`` a grandchild, so the zygote reports the exit)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._done = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout or 0.0)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # once reaped, the PID may belong to someone else
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._done.set()


class ZygoteError(RuntimeError):
    """The zygote is gone or did not answer; the caller starts the rank cold instead."""


class Zygote:
    """The agent's handle on its zygote process (create it on a long-lived thread: the
    zygote's death signal is tied to the thread that spawned it)."""

    def __init__(self, env: dict[str, str], on_exit: Callable[[], None] | None = None) -> None:
        self.on_exit = on_exit
        """Called (on the reader thread) after a rank's exit is recorded."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sailor_runtime.agent.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self.ready = threading.Event()
        self.gone = threading.Event()
        self._lock = threading.Lock()
        self._next_id = 0
        self._started: dict[int, ForkedRank] = {}
        self._refused: dict[int, str] = {}
        self._started_cv = threading.Condition(self._lock)
        self._ranks: dict[int, ForkedRank] = {}
        self._preloaded: set[str] = set()
        threading.Thread(target=self._read, name="zygote-reader", daemon=True).start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if msg.get("ready"):
                self.ready.set()
            elif "started" in msg:
                with self._lock:
                    rank = self._ranks[msg["pid"]] = ForkedRank(int(msg["pid"]))
                    self._started[int(msg["started"])] = rank
                    self._started_cv.notify_all()
            elif "refused" in msg:
                with self._lock:
                    self._refused[msg["refused"]] = str(msg.get("message", ""))
                    self._started_cv.notify_all()
            elif "exited" in msg:
                with self._lock:
                    rank = self._ranks.pop(int(msg["exited"]), None)
                if rank is not None:
                    rank._exited(int(msg["code"]))
                    if self.on_exit is not None:
                        self.on_exit()
        # EOF: the zygote died; its ranks die with it (PR_SET_PDEATHSIG).
        with self._lock:
            orphans, self._ranks = list(self._ranks.values()), {}
            self.gone.set()
            self._started_cv.notify_all()
        for rank in orphans:
            rank._exited(-signal.SIGKILL)
        if orphans and self.on_exit is not None:
            self.on_exit()

    @property
    def alive(self) -> bool:
        return not self.gone.is_set() and self.proc.poll() is None

    def wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.ready.wait(0.1):
            if not self.alive or time.monotonic() > deadline:
                return False
        return True

    def fork(
        self,
        argv: list[str],
        env: dict[str, str],
        log: str,
        timeout_s: float = 30.0,
        preload: tuple[str, ...] = (),
    ):
        """Start a rank, importing ``preload`` in the zygote first (once per zygote; the wait
        for the answer then includes that import); raises ``ZygoteError`` when the zygote
        cannot (dead, or no answer)."""
        if preload and not all(m in self._preloaded for m in preload):
            timeout_s = max(timeout_s, PRELOAD_TIMEOUT_S)
        if not self.wait_ready(timeout_s) or not self.alive:
            raise ZygoteError("zygote not ready")
        with self._lock:
            self._next_id += 1
            ident = self._next_id
            try:
                self.proc.stdin.write(_command(argv, env, log, ident, preload))
                self.proc.stdin.flush()
            except OSError as exc:
                raise ZygoteError(f"zygote gone: {exc}") from None
            answered = self._started_cv.wait_for(
                lambda: ident in self._started or ident in self._refused or self.gone.is_set(),
                timeout_s,
            )
            if ident in self._refused:
                raise ZygoteError(f"zygote refused the rank: {self._refused.pop(ident)}")
            if not answered and not self.gone.is_set():
                # it may still fork the rank later, next to the cold one the caller starts
                # now: kill it (with whatever it forked) rather than risk a rank twice
                self.proc.kill()
                raise ZygoteError(f"zygote did not answer in {timeout_s:.0f} s; killed it")
            if ident not in self._started:
                raise ZygoteError("zygote did not start the rank")
            self._preloaded.update(preload)
            return self._started.pop(ident)

    def close(self, timeout_s: float = 5.0) -> None:
        try:
            self.proc.stdin.close()  # EOF: the zygote exits
        except OSError:
            pass
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_cold(argv: list[str], env: dict[str, str], log: str, base_env: dict[str, str]):
    """A rank in a fresh process that imports torch itself (``--once``): a ``Popen``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sailor_runtime.agent.zygote", "--once"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=base_env,
    )
    proc.stdin.write(_command(argv, env, log))
    proc.stdin.close()
    return proc


if __name__ == "__main__":
    sys.exit(main())
