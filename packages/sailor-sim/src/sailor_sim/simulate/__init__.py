"""The simulator: time, memory, network and cost terms composed into an Estimate."""
