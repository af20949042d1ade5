"""Execution features that change the simulator's time and memory terms: FP8 GEMMs (``fp8``)
and context parallelism (``context_parallel``)."""
