"""Compute profiling: per-layer time, memory and optimizer step over TP x microbatch sweeps;
the `compute` and `plot` commands."""
