"""The sailor-sim exception family.

``SailorError`` is the base every Sailor package's family derives from. Every error names the
offending field (``field``) and says how to fix it. CLIs turn these into
one line and exit status 2; the planner server maps them to INVALID_ARGUMENT.
"""

from __future__ import annotations


class SailorError(ValueError):
    """Base of every error any Sailor package raises on bad input or state.

    Each package subclasses it once for its own family (``SailorSimError``,
    ``SailorPlannerError``, ``SailorProfilerError``, ``SailorRuntimeError``), so a caller that
    only wants "a Sailor error" catches this one class.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class SailorSimError(SailorError):
    """Base of every error sailor-sim raises on bad input."""


class ValidationError(SailorSimError):
    """A value is out of range or inconsistent with another one."""


class UnknownNameError(SailorSimError):
    """A model, GPU type, zone or price that no catalog knows."""


class PriceUnavailableError(SailorSimError):
    """A known GPU type without a price in a zone: its provider does not offer it and no price
    was given. Carries what a caller needs to say how to fix it."""

    def __init__(
        self, message: str, *, gpu_type: str, zone: str, provider: str, offered_on: list[str]
    ) -> None:
        self.gpu_type = gpu_type
        self.zone = zone
        self.provider = provider
        self.offered_on = offered_on
        """Providers whose offers include the GPU type (empty: none in the catalog)."""
        super().__init__(message, field="gpu_type")


class PlanError(ValidationError):
    """A plan that cannot run the job (coverage, TP, batch accounting)."""


class ProfileError(SailorSimError):
    """A profile file that is malformed, truncated, or lacks what is asked of it."""
