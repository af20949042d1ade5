"""Shared fixtures: one simulator and planner (built-in catalog profiles) per test session."""

import os
from pathlib import Path

import pytest

from sailor_planner.planner import Planner
from sailor_sim.simulate.simulator import Simulator


@pytest.fixture(scope="session")
def sim() -> Simulator:
    return Simulator()


@pytest.fixture(scope="session")
def planner(sim) -> Planner:
    return Planner(sim)


REFERENCE = Path(
    os.environ.get("SAILOR_REFERENCE", Path(__file__).resolve().parents[4] / "shared" / "reference")
)
SAILOR_ROOT = REFERENCE / "sailor-artifacts"


@pytest.fixture(scope="session")
def sailor_planner() -> Planner:
    """The planner on the original Sailor profiles and network fits (read from
    ../shared/reference, never copied), shared with the CLI's source cache."""
    if not SAILOR_ROOT.is_dir():
        pytest.skip(f"original Sailor artifacts not found at {SAILOR_ROOT} (set SAILOR_REFERENCE)")
    from sailor_planner.sources import planner_for

    return planner_for(None, str(SAILOR_ROOT))


@pytest.fixture(scope="session")
def sailor_root(sailor_planner) -> Path:
    """The original Sailor checkout (skips like ``sailor_planner`` when absent)."""
    return SAILOR_ROOT


@pytest.fixture(scope="module")
def stub():
    """A PlannerService stub on a real server of this module's own (127.0.0.1, an ephemeral
    port), stopped after the module."""
    import grpc

    from sailor_planner.proto import planner_pb2_grpc
    from sailor_planner.service.server import create_server

    server, port = create_server("127.0.0.1:0")
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield planner_pb2_grpc.PlannerServiceStub(channel)
    server.stop(grace=None)
