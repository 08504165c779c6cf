"""The rule-based reading of chat replies: clear replies read, anything unclear asked again."""

from __future__ import annotations

import pytest

from console import interpret


@pytest.mark.parametrize(
    ("text", "kind", "count", "scope", "reason"),
    [
        ("approve", "approve", None, "", ""),
        ("Yes.", "approve", None, "", ""),
        ("approve 200, thin voids only", "approve", 200, "thin voids only", ""),
        ("APPROVE 50 images", "approve", 50, "", ""),
        ("go ahead, thin voids", "approve", None, "thin voids", ""),
        ("deny: too expensive", "deny", None, "", "too expensive"),
        ("Reject,  we have   enough data", "deny", None, "", "we have enough data"),
        ("no", "deny", None, "", ""),
        ("what does it cost?", "question", None, "", ""),
        ("why do we need real images", "question", None, "", ""),
    ],
)
def test_clear_replies_are_read(text: str, kind: str, count: int | None, scope: str, reason: str) -> None:
    reading = interpret(text)
    assert (reading.kind, reading.count, reading.scope, reading.reason) == (kind, count, scope, reason)


@pytest.mark.parametrize(
    "text",
    [
        "maybe",
        "approve? no wait",
        "don't approve",
        "yes but not now",
        "approve 2 or 3",
        "I think so",
        "",
        "   ",
        "approve 0",
        "deny, actually approve",
    ],
)
def test_unclear_replies_are_never_guessed(text: str) -> None:
    reading = interpret(text)
    assert reading.kind == "unclear", reading
    assert reading.why_unclear


def test_reading_keeps_count_and_scope_in_the_decision_reason() -> None:
    reading = interpret("approve 200, thin voids only")
    assert reading.summary() == "APPROVE, for 200 images, limited to: thin voids only"
    assert reading.decision_reason() == "count=200; scope=thin voids only"
