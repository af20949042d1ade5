"""``python -m sailor_sim.cli``."""

from .app import main

main()
