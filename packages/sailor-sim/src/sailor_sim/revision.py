"""One counter for every edit of the built-in catalogs (GPU types, zones, prices).

``set_price``, ``register_gpu`` and ``register_zone`` bump it; a live ``Simulator`` compares it
with the value its cached numbers were computed at and drops them when it moved, so an estimate
never mixes an old price or GPU spec with a new one. Editing the catalog dicts directly
(``PRICE_CATALOG[...] = ...``) bypasses it: call ``bump()`` after such an edit.
"""

from __future__ import annotations

_revision = 0


def bump() -> None:
    """Record that a catalog changed."""
    global _revision
    _revision += 1


def current() -> int:
    """The number of catalog changes so far in this process."""
    return _revision
