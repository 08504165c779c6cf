"""segfactory.text.inert: what a sandbox or a model wrote reaches a terminal or a page as text only."""

from __future__ import annotations

import logging

import pytest

from segfactory.text import inert, inert_tree

PAYLOADS = {
    "CSI colour": ("\x1b[31mRED\x1b[0m", "\\x1b[31mRED\\x1b[0m"),
    "OSC title": ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
    "8-bit CSI (C1)": ("\x9b2J", "\\x9b2J"),
    "carriage return": ("ok\rFORGED", "ok\\x0dFORGED"),
    "backspace and DEL": ("a\x08\x7fb", "a\\x08\\x7fb"),
    "bidi override": ("abc\u202edcb", "abc\\u202edcb"),
    "NUL": ("a\x00b", "a\\x00b"),
}


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_every_control_is_written_out_visibly(name: str) -> None:
    raw, shown = PAYLOADS[name]
    assert inert(raw) == shown == inert(raw, multiline=False)
    assert inert(shown) == shown  # idempotent: nothing left to write out


def test_newlines_are_kept_only_where_text_may_span_lines_and_tabs_always() -> None:
    text = "line one\n\tline two"
    assert inert(text) == text
    assert inert(text, multiline=False) == "line one\\x0a\tline two"  # no forged progress line


def test_a_tree_is_made_inert_keys_included_and_other_values_kept() -> None:
    tree = {"\x1b[2Jkey": ["\x1b[31m", ("x\ny",), 3, None, 0.5], 7: True}
    assert inert_tree(tree) == {"\\x1b[2Jkey": ["\\x1b[31m", ("x\\x0ay",), 3, None, 0.5], 7: True}


def test_a_readable_log_line_is_inert(capsys: pytest.CaptureFixture[str]) -> None:
    from segfactory.logs import configure

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure(json_lines=False, level="WARNING")
        logging.getLogger("runner").warning("ticket t1 failed: %s", "\x1b[31mboom")
        err = capsys.readouterr().err
    finally:
        root.handlers[:], root.level = handlers, level
    assert "\x1b" not in err and "\\x1b[31mboom" in err
