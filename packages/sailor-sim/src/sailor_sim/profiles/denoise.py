"""Denoise imported per-layer profiles across microbatch sizes.

Each Sailor profile entry is one timing run per (microbatch size, TP); single runs carry noise
(the GH-96 OPT-350 TP-4 mbs-4 forward sits well off its mbs-2 and mbs-8 neighbours). Over a
short range of microbatch sizes a layer's time is close to affine, t = a + b * mbs (a = fixed
launch / communication overhead, b = work per sample), so each entry's per-layer forward and
backward seconds are replaced by a least-squares affine fit over the ``DENOISE_WINDOW`` entries
of the same (model, GPU, dtype, sequence length, TP) nearest in log2(mbs) (the entry itself
included). Residuals are weighted relatively (1 / t): timing noise is multiplicative. The
window is local because the whole-range fit is not affine (a floor at small mbs).

Evidence (``bench/sim_validation.py``, 15 GH200 runs): with the raw imported profile time error
is 4.9% mean / 15.8% worst; denoised 2.9% / 8.1%. Window 4 and the 1/t weight were chosen among
windows 3-5 x (plain, relative) weights; choosing that way on 8 random runs and scoring the
other 7 (500 splits) gives held-out 3.4% mean / 7.8% worst, leave-one-out 2.9% / 8.1%
(``bench/sim_denoise_choice.py``).
Only imported Sailor profiles are denoised (``Simulator.from_sailor_root``); measured profiles
are used as written.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .store import LayerProfile, ProfileEntry, ProfileStore

DENOISE_WINDOW = 4
"""Entries per local affine fit (needs >= 3 so a fit has a residual; 4 leaves two)."""
MIN_SECONDS = 1e-6
"""Floor of a fitted time (the profiles' own resolution)."""


def _window(entry: ProfileEntry, group: list[ProfileEntry], size: int) -> list[ProfileEntry]:
    here = math.log2(entry.key.microbatch_size)
    return sorted(
        group,
        key=lambda e: (abs(math.log2(e.key.microbatch_size) - here), e.key.microbatch_size),
    )[:size]


def _fit_at(xs: np.ndarray, ys: np.ndarray, x: float, relative: bool = True) -> np.ndarray:
    """Weighted least squares of y = a + b x per column of ``ys`` (window x layers), evaluated
    at ``x``, with weights 1 / y (relative residuals; ``relative=False``: plain least squares);
    vectorized over layers so loading a whole Sailor checkout stays cheap."""
    w = 1.0 / np.maximum(ys, MIN_SECONDS) ** 2 if relative else np.ones_like(ys)
    sw = w.sum(axis=0)
    mx = (w * xs[:, None]).sum(axis=0) / sw
    my = (w * ys).sum(axis=0) / sw
    dx = xs[:, None] - mx
    sxx = (w * dx**2).sum(axis=0)
    slope = (w * dx * (ys - my)).sum(axis=0) / np.where(sxx > 0, sxx, 1.0)
    return np.maximum(MIN_SECONDS, my + np.where(sxx > 0, slope, 0.0) * (x - mx))


def denoise_entry(
    entry: ProfileEntry,
    group: list[ProfileEntry],
    window: int = DENOISE_WINDOW,
    relative: bool = True,
) -> ProfileEntry:
    """``entry`` with forward/backward seconds fitted over its window of ``group`` (the
    ``window`` entries nearest in log2(mbs); residuals weighted 1 / t unless not
    ``relative``)."""
    near = _window(entry, group, window)
    if len(near) < window:
        return entry
    xs = np.array([float(e.key.microbatch_size) for e in near])
    x = float(entry.key.microbatch_size)
    fwd = np.array([[lay.forward_s for lay in e.layers] for e in near])
    bwd = np.array([[lay.backward_s for lay in e.layers] for e in near])
    forward, backward = _fit_at(xs, fwd, x, relative), _fit_at(xs, bwd, x, relative)
    # built directly, not by dataclasses.replace: 6,600 layers of the Sailor import
    layers = tuple(
        LayerProfile(float(f), float(b), layer.optimizer_s, layer.activation_bytes)
        for layer, f, b in zip(entry.layers, forward, backward, strict=True)
    )
    mbs = ",".join(str(int(v)) for v in sorted(xs))
    return replace(entry, layers=layers, note=f"denoised: affine fit over mbs {mbs}")


def denoise_store(
    store: ProfileStore,
    source: str = "imported:sailor",
    window: int = DENOISE_WINDOW,
    relative: bool = True,
) -> ProfileStore:
    """Replace every ``source`` entry of ``store`` by its denoised copy (in place; ``window``
    and ``relative`` as ``denoise_entry``: the defaults are the chosen ones, the others are
    for ``bench/sim_denoise_choice.py``)."""
    groups: dict[tuple, list[ProfileEntry]] = {}
    for e in store.entries():
        if e.source == source:
            k = e.key
            groups.setdefault((k.model, k.gpu_type, k.dtype, k.tp, e.sequence_length), []).append(e)
    fitted = [denoise_entry(e, group, window, relative) for group in groups.values() for e in group]
    for e in fitted:
        store.add(e)
    return store
