"""One rank's training: ``train`` (rendezvous to the last step), its corpus and sample order,
the memory probe and the per-step metrics line."""
