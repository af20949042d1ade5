"""Smoke test: the package imports and its version matches the installed distribution."""

from importlib.metadata import version

import sailor_sim


def test_version_attribute() -> None:
    assert sailor_sim.__version__ == version("sailor-sim")
