"""The project's error tree. Library errors are chained (``raise … from e``) and translated into protocol
answers in one place per adapter.

    VgpuError
    ├── ConfigError            bad flag, environment variable or config file; stops start-up with one line
    ├── DecodeError            a malformed wire value (annotation, request body, stored envelope)
    │   └── SchemaVersionError a stored envelope newer than this reader knows
    ├── ConflictError          a lost race that is an ordinary outcome (reservation, resourceVersion, lock)
    ├── NotFoundError          the object asked for does not exist
    ├── TransientError(delay)  worth retrying after ``delay`` seconds (Redis or API server unavailable)
    └── PermanentError         will not succeed on retry
"""

from __future__ import annotations


class VgpuError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(VgpuError):
    """A bad flag, environment variable or config-file value. The message names the key and what was expected."""


class DecodeError(VgpuError, ValueError):
    """A malformed wire value. ``what`` names the annotation, field or body; ``part`` the offending piece."""

    def __init__(self, what: str, detail: str, part: str | None = None) -> None:
        self.what = what
        self.detail = detail
        self.part = part
        msg = f"{what}: {detail}"
        if part is not None:
            shown = part if len(part) <= 80 else part[:77] + "..."
            msg += f" (at {shown!r})"
        super().__init__(msg)


class SchemaVersionError(DecodeError):
    """A stored envelope whose version is newer than this reader knows."""


class ConflictError(VgpuError):
    """A lost race: somebody else changed the object first. Callers re-read and retry, or give up cleanly."""


class NotFoundError(VgpuError):
    """The object asked for does not exist."""


class TransientError(VgpuError):
    """A failure worth retrying after ``delay`` seconds."""

    def __init__(self, message: str, delay: float = 1.0) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(VgpuError):
    """A failure that will not succeed on retry."""
