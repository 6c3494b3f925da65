"""Errors meant for people: one line naming the thing, the place and the fix."""
from __future__ import annotations


class HarnessError(Exception):
    """A user-facing error. The CLI prints `error: <message>` and exits 2, without a traceback."""

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.fix = fix
        super().__init__(message if not fix else f"{message} — fix: {fix}")


class ConfigError(HarnessError):
    """A configuration value is missing, misspelled or out of range."""


class DataError(HarnessError):
    """A data file is missing, corrupted or malformed."""


class DependencyError(HarnessError):
    """A required external program or package (Java, a model package) is missing."""


class ResourceError(HarnessError):
    """A job cannot run on this machine at the configured shape: it names what it needs (memory) and what there is."""
