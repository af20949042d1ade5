"""Network profiling: p2p and all-reduce times, their alpha-beta fits and the network profile
file; the `network` command."""
