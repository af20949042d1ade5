"""Network profiling: the alpha-beta fit, and a real 2-process gloo profile that the simulator
loads."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sailor_profiler.cli import app
from sailor_profiler.network.fit import fit_latency_bandwidth
from sailor_profiler.network.measure import message_sizes
from sailor_sim.simulate.network import Endpoint, load_network_file
from sailor_sim.simulate.simulator import Simulator


def test_fit_recovers_latency_and_bandwidth():
    sizes = [2**k for k in range(16, 31)]
    times = [50e-6 + m / 10e9 for m in sizes]
    fit = fit_latency_bandwidth(sizes, times)
    assert fit.latency_s == pytest.approx(50e-6, rel=1e-6)
    assert fit.bandwidth_Bps == pytest.approx(10e9, rel=1e-6)
    assert fit.rel_rmse < 1e-9


def test_fit_stays_physical_when_the_line_crosses_zero():
    # Small messages faster than a straight line through the big ones: intercept < 0.
    sizes = [1e5, 1e6, 1e7, 1e8]
    times = [1e-6, 5e-5, 1e-3, 1e-2]
    fit = fit_latency_bandwidth(sizes, times)
    assert fit.latency_s == 0.0 and fit.bandwidth_Bps > 0
    for m in (1.0, 1e3, 1e12):  # far outside the measured range
        assert fit.time_s(m) > 0
        assert fit.effective_bandwidth(m) <= fit.bandwidth_Bps


def test_fit_handles_times_that_do_not_grow():
    fit = fit_latency_bandwidth([1e5, 1e6, 1e7], [3e-3, 2e-3, 2.5e-3])
    assert fit.latency_s >= 0 and fit.bandwidth_Bps > 0
    assert fit.time_s(2e7) > fit.time_s(1e7)


def test_message_sizes_span_64k_to_1g():
    sizes = message_sizes(64 * 1024, 1024**3)
    assert sizes[0] == 65536 and sizes[-1] == 1024**3 and len(sizes) == 15


def test_two_gloo_processes_produce_a_profile_the_simulator_loads(tmp_path):
    out = tmp_path / "net"
    result = CliRunner().invoke(
        app,
        [
            "network",
            "--procs",
            "2",
            "--max-bytes",
            "512K",
            "--reps",
            "3",
            "--warmup",
            "1",
            "--busy-ms",
            "2",
            "--out",
            str(out),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert set(summary["fits"]) == {"p2p", "allreduce"}
    network = load_network_file(out / "links.json")
    link = network.link(Endpoint("local", "CPU", 1), Endpoint("local", "CPU", 1))
    assert link.source.startswith("measured")
    assert link.latency_s >= 0 and link.max_bandwidth > 0
    times = [link.time(m) for m in (1, 64e3, 1e6, 1e9, 1e12)]
    assert all(t > 0 for t in times) and times == sorted(times)
    # The measured ring: the all-reduce fit in bus terms, carried by the p2p link.
    fit = summary["fits"]["allreduce"]
    assert link.ring_bus_bandwidth == pytest.approx(fit["bandwidth_Bps"] * 2 * (2 - 1) / 2)
    assert link.ring_hop_latency_s == pytest.approx(fit["latency_s"] / 2)
    assert "ms of compute before each repetition" in link.source
    intra = network.intra_node("CPU", 2)
    assert intra.source.startswith("measured") and intra.max_bandwidth > 0
    sim = Simulator.from_profile_dir(out)  # links.json alone is a valid profile folder
    assert sim.network.link(Endpoint("local", "CPU", 1), Endpoint("local", "CPU", 1)) == link
    side = out / "profiler"
    for name in ("network.parquet", "network.csv", "network.png", "network.json"):
        assert (side / name).stat().st_size > 0, name


def _measure(out, *zones: str):
    args = ["network", "--procs", "2", "--max-bytes", "128K", "--reps", "2", "--warmup", "0"]
    return CliRunner().invoke(app, [*args, *zones, "--out", str(out)])


def test_a_second_zone_pair_measured_into_a_folder_keeps_the_first(tmp_path):
    """links.json gains the new curves and keeps the folder's others; before, the second
    measurement wrote over the first (a cross-zone link after an intra-zone one lost it)."""
    out = tmp_path / "net"
    assert _measure(out).exit_code == 0
    local = Endpoint("local", "CPU", 1)
    first = load_network_file(out / "links.json").link(local, local)
    result = _measure(out, "--zone", "us-central1-a", "--peer-zone", "us-central1-b")
    assert result.exit_code == 0, result.output
    network = load_network_file(out / "links.json")
    assert network.link(local, local) == first  # kept as it was
    a, b = Endpoint("us-central1-a", "CPU", 1), Endpoint("us-central1-b", "CPU", 1)
    assert network.link(a, b).source.startswith("measured")
    doc = json.loads((out / "links.json").read_text())
    assert len(doc["links"]) == 2 and len(doc["intra_node"]) == 1  # the group measured again


def test_a_corrupt_links_file_stops_network_before_it_measures(tmp_path):
    out = tmp_path / "net"
    out.mkdir()
    (out / "links.json").write_text("{not json")
    result = _measure(out)
    assert result.exit_code == 2
    assert "links.json is corrupt" in result.output and "Traceback" not in result.output
    assert (out / "links.json").read_text() == "{not json"  # left for its owner to look at
    assert not (out / "profiler").exists()  # nothing measured
