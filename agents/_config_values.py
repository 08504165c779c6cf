"""Numbers read out of a training config or a ticket's change held as JSON (``JsonValue``).

A config or a change is a JSON mapping until the training config model validates it, so a value
read out of it is any JSON value. These read a number as ``int()`` and ``float()`` do (a number,
or a string of one) and raise as they do for anything else.
"""

from __future__ import annotations

from pydantic import JsonValue


def as_int(value: JsonValue) -> int:
    """``int(value)``: a TypeError, as ``int`` raises it, for a list, a mapping or None."""
    if isinstance(value, str | int | float):
        return int(value)
    raise TypeError(
        f"int() argument must be a string, a bytes-like object or a real number, not '{type(value).__name__}'"
    )


def as_float(value: JsonValue) -> float:
    """``float(value)``: a TypeError, as ``float`` raises it, for a list, a mapping or None."""
    if isinstance(value, str | int | float):
        return float(value)
    raise TypeError(f"float() argument must be a string or a real number, not '{type(value).__name__}'")


__all__ = ["as_float", "as_int"]
