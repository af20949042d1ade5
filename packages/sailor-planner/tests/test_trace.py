"""Availability traces: the Sailor format (CSV / Parquet), the original Sailor traces, and errors
that name the file, row and column."""

import os
from pathlib import Path

import pytest

from sailor_planner.replay.trace import TraceError, read_sailor_trace, read_trace, write_trace

REFERENCE = Path(
    os.environ.get("SAILOR_REFERENCE", Path(__file__).resolve().parents[4] / "shared" / "reference")
)
SAILOR_ROOT = REFERENCE / "sailor-artifacts"
CONFIGS = SAILOR_ROOT / "sailor/Planner/simulations/configs"
needs_reference = pytest.mark.skipif(
    not CONFIGS.is_dir(), reason=f"original Sailor traces not found at {CONFIGS}"
)

HEADER = "timestamp,zone,gpu_type,available,price,preempted\n"


def write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_counts_carry_forward_and_the_last_timestamp_closes_the_trace(tmp_path) -> None:
    path = write(
        tmp_path,
        HEADER
        + "0,us-central1-a,A100-40,16,,\n"
        + "0,us-central1-b,V100-16,8,,\n"
        + "600,us-central1-a,A100-40,8,1.5,8\n"
        + "1800,us-central1-b,V100-16,8,,\n"  # no change: merged into the previous state
        + "3600,us-central1-a,A100-40,16,,\n",
    )
    trace = read_trace(path)
    assert [(s.start_s, s.duration_s) for s in trace.states] == [(0, 600), (600, 3000)]
    first, second = trace.states
    assert first.inventory.count("A100-40", "us-central1-a") == 16
    assert second.inventory.count("A100-40", "us-central1-a") == 8
    assert second.inventory.count("V100-16", "us-central1-b") == 8  # carried forward
    assert second.price("A100-40", "us-central1-a") == 1.5
    assert second.preempted == (("A100-40", "us-central1-a", 8),)
    assert trace.duration_s == 3600 and trace.preemptions == 1


def test_hold_last_gives_the_last_state_a_duration(tmp_path) -> None:
    path = write(tmp_path, HEADER + "0,us-central1-a,A100-40,16,,\n100,us-central1-a,A100-40,8,,\n")
    trace = read_trace(path, hold_last_s=50)
    assert [(s.duration_s, s.inventory.total_gpus) for s in trace.states] == [(100, 16), (50, 8)]


def test_parquet_and_iso_timestamps_read_like_csv(tmp_path) -> None:
    rows = [
        {"timestamp": "2024-04-08T10:00:00", "zone": "us-central1-a", "gpu_type": "A100-40",
         "available": 8},
        {"timestamp": "2024-04-08T11:00:00", "zone": "us-central1-a", "gpu_type": "A100-40",
         "available": 4},
        {"timestamp": "2024-04-08T12:00:00", "zone": "us-central1-a", "gpu_type": "A100-40",
         "available": 4},
    ]  # fmt: skip
    from_csv = read_trace(write_trace(rows, tmp_path / "t.csv"))
    from_parquet = read_trace(write_trace(rows, tmp_path / "t.parquet"))
    assert from_csv.states == from_parquet.states
    assert [s.duration_s for s in from_csv.states] == [3600, 3600]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("0,us-central1-a,A100-40,abc,,\n", "t.csv row 1, column available: must be a whole"),
        ("0,us-central1-a,A100-40,-3,,\n", "t.csv row 1, column available"),
        ("0,mars-1a,A100-40,4,,\n", "t.csv row 1, column zone: unknown zone 'mars-1a'"),
        ("0,us-central1-a,B200-1,4,,\n", "t.csv row 1, column gpu_type:"),
        ("0,us-central1-a,A100-40,4,free,\n", "t.csv row 1, column price: must be a positive"),
        ("x,us-central1-a,A100-40,4,,\n", "t.csv row 1, column timestamp: 'x' is neither"),
        (
            "10,us-central1-a,A100-40,4,,\n5,us-central1-a,A100-40,4,,\n",
            "t.csv row 2, column timestamp: 5 comes before the previous row's 10; sort",
        ),
        (
            "0,us-central1-a,A100-40,4,,\n0,us-central1-a,A100-40,2,,\n",
            "t.csv row 2, column gpu_type: A100-40@us-central1-a appears twice",
        ),
        (
            "0,us-central1-a,A100-40,4,,\n9,us-central1-a,A100-40,0,,8\n",
            "t.csv row 2, column preempted: 8 GPUs of A100-40@us-central1-a preempted but only 4",
        ),
        ("0,us-central1-a,A100-40,4,,\n", "has one timestamp"),
        ("", "t.csv has no rows"),
    ],
)
def test_bad_rows_get_one_line_naming_row_and_column(tmp_path, body, expected) -> None:
    path = write(tmp_path, HEADER + body)
    with pytest.raises(TraceError) as err:
        read_trace(path)
    message = str(err.value)
    assert expected in message and "\n" not in message


def test_missing_and_unknown_columns_are_named(tmp_path) -> None:
    with pytest.raises(TraceError, match="lacks column\\(s\\) available"):
        read_trace(write(tmp_path, "timestamp,zone,gpu_type\n0,us-central1-a,A100-40\n"))
    with pytest.raises(TraceError, match="unknown column\\(s\\) spot"):
        read_trace(write(tmp_path, "timestamp,zone,gpu_type,available,spot\n0,a,b,1,2\n"))
    with pytest.raises(TraceError, match="is not a file"):
        read_trace(tmp_path / "missing.csv")


@needs_reference
def test_original_sailor_traces_read_with_the_original_durations() -> None:
    # Original simulations/utils.py:parse_trace: duration = next change's Timestamp - this one's;
    # the last row closes the trace.
    trace = read_sailor_trace(CONFIGS / "gpu_trace_heterogeneous_imbalanced.csv")
    assert [round(s.duration_s, 3) for s in trace.states] == [123.174, 121.33]
    assert [
        (
            s.inventory.count("A100-40", "us-central1-a"),
            s.inventory.count("V100-16", "us-central1-a"),
        )
        for s in trace.states
    ] == [(32, 96), (80, 240)]
    multizone = read_trace(CONFIGS / "gpu_trace_multizone.csv")  # recognised by its header
    assert multizone.pools[-1] == ("A100-40", "us-west1-b")
    assert [s.inventory.total_gpus for s in multizone.states] == [160, 400]


@needs_reference
def test_original_single_row_trace_needs_hold_last() -> None:
    path = CONFIGS / "gpu_trace_2zones_2gpus.csv"
    with pytest.raises(TraceError, match="--hold-last"):
        read_sailor_trace(path)
    trace = read_sailor_trace(path, hold_last_s=3600)
    assert trace.states[0].inventory.total_gpus == 512 and trace.duration_s == 3600


def test_original_layout_errors_name_the_column(tmp_path) -> None:
    path = write(tmp_path, ",Timestamp,A100-40_us-central1-a\n0,1,8\n1,2,many\n", "o.csv")
    with pytest.raises(TraceError, match="o.csv row 2, column A100-40_us-central1-a"):
        read_sailor_trace(path)
    bad = write(tmp_path, ",Timestamp,A100-40\n0,1,8\n", "h.csv")
    with pytest.raises(TraceError, match="not <GPU>_<zone>"):
        read_sailor_trace(bad)
