"""Shared fixtures: one simulator and planner (built-in catalog profiles) per test session."""

import pytest

from sailor_planner.planner import Planner
from sailor_sim.simulator import Simulator


@pytest.fixture(scope="session")
def sim() -> Simulator:
    return Simulator()


@pytest.fixture(scope="session")
def planner(sim) -> Planner:
    return Planner(sim)
