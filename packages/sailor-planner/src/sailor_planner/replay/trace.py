"""GPU availability traces: Sailor's own format (CSV or Parquet) and the original Sailor traces.

Sailor format, one row per (timestamp, zone, GPU type), read with polars (README "Traces"):

    timestamp,zone,gpu_type,available,price,preempted
    0,us-central1-a,A100-40,32,,
    3600,us-central1-a,A100-40,24,1.10,8

``timestamp`` is seconds (any origin) or an ISO-8601 date-time (one form per trace);
``available`` is the pool's GPU count from that moment until a later row of the same pool
changes it; ``price`` (optional, $/GPU-hour, e.g. a spot price) replaces the catalog's on-demand
price from then on; ``preempted`` (optional) counts GPUs of the pool reclaimed without notice at
that moment. The last timestamp closes the trace (as the original Sailor reader does), unless
``hold_last_s`` says how long the last state lasts.

The original traces (``Planner/simulations/configs/gpu_trace_*.csv``) have an index column, a
``Timestamp`` column (Unix seconds; 121-123 s apart in the shipped files) and one column
``<GPU>_<zone>`` of counts per pool. The original ``simulations/utils.py:parse_trace`` turns them
into (duration = next change's timestamp - this one's, counts) and gives the last state the
duration ``times[-1] - current_time``, i.e. 0 s when the last row is a change: ``read_sailor_trace``
does the same unless ``hold_last_s`` is given. Unlike the original it keeps a leading state with
no GPUs (nothing runs while it lasts) instead of dropping it.

Every problem raises ``TraceError`` naming the file, the row (1 = first data row) and the column.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sailor_sim import MAX_POOL_GPUS, Inventory, SailorSimError, get_gpu, get_zone

from ..errors import RequestError

REQUIRED_COLUMNS = ("timestamp", "zone", "gpu_type", "available")
OPTIONAL_COLUMNS = ("price", "preempted")

Pool = tuple[str, str]
"""(GPU type, zone)."""
MAX_SECONDS = 1e11
"""Largest timestamp magnitude and ``hold_last_s``, in seconds (Unix time of about the year
5100): any real trace fits, in any origin. Beyond it a value is a unit or typing mistake, and
a replay over it reports meaningless figures (1e300 gave 1.9e301 samples)."""


class TraceError(RequestError):
    """An availability trace that cannot be read (maps to INVALID_ARGUMENT; CLI exit 2)."""


@dataclass(frozen=True)
class TraceState:
    """What was available from ``start_s`` for ``duration_s`` seconds."""

    start_s: float
    """Seconds since the trace's first timestamp."""
    duration_s: float
    inventory: Inventory
    prices: tuple[tuple[str, str, float], ...] = ()
    """(GPU type, zone, $/GPU-hour) where the trace gives a price; the catalog's elsewhere."""
    preempted: tuple[tuple[str, str, int], ...] = ()
    """(GPU type, zone, GPUs) reclaimed without notice at ``start_s``."""

    def price(self, gpu_type: str, zone: str) -> float | None:
        return next((p for g, z, p in self.prices if (g, z) == (gpu_type, zone)), None)

    @property
    def preempted_gpus(self) -> int:
        return sum(n for _, _, n in self.preempted)


@dataclass(frozen=True)
class AvailabilityTrace:
    states: tuple[TraceState, ...]
    source: str = ""

    @property
    def duration_s(self) -> float:
        return sum(s.duration_s for s in self.states)

    @property
    def pools(self) -> tuple[Pool, ...]:
        return tuple(sorted({(p.gpu_type, p.zone) for s in self.states for p in s.inventory.pools}))

    @property
    def preemptions(self) -> int:
        return sum(1 for s in self.states if s.preempted)


# ---- reading ------------------------------------------------------------------------------


def read_trace(path: str | Path, hold_last_s: float | None = None) -> AvailabilityTrace:
    """Read a trace in either format (the original's is recognised by its ``Timestamp`` column)."""
    frame = _read_frame(Path(path))
    if "Timestamp" in frame.columns:
        return _from_sailor_frame(frame, Path(path).name, hold_last_s)
    return _from_long_frame(frame, Path(path).name, hold_last_s)


def trace_from_rows(
    rows: list[dict[str, Any]], name: str = "trace", hold_last_s: float | None = None
) -> AvailabilityTrace:
    """A trace from rows with the Sailor format's columns (e.g. from a gRPC request)."""
    import polars as pl

    columns = list(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)
    frame = pl.DataFrame(
        {c: [None if r.get(c) is None else str(r[c]) for r in rows] for c in columns},
        schema={c: pl.String for c in columns},
    )
    return _from_long_frame(frame, name, hold_last_s)


def read_sailor_trace(path: str | Path, hold_last_s: float | None = None) -> AvailabilityTrace:
    """Read an original Sailor ``gpu_trace_*.csv`` (columns ``Timestamp``, ``<GPU>_<zone>``)."""
    return _from_sailor_frame(_read_frame(Path(path)), Path(path).name, hold_last_s)


def _read_frame(path: Path):
    import polars as pl

    if not path.is_file():
        raise TraceError(f"{path} is not a file; pass a trace CSV or Parquet file", field="trace")
    if path.suffix.lower() != ".parquet":
        _refuse_repeated_columns(path)
    try:
        if path.suffix.lower() == ".parquet":
            return pl.read_parquet(path)
        # Everything as text: every value is then checked here, with its row and column.
        return pl.read_csv(path, infer_schema=False)
    except Exception as exc:  # polars raises many types; all mean "not a readable table"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TraceError(
            f"cannot read {path.name} as a table ({first}); write it as CSV with a header row "
            "or as Parquet",
            field="trace",
        ) from None


def _refuse_repeated_columns(path: Path) -> None:
    """polars renames a repeated header name to NAME_duplicated_0, which the checks then
    called an unknown column ('available_duplicated_0') or, in the original format, an unknown
    zone 'us-central1-a_duplicated_0' at 'row 0': name the column the file repeats instead."""
    try:
        with path.open(newline="", encoding="utf-8-sig", errors="replace") as f:
            header = next(csv.reader(f), [])
    except (OSError, csv.Error):
        return  # polars' reading then reports the file
    for i, name in enumerate(header):
        if name in header[:i]:
            raise TraceError(
                f"column {name!r} appears twice; keep one column of each name",
                field=f"{path.name} header",
            )


def _where(name: str, row: int, column: str) -> str:
    return f"{name} row {row}, column {column}"


def _seconds(value: Any, where: str) -> tuple[float, bool]:
    """(seconds, whether it was written as a date-time)."""
    if isinstance(value, datetime):
        return value.timestamp(), True
    text = "" if value is None else str(value).strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            return datetime.fromisoformat(text).timestamp(), True
        except ValueError:
            raise TraceError(
                f"{text!r} is neither seconds nor an ISO-8601 date-time (e.g. 2024-04-08T10:00:00)",
                field=where,
            ) from None
    if not math.isfinite(seconds) or abs(seconds) > MAX_SECONDS:
        raise TraceError(
            f"must be a finite number of seconds within +-{MAX_SECONDS:g}, got {text!r}",
            field=where,
        )
    return seconds, False


class _Timestamps:
    """A trace's timestamps, all seconds or all date-times: a trace mixing them (0, then
    2026-01-01T00:00:00) was read as one state lasting 56 years, and replayed as such."""

    def __init__(self, name: str, column: str) -> None:
        self.name, self.column = name, column
        self.first: tuple[str, int, str] | None = None
        """(form, row, text) of the first timestamp."""

    def seconds(self, value: Any, row: int) -> float:
        where = _where(self.name, row, self.column)
        seconds, dated = _seconds(value, where)
        text = str(value).strip()
        form = "a date-time" if dated else "a number of seconds"
        if self.first is None:
            self.first = (form, row, text)
        elif form != self.first[0]:
            was, first_row, first_text = self.first
            raise TraceError(
                f"{text!r} is {form}, but row {first_row}'s {first_text!r} is {was}; write every "
                "timestamp one way (all seconds or all ISO-8601 date-times)",
                field=where,
            )
        return seconds


def _count(value: Any, where: str, blank_ok: bool = False) -> int | None:
    text = "" if value is None else str(value).strip()
    if text == "" and blank_ok:
        return None
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number != int(number) or number < 0:
        raise TraceError(f"must be a whole number >= 0, got {text!r}", field=where)
    if number > MAX_POOL_GPUS:  # what an inventory may hold
        raise TraceError(f"must be <= {MAX_POOL_GPUS}, got {text!r}", field=where)
    return int(number)


def _price(value: Any, where: str) -> float | None:
    text = "" if value is None else str(value).strip()
    if text == "":
        return None
    try:
        price = float(text)
    except ValueError:
        price = math.nan
    if not math.isfinite(price) or price <= 0:
        raise TraceError(
            f"must be a positive $/GPU-hour or empty (catalog price), got {text!r}", field=where
        )
    return price


def _pool(gpu: Any, zone: Any, name: str, row: int) -> Pool:
    try:
        gpu_type = get_gpu(str(gpu or "").strip()).name
    except SailorSimError as exc:
        raise TraceError(_reason(exc), field=_where(name, row, "gpu_type")) from None
    try:
        zone_name = get_zone(str(zone or "").strip()).name
    except SailorSimError as exc:
        raise TraceError(_reason(exc), field=_where(name, row, "zone")) from None
    return gpu_type, zone_name


def _reason(exc: SailorSimError) -> str:
    return str(exc).split(": ", 1)[1] if exc.field else str(exc)


@dataclass
class _Event:
    """All rows of one timestamp."""

    time: float
    row: int
    counts: dict[Pool, int]
    prices: dict[Pool, float]
    preempted: dict[Pool, int]


def _from_long_frame(frame, name: str, hold_last_s: float | None) -> AvailabilityTrace:
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise TraceError(
            f"{name} lacks column(s) {', '.join(missing)}; a trace needs "
            f"{', '.join(REQUIRED_COLUMNS)} (optional: {', '.join(OPTIONAL_COLUMNS)})",
            field="trace",
        )
    unknown = [c for c in frame.columns if c not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    if unknown:
        raise TraceError(
            f"{name} has unknown column(s) {', '.join(unknown)}; allowed: "
            f"{', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)}",
            field="trace",
        )
    events: list[_Event] = []
    clock = _Timestamps(name, "timestamp")
    for row, rec in enumerate(frame.iter_rows(named=True), start=1):
        time = clock.seconds(rec["timestamp"], row)
        if events and time < events[-1].time:
            raise TraceError(
                f"{time:g} comes before the previous row's {events[-1].time:g}; sort the trace "
                "by timestamp",
                field=_where(name, row, "timestamp"),
            )
        if not events or time > events[-1].time:
            events.append(_Event(time, row, {}, {}, {}))
        event = events[-1]
        pool = _pool(rec["gpu_type"], rec["zone"], name, row)
        if pool in event.counts:
            raise TraceError(
                f"{pool[0]}@{pool[1]} appears twice at timestamp {time:g}; keep one row per pool "
                "and timestamp",
                field=_where(name, row, "gpu_type"),
            )
        event.counts[pool] = _count(rec["available"], _where(name, row, "available"))
        price = _price(rec.get("price"), _where(name, row, "price"))
        if price is not None:
            event.prices[pool] = price
        lost = _count(rec.get("preempted"), _where(name, row, "preempted"), blank_ok=True)
        if lost:
            event.preempted[pool] = lost
    return _build(events, name, hold_last_s, "preempted")


def _from_sailor_frame(frame, name: str, hold_last_s: float | None) -> AvailabilityTrace:
    """Original layout: index column, ``Timestamp``, one ``<GPU>_<zone>`` column per pool."""
    if "Timestamp" not in frame.columns:
        raise TraceError(
            f"{name} has no 'Timestamp' column; an original Sailor trace has columns "
            "',Timestamp,<GPU>_<zone>,...'",
            field="trace",
        )
    pools: dict[str, Pool] = {}
    for column in frame.columns:
        if column in ("", "Timestamp") or column.startswith("__UNNAMED"):
            continue  # the pandas index column
        gpu, _, zone = column.partition("_")
        if not zone:
            raise TraceError(
                f"column {column!r} is not <GPU>_<zone> (e.g. A100-40_us-central1-a)",
                field=f"{name} header",
            )
        pools[column] = _pool(gpu, zone, name, 0)
    if not pools:
        raise TraceError(f"{name} has no <GPU>_<zone> columns", field=f"{name} header")
    events: list[_Event] = []
    clock = _Timestamps(name, "Timestamp")
    for row, rec in enumerate(frame.iter_rows(named=True), start=1):
        time = clock.seconds(rec["Timestamp"], row)
        if events and time <= events[-1].time:
            raise TraceError(
                f"{time:g} does not come after the previous row's {events[-1].time:g}; sort the "
                "trace by Timestamp",
                field=_where(name, row, "Timestamp"),
            )
        counts = {pool: _count(rec[col], _where(name, row, col)) for col, pool in pools.items()}
        events.append(_Event(time, row, counts, {}, {}))
    return _build(events, name, hold_last_s, "Timestamp")


def _build(
    events: list[_Event], name: str, hold_last_s: float | None, column: str
) -> AvailabilityTrace:
    """Events -> states (counts carried forward; identical neighbours merged)."""
    if not events:
        raise TraceError(f"{name} has no rows", field="trace")
    if hold_last_s is not None and not (0 < hold_last_s <= MAX_SECONDS):  # NaN fails too
        raise TraceError(
            f"must be a positive number of seconds up to {MAX_SECONDS:g}, got {hold_last_s}",
            field="hold_last_s",
        )
    if hold_last_s is None and len(events) < 2:
        raise TraceError(
            f"{name} has one timestamp, and the last timestamp closes a trace; pass hold_last_s "
            "(CLI: --hold-last SECONDS) to say how long its state lasts",
            field="trace",
        )
    t0 = events[0].time
    counts: dict[Pool, int] = {}
    prices: dict[Pool, float] = {}
    states: list[TraceState] = []
    for i, event in enumerate(events):
        for pool, lost in event.preempted.items():
            if lost > counts.get(pool, 0):
                raise TraceError(
                    f"{lost} GPUs of {pool[0]}@{pool[1]} preempted but only "
                    f"{counts.get(pool, 0)} were available before",
                    field=_where(name, event.row, column),
                )
        counts.update(event.counts)
        prices.update(event.prices)
        end = events[i + 1].time if i + 1 < len(events) else None
        duration = (end - event.time) if end is not None else (hold_last_s or 0.0)
        state = TraceState(
            event.time - t0,
            duration,
            Inventory.of(dict(counts)),
            tuple((g, z, p) for (g, z), p in sorted(prices.items())),
            tuple((g, z, n) for (g, z), n in sorted(event.preempted.items())),
        )
        if states and not state.preempted and _same(states[-1], state):
            last = states[-1]
            states[-1] = TraceState(
                last.start_s,
                last.duration_s + duration,
                last.inventory,
                last.prices,
                last.preempted,
            )
        elif duration > 0:
            states.append(state)
    return AvailabilityTrace(tuple(states), name)


def _same(a: TraceState, b: TraceState) -> bool:
    return a.inventory == b.inventory and a.prices == b.prices


# ---- writing ------------------------------------------------------------------------------


def write_trace(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write rows (dicts with the trace columns) as CSV or Parquet, by the file's suffix."""
    import polars as pl

    path = Path(path)
    columns = list(REQUIRED_COLUMNS) + [c for c in OPTIONAL_COLUMNS if any(c in r for r in rows)]
    frame = pl.DataFrame({c: [r.get(c) for r in rows] for c in columns})
    if path.suffix.lower() == ".parquet":
        frame.write_parquet(path)
    else:
        frame.write_csv(path)
    return path
