"""Profiles measured once per machine, reused by later runs (as the original Sailor profiles
once, offline).

``sailor run`` measures each worker type's layers and the links before it plans. On the 2-core
machine of 2026-11-29 that was 43 s of a 72 s demo run (the 6-layer Shakespeare Llama on
cpu-1t and cpu-2t), on GPUs it is minutes of the cluster's time, and a second run of the same
model on the same hardware measured it all again. So each measurement is also kept in a cache
folder, keyed by everything it depends on:

- the profiler's own arguments (model, dtype, sequence, optimizer, worker type or the link
  settings and process count), the output folder left out; the microbatch sizes and TP
  degrees it sweeps are recorded by the entry instead (each is measured on its own, so an
  entry over more of them serves a run that needs fewer, trimmed to its own);
- the model's content (its ``ModelSpec``: a config.json edited in place is a new model);
- the software (torch's build: its ``version.py``, with the CUDA or ROCm version and git
  commit; Python's version; and the content of the sailor-profiler and sailor-sim sources
  that measure and describe the layers);
- the hardware (the CPU's model name and core count; a GPU worker type names its GPU).

A later run of the same key copies the kept files into its run folder instead of measuring,
and says so on one line, with when the profile was measured. ``SAILOR_PROFILE_CACHE`` names the
folder (default ``$XDG_CACHE_HOME/sailor/profiles``, else ``~/.cache/sailor/profiles``);
``SAILOR_PROFILE_CACHE=off`` measures every run. An entry is complete once its ``entry.json``
is written, last, and only entries owned by this user are read; a damaged one is measured
again and replaced. Any problem writing the cache leaves the run as it was (measured, not
kept).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

from sailor_sim import inputs

CACHE_ENV = "SAILOR_PROFILE_CACHE"
ENTRY_FILE = "entry.json"
KEY_FORMAT = 1
"""Bumped when what a key holds changes, so older entries are never read as new ones."""


def cache_root() -> Path | None:
    """The cache folder, or None where ``SAILOR_PROFILE_CACHE=off``."""
    return inputs.cache_folder(CACHE_ENV, "sailor", "profiles")


SWEEP_FLAGS = ("--mbs", "--tp")
"""The compute profiler's sweep: each (microbatch size, TP degree) is measured on its own, so
an entry measured over more of them serves a run that asks for fewer (``restore``'s ``want``)."""


def profile_key(kind: str, argv: list[str], model) -> str:
    """The cache key of one profiler run: ``argv`` without its ``--out`` value and its sweep
    (``SWEEP_FLAGS``: the entry records which sizes it holds), the model's fields (``repr``
    of its ModelSpec), the software and the hardware."""
    args, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--out" or a in SWEEP_FLAGS:
            skip = True
            continue
        args.append(a)
    ident = repr((KEY_FORMAT, kind, tuple(args), repr(model), software(), hardware()))
    return f"{kind}-{hashlib.sha256(ident.encode()).hexdigest()[:32]}"


@functools.lru_cache(maxsize=1)
def software() -> tuple:
    """torch's build, Python's version and a digest of the code that measures and describes
    the layers (sailor-profiler, sailor-sim), read without importing torch (the controller
    process does not load it)."""
    return (_torch_build(), sys.version.split()[0], _code_digest(("sailor_profiler", "sailor_sim")))


def _torch_build() -> str | None:
    """The text of ``torch/version.py``: its version with the local build tag (``+cu132``;
    the package metadata drops it), CUDA / ROCm versions and git commit."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        return (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return None


def _code_digest(packages: tuple[str, ...]) -> str:
    """sha256 of every ``.py`` file of ``packages`` (name and content, in name order)."""
    digest = hashlib.sha256()
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            digest.update(f"{name}: absent".encode())
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def hardware() -> tuple:
    """The CPU's model name, this machine's core count and architecture (a GPU worker type in
    the profiler's arguments names its GPU)."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (platform.machine(), model, os.cpu_count())


def sweep_pairs(args: list[str]) -> set | None:
    """The (microbatch size, TP) pairs ``sailor-profiler compute ARGS`` measures; None for a
    profiler without a sweep (the links)."""
    mbs_flag, tp_flag = SWEEP_FLAGS
    if mbs_flag not in args:
        return None
    values = lambda flag: [int(v) for v in args[args.index(flag) + 1].split(",")]  # noqa: E731
    return {(m, t) for m in values(mbs_flag) for t in values(tp_flag)}


def restore(key: str, dest: Path, want: set | None = None) -> dict | None:
    """Copy the kept entry ``key`` into ``dest`` (a folder that holds no profile yet), its
    profile trimmed to the (microbatch size, TP) pairs of ``want``; its ``entry.json`` (what
    was measured, when, its sweep), or None where there is no complete entry of ours or its
    sweep lacks a pair of ``want``. The entry is read whole before anything is written: a
    damaged one (an ``entry.json`` or a profile that does not read back) is removed, so the
    run's measurement replaces it; a ``dest`` that cannot be written (a full disk) leaves the
    entry as it is and removes only the half copy (a half copy is no profile)."""
    root = cache_root()
    if root is None:
        return None
    entry = root / key
    marker = entry / ENTRY_FILE
    try:
        if not marker.is_file() or marker.stat().st_uid != os.getuid():
            return None
        meta = _meta(entry)
        if meta is None:
            raise ValueError(f"{marker} is not an entry")
        if want is not None and not want <= _recorded_sweep(meta):
            return None  # measured over fewer sizes than this run needs
        files = _read_entry(entry, want)
    except (OSError, ValueError, KeyError, TypeError):  # damaged: the run's measurement replaces it
        shutil.rmtree(entry, ignore_errors=True)
        return None
    try:
        for name, data in files.items():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(data)
    except OSError:  # the run folder's problem, not the entry's: the entry stays
        shutil.rmtree(dest, ignore_errors=True)
        return None
    return meta


def _read_entry(entry: Path, want: set | None) -> dict[str, bytes]:
    """The files of a kept entry (its ``entry.json`` aside; paths relative to it, the
    profiler's own folder included) as they go into a run folder: every profile JSON (the
    entry's top level) checked to read back (``ValueError`` if not) and, in a compute
    profile, only the entries of ``want``'s pairs kept, as the profiler measures them for
    that sweep (each pair on its own)."""
    files = {
        p.relative_to(entry).as_posix(): p.read_bytes()
        for p in sorted(entry.rglob("*"))
        if p.is_file() and p != entry / ENTRY_FILE
    }
    profiles = [name for name in files if "/" not in name and name.endswith(".json")]
    if not profiles:
        raise ValueError(f"{entry} holds no profile")
    for name in profiles:
        profile = json.loads(files[name])
        if not isinstance(profile, dict):
            raise ValueError(f"{entry / name} is not a profile")
        if want is not None:
            pairs = lambda e: (e["microbatch_size"], e["tp"])  # noqa: E731
            entries = [e for e in profile["entries"] if pairs(e) in want]
            files[name] = json.dumps({**profile, "entries": entries}).encode()
    return files


def keep(key: str, src: Path, what: str, sweep: set | None = None) -> None:
    """Keep the files of ``src`` (one profiler run's output, over ``sweep``'s (microbatch
    size, TP) pairs) as entry ``key``: copied into a temporary folder, its ``entry.json``
    written last, then renamed into place (a reader sees the whole entry or none). An entry
    already there stays unless this one's sweep is larger (kept by a concurrent run, or over
    more sizes). Never fails the run."""
    root = cache_root()
    if root is None:
        return
    tmp = root / f".{key}.{os.getpid()}.tmp"
    old = root / f".{key}.{os.getpid()}.old"
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        _remove_stale(root)
        final = root / key
        there = _meta(final)
        if there is not None and len(_recorded_sweep(there)) >= len(sweep or ()):
            return  # before copying: a complete entry over as many sizes stays
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        meta = {"what": what, "measured_at": timestamp()}
        if sweep is not None:
            meta["sweep"] = sorted(sweep)
        (tmp / ENTRY_FILE).write_text(json.dumps(meta))
        if final.exists():  # incomplete (no entry.json) or over fewer sizes: replaced
            os.replace(final, old)
        os.replace(tmp, final)
    except OSError:
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def timestamp() -> str:
    """When a profile was measured, as entries and run provenance lines print it."""
    return time.strftime("%Y-%m-%d %H:%M:%S %Z")


STALE_S = 3600.0
"""Age after which a temporary folder of ``keep`` is a leftover (its run was killed while
copying) and the next ``keep`` removes it."""


def _remove_stale(root: Path) -> None:
    now = time.time()
    for path in root.glob(".*.*"):
        try:
            if path.suffix in (".tmp", ".old") and now - path.stat().st_mtime > STALE_S:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue


def _meta(entry: Path) -> dict | None:
    try:
        meta = json.loads((entry / ENTRY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _recorded_sweep(meta: dict) -> set:
    """The (microbatch size, TP) pairs an entry holds (none recorded: a profile without a
    sweep, the links)."""
    return {tuple(pair) for pair in meta.get("sweep", ())}
