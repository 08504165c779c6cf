"""The operator-facing error hierarchy.

Every error meant for a person derives from ``SegfactoryError``; the CLI prints its message as
one line on stderr and exits non-zero. Messages say what happened, what was received, and what
to do.
"""

from __future__ import annotations


class SegfactoryError(Exception):
    """Root of every error the CLI reports as a clean one-line message."""

    exit_code = 1


class UsageError(SegfactoryError):
    """Bad arguments or input from the user: a negative size, an unknown name, n = 0."""

    exit_code = 2


class DataError(SegfactoryError):
    """A dataset or file is not what it claims to be (corrupt, wrong shape, missing)."""


class HomeError(SegfactoryError):
    """The factory home is missing, unsafe (inside the source tree) or inconsistent."""


class PolicyError(SegfactoryError):
    """A policy file is invalid, unsafe, or was changed after it was pinned."""


class LimitExceeded(SegfactoryError):
    """A named cap was hit; the message names the cap, its value and what was seen."""


class GateError(SegfactoryError):
    """The gate refused service or could not be reached."""


class SandboxError(SegfactoryError):
    """A sandbox could not be started, or its policy could not be verified."""
