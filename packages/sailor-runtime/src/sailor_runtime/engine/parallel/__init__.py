"""How a plan runs in parallel: process groups, the pipeline schedule and its execution, tied
embeddings, ZeRO-1, FSDP and the data-parallel update. Torch-free: ``schedule``."""
