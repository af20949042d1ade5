"""Sailor profiler: measure per-layer compute, memory and network bandwidth for sailor-sim."""

__version__ = "0.1.0"
