"""A submission's slot: it starts when it arrived or when the one before it answers, lasts its own
answer time, grows once intake has counted its cost, and never after its answer was claimed."""

from __future__ import annotations

import time

from gate.core import Deadline


def test_a_slot_starts_at_arrival_or_after_the_one_before_it() -> None:
    first = Deadline(100.0, 10.0)
    assert first.at == 110.0
    queued = Deadline(104.0, 10.0, after=first)  # arrived while the first was being judged
    assert queued.at == 120.0
    late = Deadline(130.0, 10.0, after=queued)  # arrived after the first two answered
    assert late.at == 140.0


def test_intake_extends_a_slot_and_the_next_one_follows() -> None:
    now = time.monotonic()
    first = Deadline(now, 30.0)
    queued = Deadline(now + 1, 30.0, after=first)
    first.extend(70.0)  # its candidate costs more to score than the reference pair
    assert first.at == now + 70.0 and queued.at == now + 100.0
    first.extend(20.0)  # never shorter
    assert first.at == now + 70.0


def test_a_claimed_or_passed_slot_keeps_its_time() -> None:
    now = time.monotonic()
    claimed = Deadline(now, 30.0)
    assert claimed.claim("verdict")
    claimed.extend(90.0)
    assert claimed.at == now + 30.0
    passed = Deadline(now - 60.0, 30.0)  # its answer already left
    passed.extend(90.0)
    assert passed.at == now - 30.0
    assert not passed.claim("verdict") and passed.claim("overrun")  # a late verdict cannot take it
