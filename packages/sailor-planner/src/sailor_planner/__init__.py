"""Sailor planner: search over GPU allocations x parallelization plans; gRPC planner server."""

__version__ = "0.1.0"
