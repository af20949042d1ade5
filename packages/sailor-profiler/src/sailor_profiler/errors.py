"""The sailor-profiler exception family.

Every error names the offending field (``field``) and says how to fix it. The CLI turns these
(and sailor-sim's ``SailorSimError``) into one line ``error: ...`` and exit status 2.
"""

from __future__ import annotations

from sailor_sim import SailorError


class SailorProfilerError(SailorError):
    """Base of every error sailor-profiler raises on bad input."""


class DeviceError(SailorProfilerError):
    """A device that does not exist here, or too few of them for the TP degree asked."""


class SweepError(SailorProfilerError):
    """A sweep value (microbatch sizes, TP degrees, message sizes) that cannot be profiled."""


class ProfileFolderError(SailorProfilerError):
    """A profile folder to merge or import that is missing, corrupt or inconsistent."""


class WorkerError(SailorProfilerError):
    """A profiling worker process failed; the message carries its last error line."""
