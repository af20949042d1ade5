"""A small, generated English-like text corpus and its deterministic, resumable sample order.

The corpus is produced by a seeded generator from a fixed word list and sentence templates, so
the package ships no data file and every machine builds the same bytes (about 300 KB by
default). Tokens are bytes (vocabulary 256), as for the tiny catalog models.

Sample order: the corpus is cut into non-overlapping windows of ``seq + 1`` bytes (inputs and
shifted labels) in the order of ``sailor_runtime.data.order`` (a pure function of seed, epoch
and global sample index), so a resumed run, or any plan, reads exactly the same samples.
"""

from __future__ import annotations

import random
from functools import lru_cache

import torch

from ...data.order import EpochOrder

_SUBJECTS = [
    "the sailor",
    "a captain",
    "the old ship",
    "my friend",
    "the river",
    "a small boat",
    "the wind",
    "every harbor",
    "the lighthouse",
    "a young girl",
    "the merchant",
    "our crew",
    "the moon",
    "a gull",
    "the fisherman",
    "the map",
]
_VERBS = [
    "sees",
    "follows",
    "remembers",
    "carries",
    "crosses",
    "watches",
    "finds",
    "leaves",
    "paints",
    "calls",
    "guards",
    "reaches",
    "loves",
    "forgets",
    "answers",
    "waits for",
]
_OBJECTS = [
    "the grey sea",
    "a distant island",
    "the morning tide",
    "an empty net",
    "the northern star",
    "a letter from home",
    "the long road",
    "the quiet bay",
    "a bright lantern",
    "the storm",
    "the green hills",
    "a silver coin",
    "the open water",
    "the last train",
    "a wooden door",
    "the evening bell",
]
_ADVERBS = [
    "slowly",
    "at dawn",
    "in silence",
    "once again",
    "without fear",
    "before noon",
    "every winter",
    "with care",
    "far away",
    "by the shore",
]
_JOINS = [", and then", ", but", " while", " because", " so", " until"]


def _sentence(rng: random.Random) -> str:
    s = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}"
    if rng.random() < 0.5:
        s += f" {rng.choice(_ADVERBS)}"
    if rng.random() < 0.3:
        s += f"{rng.choice(_JOINS)} {rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} "
        s += rng.choice(_OBJECTS)
    return s[0].upper() + s[1:] + rng.choice([".", ".", ".", "!", "?"])


@lru_cache(maxsize=4)
def generate_corpus(num_bytes: int = 300_000, seed: int = 1234) -> bytes:
    """Deterministic English-like text of exactly ``num_bytes`` bytes (ASCII)."""
    rng = random.Random(seed)
    parts, size = [], 0
    while size < num_bytes:
        para = " ".join(_sentence(rng) for _ in range(rng.randint(3, 7))) + "\n\n"
        parts.append(para)
        size += len(para)
    return "".join(parts).encode("ascii")[:num_bytes]


class TextDataset:
    """Byte-level windows of ``seq_len + 1`` tokens in a seeded, resumable order."""

    def __init__(self, seq_len: int, seed: int = 0, corpus: bytes | None = None) -> None:
        data = corpus if corpus is not None else generate_corpus()
        self.tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        self.seq_len, self.seed = seq_len, seed
        self.num_windows = (len(self.tokens) - 1) // (seq_len + 1)
        if self.num_windows < 1:
            raise ValueError(f"corpus of {len(data)} bytes is too short for seq_len {seq_len}")
        self.order = EpochOrder(self.num_windows, seed)

    def sample(self, n: int) -> torch.Tensor:
        """Sample ``n`` of the run: ``seq_len + 1`` token ids."""
        start = self.order.window(n) * (self.seq_len + 1)
        return self.tokens[start : start + self.seq_len + 1]

    def sample_ids(self, first: int, count: int) -> list[int]:
        """The window ids of samples ``first .. first+count-1``."""
        return [self.order.window(n) for n in range(first, first + count)]

    def batch(self, first: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples ``first .. first+count-1`` as (inputs, labels), each ``[count, seq_len]``."""
        rows = torch.stack([self.sample(n) for n in range(first, first + count)])
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
