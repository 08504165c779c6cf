"""The gate client parses what the gate answers into records, and refuses what does not fit."""

from __future__ import annotations

import pytest

from gate.client import _anchor
from segfactory.errors import GateError
from segfactory.records import Anchor


def test_an_anchor_reply_becomes_an_anchor() -> None:
    reply = {"seq": 4, "hash": "ab" * 32, "ts": 1.5, "run_id": None}
    assert _anchor(reply) == Anchor(seq=4, hash="ab" * 32, ts=1.5)


@pytest.mark.parametrize(
    "reply",
    [
        {"seq": -1, "hash": "ab" * 32},
        {"seq": 1, "hash": "not-hex"},
        {"seq": 1, "hash": "ab" * 32, "x": 1},
        [],
    ],
)
def test_a_malformed_anchor_reply_is_refused(reply: object) -> None:
    with pytest.raises(GateError, match="malformed anchor"):
        _anchor(reply)
