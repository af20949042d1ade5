"""Timing: a clock per device and robust statistics over repetitions.

On CUDA, a region is timed with a pair of CUDA events recorded on the current stream, read
after ``torch.cuda.synchronize`` (host clocks would time the kernel launches, not the kernels);
a layer's forward and backward with the GPU's queue filled first (``Clock(queued=True)``).
On CPU, ``time.perf_counter`` (monotonic) around the region: CPU ops run synchronously.
Statistic: the median over repetitions after warm-up, with the inter-quartile range as spread,
robust to the outliers a shared machine produces.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from .errors import SweepError

MAX_REPS = 1000
"""Most timed repetitions (``--reps``), and most untimed ones (``--warmup``), per measured point
of ``compute`` and ``network``. The median and IQR settle within tens of repetitions; the
bound is there for a typo: ``--reps 1000000000`` timed every layer (or every message size) a
billion times, i.e. ran for years, where a thousand already takes hours on a large model."""


def check_repetitions(warmup: int, reps: int) -> None:
    """``SweepError`` naming ``reps`` or ``warmup`` when outside 1..MAX_REPS / 0..MAX_REPS."""
    if not 1 <= reps <= MAX_REPS:
        raise SweepError(f"must be from 1 to {MAX_REPS}, got {reps}", field="reps")
    if not 0 <= warmup <= MAX_REPS:
        raise SweepError(f"must be from 0 to {MAX_REPS}, got {warmup}", field="warmup")


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
    """Times a region on one device: ``clock.start()``, the region, then ``clock.stop()``.

    ``queued=True`` (CUDA) times a region as a training step runs it, with the host ahead of
    the GPU: a spin kernel (``torch.cuda._sleep``) longer than the host's time to issue the
    region is queued before the start event, so the events bracket the region's kernels back
    to back (its GPU time), and the host's issue time is measured beside them; the region
    costs the larger of the two (a launch-bound region costs its issue time). Without it the
    events also bracket the host's lead-in to the first kernel and any launch gap, which a
    training step hides: on an H200 (2026-11-27, OPT-350M, mbs 8, seq 2048, recompute none) the
    step predicted from plain per-layer timings was 20 % over the measured one, from queued
    ones 0.6 %. Whether the spin outlasted the host's issue is asked of the GPU (the start
    event not yet reached when the region returns), not judged from the spin's nominal length:
    judged that way, a spin that ran longer than nominal made a launch-bound block's backward
    cost its 0.3 ms of kernels instead of its 3.1 ms of issue, and the Shakespeare demo's step
    was predicted 38 % short. A region that waits for the device itself (a host read) cannot
    be separated that way: once the longest spin runs out, it costs its event time.
    """

    _MIN_LEAD_S = 0.005
    _MAX_LEAD_S = 0.05

    def __init__(self, device: str, queued: bool = False) -> None:
        import torch

        self._torch = torch
        self.cuda = device.startswith("cuda")
        self.queued = queued and self.cuda
        self._lead_s = self._MIN_LEAD_S
        self._start = self._end = None
        self._t0 = 0.0

    def start(self) -> None:
        if self.cuda:
            if self.queued:
                self._torch.cuda._sleep(int(self._lead_s * _sleep_cycles_per_s()))
            self._start = self._torch.cuda.Event(enable_timing=True)
            self._end = self._torch.cuda.Event(enable_timing=True)
            self._start.record()
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        """Seconds the region costs; waits for the device on CUDA."""
        host_s = time.perf_counter() - self._t0
        if not self.cuda:
            return host_s
        # Did the spin outlast the host's issue? Asked of the GPU, not of the spin's nominal
        # length: the spin's cycles run at whatever clock the GPU is at.
        led = self.queued and not self._start.query()
        self._end.record()
        self._end.synchronize()
        device_s = self._start.elapsed_time(self._end) / 1e3  # elapsed_time is in ms
        if not self.queued:
            return device_s
        if led:
            self._lead_s = min(self._MAX_LEAD_S, max(self._MIN_LEAD_S, 2 * host_s))
        elif self._lead_s < self._MAX_LEAD_S:  # too short a spin: a longer one next time
            self._lead_s = min(self._MAX_LEAD_S, 4 * max(host_s, self._lead_s))
        else:
            return device_s  # even the longest spin ran out: the region waits for the device
        return max(host_s, device_s)


_CYCLES_PER_S: list[float] = []


def _sleep_cycles_per_s() -> float:
    """GPU clock cycles per second of ``torch.cuda._sleep``, measured once per process."""
    if not _CYCLES_PER_S:
        import torch

        cycles = 20_000_000
        torch.cuda._sleep(cycles // 10)  # wake the clocks up first
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _CYCLES_PER_S.append(cycles / (begin.elapsed_time(end) / 1e3))
    return _CYCLES_PER_S[0]


def repeat(fn: Callable[[], float], warmup: int, reps: int) -> Stat:
    """Call ``fn`` (which returns one measured duration) warmup + reps times; summarize reps."""
    for _ in range(warmup):
        fn()
    return summarize([fn() for _ in range(reps)])
