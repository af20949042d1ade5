"""Sailor runtime: heterogeneous training on torch.distributed, controller, agents, elasticity."""

__version__ = "0.1.0"
