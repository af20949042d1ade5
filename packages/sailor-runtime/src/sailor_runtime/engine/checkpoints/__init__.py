"""Checkpoints: DCP save and load, content hashes, the run fence, and what ranks do when a save
fails."""
