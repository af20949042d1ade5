"""Timing: a clock per device and robust statistics over repetitions.

On CUDA, a region is timed with a pair of CUDA events recorded on the current stream, read
after ``torch.cuda.synchronize`` (host clocks would time the kernel launches, not the kernels).
On CPU, ``time.perf_counter`` (monotonic) around the region: CPU ops run synchronously.
Statistic: the median over repetitions after warm-up, with the inter-quartile range as spread,
robust to the outliers a shared machine produces.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Stat:
    """Median of repeated measurements and their spread (p25, p75), in the input's unit."""

    median: float
    p25: float
    p75: float
    n: int

    @property
    def spread(self) -> float:
        return self.p75 - self.p25


def summarize(samples: list[float]) -> Stat:
    if not samples:
        raise ValueError("no samples to summarize")
    ordered = sorted(samples)
    if len(ordered) >= 4:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1, q3 = ordered[0], ordered[-1]
    return Stat(statistics.median(ordered), q1, q3, len(ordered))


class Clock:
    """Times a region on one device: ``with clock.region(): ...`` then ``clock.read()``."""

    def __init__(self, device: str) -> None:
        import torch

        self._torch = torch
        self.cuda = device.startswith("cuda")
        self._start = self._end = None
        self._t0 = self._t1 = 0.0

    def start(self) -> None:
        if self.cuda:
            self._start = self._torch.cuda.Event(enable_timing=True)
            self._end = self._torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> float:
        """Seconds since ``start``; waits for the device on CUDA."""
        if self.cuda:
            self._end.record()
            self._end.synchronize()
            return self._start.elapsed_time(self._end) / 1e3  # elapsed_time is in ms
        return time.perf_counter() - self._t0


def repeat(fn: Callable[[], float], warmup: int, reps: int) -> Stat:
    """Call ``fn`` (which returns one measured duration) warmup + reps times; summarize reps."""
    for _ in range(warmup):
        fn()
    return summarize([fn() for _ in range(reps)])
