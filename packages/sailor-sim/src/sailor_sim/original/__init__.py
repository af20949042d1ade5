"""Readers for the original Sailor (SOSP'25) artifacts: plans, and (in sibling modules)
profiles, model info and network fits. Layer ids there are the same as ours."""

from .plans import SailorPlanRecord, read_sailor_plan

__all__ = ["SailorPlanRecord", "read_sailor_plan"]
