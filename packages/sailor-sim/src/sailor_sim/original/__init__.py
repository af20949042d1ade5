"""Readers for the original Sailor (SOSP'25) artifacts: plans, profiles, model info, network
fits and training configs. Layer ids are ours (see ``profiles.py`` for LLAMA-3-8)."""

from .network import read_homogeneous, read_intra_node, read_multizone
from .plans import SailorPlanRecord, read_sailor_plan
from .profiles import (
    read_cluster_config,
    read_llm_info,
    read_planner_profile,
    read_planner_profiles,
    read_profiles_tmp,
    read_training_config,
)
from .root import load_sailor_network, load_sailor_profiles

__all__ = [
    "SailorPlanRecord",
    "load_sailor_network",
    "load_sailor_profiles",
    "read_cluster_config",
    "read_homogeneous",
    "read_intra_node",
    "read_llm_info",
    "read_multizone",
    "read_planner_profile",
    "read_planner_profiles",
    "read_profiles_tmp",
    "read_sailor_plan",
    "read_training_config",
]
