"""Load everything the simulator can use from a folder laid out like a Sailor checkout."""

from __future__ import annotations

from pathlib import Path

from ..errors import ProfileError
from ..profiles.store import ProfileStore
from ..simulate.network import NetworkModel
from .network import read_homogeneous, read_intra_node, read_multizone
from .profiles import read_planner_profiles, read_profiles_tmp

PROFILES_TMP = "sailor/Planner/simulations/profiles_tmp.json"
PLANNER_PROFILES = "sailor/Planner/sailor_planner/profiles"
LLM_INFO = "sailor/Planner/llm_info.json"
NETWORK_HET = "sailor/providers/multizone_bandwidths_het.json"
NETWORK_HOMO = "sailor/providers/network_coeffs_all_homo.json"
INTRA_NODE = "sailor/providers/intra_node_bandwidths.json"
VALIDATION = "sailor/Planner/simulations/validation"


def sailor_root_files(root: str | Path) -> Path:
    root = Path(root)
    if not (root / PROFILES_TMP).exists() and not (root / PLANNER_PROFILES).is_dir():
        raise ProfileError(
            f"{root} has neither {PROFILES_TMP} nor {PLANNER_PROFILES}; point --sailor-root at a "
            "folder laid out like the original Sailor repository",
            field="sailor_root",
        )
    return root


def load_sailor_profiles(root: str | Path, store: ProfileStore | None = None) -> ProfileStore:
    """profiles_tmp.json first; the planner's per-GPU copies fill what it lacks."""
    root = sailor_root_files(root)
    store = store if store is not None else ProfileStore()
    if (root / PROFILES_TMP).exists():
        read_profiles_tmp(root / PROFILES_TMP, store)
    if (root / PLANNER_PROFILES).is_dir():
        read_planner_profiles(root / PLANNER_PROFILES, store)
    return store


def load_sailor_network(root: str | Path, network: NetworkModel | None = None) -> NetworkModel:
    """Homogeneous inter/intra fits, then the multi-zone heterogeneous fits, then intra-node."""
    root = Path(root)
    network = network or NetworkModel()
    if (root / NETWORK_HOMO).exists():
        read_homogeneous(root / NETWORK_HOMO, network)
    if (root / NETWORK_HET).exists():
        read_multizone(root / NETWORK_HET, network)
    if (root / INTRA_NODE).exists():
        read_intra_node(root / INTRA_NODE, network)
    return network
