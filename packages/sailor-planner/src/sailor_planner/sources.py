"""Where profiles come from: the built-in catalog, a profile folder, or an original Sailor checkout.

One ``Planner`` (and its simulator and memo tables) is kept per source, so repeated requests and
re-plans on the same source reuse every table already built.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from .errors import RequestError

_LOCK = threading.Lock()
_PLANNERS: dict[tuple, object] = {}


def load_simulator(profile_dir: str | None = None, sailor_root: str | None = None):
    """A ``sailor_sim.simulate.simulator.Simulator`` for the given profile source."""
    from sailor_sim import Simulator

    if profile_dir and sailor_root:
        raise RequestError(
            "give either a profile folder or a Sailor root, not both", field="profile_dir"
        )
    if sailor_root:
        if not Path(sailor_root).is_dir():
            raise RequestError(f"{sailor_root} is not a folder", field="sailor_root")
        return _cached_sailor_root(Simulator, sailor_root)
    if profile_dir:
        if not Path(profile_dir).is_dir():
            raise RequestError(f"{profile_dir} is not a folder", field="profile_dir")
        return _from_profile_dir(Simulator, profile_dir)
    return Simulator()


CACHE_ENV = "SAILOR_PLANNER_CACHE"
"""Folder of the parsed-profile cache (default ~/.cache/sailor-planner; 'off' disables it)."""


def _cache_folder() -> Path | None:
    from sailor_sim import inputs

    return inputs.cache_folder(CACHE_ENV, "sailor-planner")


def simulator_code() -> tuple:
    """What identifies the code that parsed and pickled a cache entry: sailor-sim's version and
    the (name, size, mtime) of its source files, so an edited or upgraded simulator (whose
    classes may have gained attributes) never reads an old pickle."""
    import sailor_sim

    return (sailor_sim.__version__, tuple(_fingerprint(Path(sailor_sim.__file__).parent)))


def _cached_sailor_root(simulator_cls, sailor_root: str):
    """``Simulator.from_sailor_root``, its parsed profiles and network kept on disk keyed by
    the content of the checkout (names, sizes and times of its files) and the sailor-sim code
    (``simulator_code``): parsing the original JSON takes ~0.3 s CPU of every command, reading
    the cache ~0.02 s. Any problem with the cache falls back to parsing (and never fails)."""
    import hashlib
    import pickle

    folder = _cache_folder()
    if folder is None:
        return simulator_cls.from_sailor_root(sailor_root)
    root = Path(sailor_root).resolve()  # (source_key's hash() is salted per process)
    ident = repr((str(root), _fingerprint(root), simulator_code(), simulator_cls.__name__))
    path = folder / f"sailor-root-{hashlib.sha256(ident.encode()).hexdigest()[:24]}.pickle"
    try:
        if path.is_file() and path.stat().st_uid == os.getuid():  # only our own file
            profiles, network = pickle.loads(path.read_bytes())
            return simulator_cls(profiles, network)
    except Exception:  # a stale or broken cache entry: parse again below
        pass
    sim = simulator_cls.from_sailor_root(sailor_root)
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps((sim.profiles, sim.network), protocol=5))
        os.chmod(tmp, 0o600)
        tmp.replace(path)  # atomic: a concurrent reader sees the old file or the new one
    except OSError:
        pass
    return sim


def _from_profile_dir(simulator_cls, profile_dir: str):
    if hasattr(simulator_cls, "from_profile_dir"):
        return simulator_cls.from_profile_dir(profile_dir)
    from sailor_sim import ProfileStore

    return simulator_cls(profiles=ProfileStore.load(profile_dir))


MAX_PLANNERS = 8
"""Profile sources whose Planner (simulator and memo tables) is kept, least recently used
dropped first: a long-running server stays bounded whatever paths clients send."""
MAX_FINGERPRINT_FILES = 4096
"""Files of a profile source looked at to identify its content (a Sailor checkout is large)."""


def source_key(profile_dir: str | None, sailor_root: str | None) -> tuple:
    """What identifies a profile source: its resolved path and the (name, size, mtime) of the
    files in it, so 'adir', 'adir/.' and 'adir/./.' are one source, and an edited folder is a
    new one."""
    kind, raw = ("profile_dir", profile_dir) if profile_dir else ("sailor_root", sailor_root)
    if not raw:
        return ("builtin",)
    root = Path(raw)
    if not root.is_dir():
        raise RequestError(f"{raw} is not a folder", field=kind)
    root = root.resolve()
    return (kind, str(root), hash(tuple(_fingerprint(root))))


def _fingerprint(root: Path) -> list[tuple[str, int, int]]:
    """(relative name, size, mtime) of the first MAX_FINGERPRINT_FILES files under ``root``,
    walked in name order and stopped there (a client may name '/')."""
    files: list[tuple[str, int, int]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            try:
                st = path.stat()
            except OSError:
                continue
            files.append((str(path.relative_to(root)), st.st_size, st.st_mtime_ns))
            if len(files) >= MAX_FINGERPRINT_FILES:
                return files
    return files


def planner_for(profile_dir: str | None = None, sailor_root: str | None = None):
    """The shared ``Planner`` for a profile source (built once, then reused; at most
    MAX_PLANNERS kept)."""
    from .planner import Planner

    if profile_dir and sailor_root:
        raise RequestError(
            "give either a profile folder or a Sailor root, not both", field="profile_dir"
        )
    key = source_key(profile_dir, sailor_root)
    with _LOCK:
        planner = _PLANNERS.pop(key, None)
        if planner is not None:
            _PLANNERS[key] = planner  # most recently used last
            return planner
    planner = Planner(load_simulator(profile_dir, sailor_root))
    with _LOCK:
        planner = _PLANNERS.setdefault(key, planner)
        while len(_PLANNERS) > MAX_PLANNERS:
            _PLANNERS.pop(next(iter(_PLANNERS)))
    return planner


def cached_planners() -> int:
    """How many planners are kept (for tests and the load bench)."""
    with _LOCK:
        return len(_PLANNERS)
