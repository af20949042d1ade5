"""How much work the planner server accepts: per request and at once.

A search is CPU-bound Python: two at once already share the cores, more only add memory. So
searches take a slot (``max_searches``), the next ``max_queued`` wait for one (in order, each
still cancellable), and the rest are refused with RESOURCE_EXHAUSTED at once. A Simulate of a
large plan takes a slot too (``free_simulate_replicas``). The gRPC thread pool is larger than
slots + queue, so Health and the Simulate of a plan of usual size are always answered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sailor_sim import Inventory

from ..errors import RequestCancelledError, WorkLimitError

WAIT_POLL_S = 0.02
"""Seconds between two looks at a queued request's caller (cancelled? deadline?)."""


MAX_SEARCHES = 64
"""Most searches one server runs at once (``--workers``)."""


@dataclass(frozen=True)
class ServerLimits:
    """Bounds of the planner server; every field is checked per request or per server."""

    max_searches: int = 2
    """Searches running at once (the rest queue)."""
    max_queued: int = 32
    """Searches waiting for a slot; one more is refused with RESOURCE_EXHAUSTED."""
    spare_threads: int = 8
    """gRPC threads beyond slots + queue, kept for Health, Simulate and refusals."""
    max_pools: int = 512
    """(GPU type, zone) pools in one inventory."""
    max_gpus: int = 65_536
    """GPUs in one inventory (the largest clusters planned today are ~25k GPUs)."""
    max_candidates: int = 200_000
    """Allocations one search scores at most (about a minute of CPU)."""
    free_simulate_replicas: int = 1024
    """Replicas a Simulate's plan may have without taking a search slot (~30 ms of work).
    Its work grows with them (the estimate lists every replica): one of 65,536 replicas is
    ~2 s of CPU and a 12 MB answer, so 48 such calls held every thread of the pool, starved
    Health and ran on for a minute after their callers' deadlines had passed."""

    def __post_init__(self) -> None:
        for name in ("max_searches", "max_pools", "max_gpus", "max_candidates"):
            if getattr(self, name) < 1:
                raise WorkLimitError(f"must be >= 1, got {getattr(self, name)}", field=name)
        if self.max_searches > MAX_SEARCHES:
            raise WorkLimitError(
                f"{self.max_searches} searches at once: at most {MAX_SEARCHES} (searches are "
                "CPU-bound Python sharing one interpreter lock; more only add memory); run "
                "more servers instead",
                field="workers",
            )
        if self.max_queued < 0 or self.spare_threads < 1 or self.free_simulate_replicas < 0:
            raise WorkLimitError(
                "max_queued >= 0, spare_threads >= 1 and free_simulate_replicas >= 0",
                field="limits",
            )

    @property
    def threads(self) -> int:
        return self.max_searches + self.max_queued + self.spare_threads

    def check_inventory(self, inventory: Inventory) -> None:
        """Refuse an inventory larger than the server plans on."""
        if len(inventory.pools) > self.max_pools:
            raise WorkLimitError(
                f"has {len(inventory.pools)} pools, more than the {self.max_pools} this server "
                "plans on; merge zones or split the request",
                field="inventory.pools",
            )
        if inventory.total_gpus > self.max_gpus:
            raise WorkLimitError(
                f"has {inventory.total_gpus} GPUs, more than the {self.max_gpus} this server "
                "plans on; list the GPUs you could actually use",
                field="inventory",
            )

    def check_plan(self, plan) -> None:
        """Refuse a plan (Simulate) on more GPUs than an inventory may hold: its estimate
        lists every replica, so its work and its answer grow with them."""
        if plan.num_gpus > self.max_gpus:
            raise WorkLimitError(
                f"has {plan.num_gpus} GPUs, more than the {self.max_gpus} this server plans "
                "on; simulate a smaller plan",
                field="plan",
            )

    def simulate_needs_slot(self, plan_msg) -> bool:
        """Whether a Simulate of the wire ``Plan`` must take a search slot; counted on the
        message, before parsing it (parsing is part of the work)."""
        replicas = sum(len(stage.replicas) for stage in plan_msg.stages)
        return replicas > self.free_simulate_replicas


class SearchSlots:
    """A counting semaphore with a bounded, cancellable queue."""

    def __init__(self, limits: ServerLimits) -> None:
        self._limits = limits
        self._cond = threading.Condition()
        self._running = 0
        self._waiting = 0

    @contextmanager
    def slot(self, gone: Callable[[], bool]) -> Iterator[None]:
        """Hold a search slot for the ``with`` body; ``gone()`` True while queued (the caller
        cancelled or its deadline passed) leaves the queue with RequestCancelledError."""
        self._acquire(gone)
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify()

    def _acquire(self, gone: Callable[[], bool]) -> None:
        with self._cond:
            if self._running < self._limits.max_searches:
                self._running += 1
                return
            if self._waiting >= self._limits.max_queued:
                raise WorkLimitError(
                    f"{self._running} searches running and {self._waiting} queued (the limit); "
                    "retry later",
                    field="server",
                )
            self._waiting += 1
            try:
                while self._running >= self._limits.max_searches:
                    if gone():
                        raise RequestCancelledError(
                            "the caller went away while queued", field="request"
                        )
                    self._cond.wait(WAIT_POLL_S)
                self._running += 1
            finally:
                self._waiting -= 1

    def load(self) -> tuple[int, int]:
        """(running, queued) right now."""
        with self._cond:
            return self._running, self._waiting
