"""Where profiles come from: the built-in catalog, a profile folder, or an original Sailor checkout.

One ``Planner`` (and its simulator and memo tables) is kept per source, so repeated requests and
re-plans on the same source reuse every table already built.
"""

from __future__ import annotations

import threading
from pathlib import Path

from .errors import RequestError

_LOCK = threading.Lock()
_PLANNERS: dict[tuple[str, str], object] = {}


def load_simulator(profile_dir: str | None = None, sailor_root: str | None = None):
    """A ``sailor_sim.simulator.Simulator`` for the given profile source."""
    from sailor_sim.simulator import Simulator

    if profile_dir and sailor_root:
        raise RequestError(
            "give either a profile folder or a Sailor root, not both", field="profile_dir"
        )
    if sailor_root:
        if not Path(sailor_root).is_dir():
            raise RequestError(f"{sailor_root} is not a folder", field="sailor_root")
        return Simulator.from_sailor_root(sailor_root)
    if profile_dir:
        if not Path(profile_dir).is_dir():
            raise RequestError(f"{profile_dir} is not a folder", field="profile_dir")
        return _from_profile_dir(Simulator, profile_dir)
    return Simulator()


def _from_profile_dir(simulator_cls, profile_dir: str):
    if hasattr(simulator_cls, "from_profile_dir"):
        return simulator_cls.from_profile_dir(profile_dir)
    from sailor_sim import profiles

    return simulator_cls(profiles=profiles.ProfileStore.load(profile_dir))


def planner_for(profile_dir: str | None = None, sailor_root: str | None = None):
    """The shared ``Planner`` for a profile source (built once, then reused)."""
    from .planner import Planner

    key = (str(profile_dir or ""), str(sailor_root or ""))
    with _LOCK:
        planner = _PLANNERS.get(key)
    if planner is None:
        planner = Planner(load_simulator(profile_dir, sailor_root))
        with _LOCK:
            planner = _PLANNERS.setdefault(key, planner)
    return planner
