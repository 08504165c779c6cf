"""Parsing of durations given on the command line (``90s``, ``10m``, ``2h``)."""

from __future__ import annotations

import re

from segfactory.errors import UsageError

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(text: str) -> float:
    """Seconds in ``text``; a bare number is seconds. Raises UsageError on anything else."""
    match = _PATTERN.match(text)
    if not match:
        raise UsageError(f"cannot read duration {text!r}; use a number with s, m or h, e.g. 90s, 10m, 2h")
    value = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if value <= 0:
        raise UsageError(f"duration {text!r} must be positive")
    return value
