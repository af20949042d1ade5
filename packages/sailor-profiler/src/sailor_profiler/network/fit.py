"""Fit t(m) = latency + m / bandwidth to measured (message bytes, seconds) points.

The alpha-beta (Hockney) model: Hockney, "The communication challenge for MPP: Intel Paragon
and Meiko CS-2", Parallel Computing 20(3), 1994. It stays physical everywhere, unlike the
original Sailor's quadratic in log2(size), which goes to zero or below outside 64 KB..1 GB:
latency >= 0 and bandwidth > 0 are enforced, so t(m) is positive and grows with m, and the
effective bandwidth m / t(m) rises monotonically towards ``bandwidth``.

Least squares on *relative* residuals (each point weighted by 1/t^2): times span four orders
of magnitude over the sweep, and an unweighted fit would ignore the small messages entirely.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LinkFit:
    latency_s: float
    bandwidth_Bps: float
    rel_rmse: float
    """Root-mean-square relative error of the fit on the measured points."""

    def time_s(self, message_bytes: float) -> float:
        return self.latency_s + message_bytes / self.bandwidth_Bps

    def effective_bandwidth(self, message_bytes: float) -> float:
        return message_bytes / self.time_s(message_bytes)


def fit_latency_bandwidth(sizes: list[float], times: list[float]) -> LinkFit:
    m = np.asarray(sizes, dtype=float)
    t = np.asarray(times, dtype=float)
    if m.size == 0 or m.size != t.size:
        raise ValueError("need as many message sizes as times, at least one")
    if np.any(m <= 0) or np.any(t <= 0):
        raise ValueError("message sizes and times must be positive")
    alpha, beta = _weighted_fit(m, t)
    if alpha < 0:  # the best straight line crosses below zero: pin latency at 0
        alpha = 0.0
        beta = float(np.sum(m / t) / np.sum((m / t) ** 2))
    if beta <= 0:  # times do not grow with size (noise-dominated sweep)
        beta = float(np.min(t / m))  # the best bandwidth actually observed
        alpha = max(0.0, float(np.median(t - beta * m)))
    predicted = alpha + beta * m
    rel_rmse = float(np.sqrt(np.mean(((predicted - t) / t) ** 2)))
    return LinkFit(alpha, 1.0 / beta, rel_rmse)


def _weighted_fit(m: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    if m.size == 1:
        return 0.0, float(t[0] / m[0])
    design = np.stack([1.0 / t, m / t], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    return float(alpha), float(beta)
