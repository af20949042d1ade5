"""The global sample order: a pure function of (seed, epoch, global sample index).

A dataset is cut into ``W`` windows (samples). Sample ``n`` of a run is window
``perm(seed, e)[n mod W]`` with epoch ``e = n // W``, where ``perm`` is ``torch.randperm``
seeded by ``seed * 100_003 + e``. Nothing else enters: not the DP degree, the microbatch size,
the replica mix nor the step, so a run that is re-planned or resumed after ``consumed``
samples continues with sample ``consumed`` and every window is trained exactly once per epoch.
"""

from __future__ import annotations

import torch


class EpochOrder:
    def __init__(self, num_windows: int, seed: int) -> None:
        self.num_windows, self.seed = num_windows, seed
        self._perm: dict[int, list[int]] = {}

    def permutation(self, epoch: int) -> list[int]:
        """The epoch's window order, read out once per epoch (not one tensor read per sample)."""
        if epoch not in self._perm:
            gen = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            self._perm = {epoch: torch.randperm(self.num_windows, generator=gen).tolist()}
        return self._perm[epoch]

    def window(self, n: int) -> int:
        """The window that global sample ``n`` reads."""
        epoch, i = divmod(n, self.num_windows)
        return self.permutation(epoch)[i]
