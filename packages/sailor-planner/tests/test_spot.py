"""Spot preemptions: Young/Daly intervals, the first-order waste, and the replay's advice."""

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sailor_planner.cli import app
from sailor_planner.errors import RequestError
from sailor_planner.replay.spot import advise, daly_interval, waste_fraction, young_interval

SPOT = Path(__file__).resolve().parents[1] / "examples" / "traces" / "spot.csv"


def test_young_and_daly_intervals() -> None:
    assert young_interval(2.0, 100.0) == pytest.approx(20.0)  # sqrt(2 * 2 * 100)
    # Daly (2006) eq. 37 with x = delta / (2 M) = 0.01: 20 (1 + 0.1/3 + 0.01/9) - 2
    assert daly_interval(2.0, 100.0) == pytest.approx(20 * (1 + 0.1 / 3 + 0.01 / 9) - 2)
    assert daly_interval(300.0, 100.0) == 100.0  # delta >= 2M: checkpoint once per MTBF


def test_the_intervals_minimise_the_first_order_waste() -> None:
    delta, mtbf, restart = 5.0, 3 * 3600.0, 10.0
    tau = young_interval(delta, mtbf)
    best = waste_fraction(tau, delta, mtbf, restart)
    for other in (tau * 0.8, tau * 1.25):
        assert waste_fraction(other, delta, mtbf, restart) > best
    assert best == pytest.approx(math.sqrt(2 * delta / mtbf) + restart / mtbf)


def test_bad_inputs_are_named() -> None:
    with pytest.raises(RequestError, match="mean time between preemptions"):
        young_interval(1.0, 0.0)
    with pytest.raises(RequestError, match="checkpoint_interval_s"):
        waste_fraction(0.0, 1.0, 10.0, 1.0)


def test_advice_prices_lost_work() -> None:
    kwargs = dict(duration_s=86400.0, save_s=5.0, restart_s=10.0, samples_per_s=100.0,
                  usd_per_hour=36.0, sequence_length=1000)  # fmt: skip
    assert advise(preemptions=0, interval_s=600.0, **kwargs) is None
    a = advise(preemptions=8, interval_s=3600.0, **kwargs)
    assert a.mtbf_s == 10800.0
    no_loss = 36.0 / 3600 / (100 * 1000) * 1e6
    assert a.usd_per_million_tokens == pytest.approx(no_loss / (1 - a.waste))
    assert a.usd_per_million_tokens_at_daly < a.usd_per_million_tokens


def test_replay_prints_the_spot_advice() -> None:
    out = CliRunner().invoke(
        app, ["replay", "--trace", str(SPOT), "--model", "OPT-350M", "--gbs", "256",
              "--policies", "sailor"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "preemptions, one every" in out.output and "optimum interval" in out.output
