"""The data pipeline: local text, JSONL or Parquet -> a Hugging Face tokenizer -> memory-mapped
token shards with a manifest (``prepare``), read back as fixed-length samples in an order that
is a pure function of (seed, epoch, global sample index) (``shards``, ``order``).

``corpus/shakespeare.txt`` is a small public-domain corpus for the demo and the tests (see
``corpus/NOTICE.md``); ``BUNDLED_CORPUS`` is its path.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import SailorRuntimeError

BUNDLED_CORPUS = Path(__file__).parent / "corpus" / "shakespeare.txt"


class DataError(SailorRuntimeError):
    """Bad data input: a missing or unreadable source, a tokenizer that does not load, shards
    that do not match their manifest, a sequence length the data cannot fill."""
