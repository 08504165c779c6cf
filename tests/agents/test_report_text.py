"""Values enter the report as text: cut only between words with the full text given elsewhere, and
shown literally by markdown-it (no link, image, HTML or table cell from a hypothesis)."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from hypothesis import given
from hypothesis import strategies as st

from agents import report as rpt
from agents._report_text import ELLIPSIS, clip, code, text
from analysis.render import markdown_html
from tests.agents import _report_fixture as fx


class _Page(HTMLParser):
    """The tags and the visible text of an HTML fragment."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(fragment: str) -> _Page:
    page = _Page()
    page.feed(fragment)
    return page


@given(st.text(alphabet=st.sampled_from("ab1_=,.: -"), max_size=200), st.integers(min_value=8, max_value=120))
def test_clip_cuts_between_words_and_says_so(value: str, limit: int) -> None:
    cut = clip(value, limit)
    if len(value) <= limit:
        assert cut == value
        return
    assert cut.endswith(ELLIPSIS) and len(cut) <= limit
    kept = cut.removesuffix(ELLIPSIS)
    assert value.startswith(kept)
    if re.search(r"\W", value[:limit]):  # a boundary exists: the cut is not between two word characters
        assert not (kept and re.match(r"\w", kept[-1]) and re.match(r"\w", value[len(kept)]))


def test_a_number_is_never_cut_short() -> None:
    hypothesis = "exploration (TPE around the incumbent): batch_size=32, decoder_width=24, lr=0.0031"
    for limit in range(10, len(hypothesis)):
        cut = clip(hypothesis, limit).removesuffix(ELLIPSIS)
        assert not re.search(r"batch_size=3$|decoder_width=2$|lr=0\.00?3?$", cut), (limit, cut)


def test_hostile_text_renders_as_the_text_it_is() -> None:
    rendered = markdown_html(f"| a |\n|---|\n| {text(fx.HOSTILE)} |\n\n{text(fx.HOSTILE)}\n")
    page = _parse(rendered)
    assert {tag for tag, _ in page.tags} <= {"div", "table", "thead", "tr", "th", "tbody", "td", "p"}
    assert sum(1 for tag, _ in page.tags if tag == "td") == 1  # its pipes split no cell
    assert "".join(page.text).count(fx.HOSTILE) == 2


def test_only_the_reports_own_files_may_be_linked() -> None:
    rendered = markdown_html(
        "![ok](plots/dev_f1.png) ![remote](http://203.0.113.9/p.png) ![proto](//203.0.113.9/p.png) "
        "[js](javascript:alert(1)) [data](data:text/html,x) <http://203.0.113.9/>"
    )
    sources = [attrs.get("src") for tag, attrs in _parse(rendered).tags if tag == "img"]
    assert sources == ["plots/dev_f1.png"]
    assert not [attrs for tag, attrs in _parse(rendered).tags if tag == "a"]


def test_a_code_span_holds_backticks_and_pipes_in_a_cell() -> None:
    value = "a|b `c` d"
    rendered = markdown_html(f"| x |\n|---|\n| {code(value, cell=True)} |\n")
    assert f"<code>{html.escape(value, quote=False)}</code>" in rendered


def test_a_clipped_hypothesis_is_in_full_in_the_ticket_list() -> None:
    long = "targeted_synthetic: " + " ".join(f"slice{k}=low" for k in range(40))
    rows = [fx.rows()[0].model_copy(update={"hypothesis": long})]
    md = rpt.render_markdown(fx.demo_report(tickets=rows, rounds=[]))
    table_cell = next(line for line in md.splitlines() if line.startswith("| t001 |")).split(" | ")[2]
    assert table_cell.endswith(ELLIPSIS) and long.startswith(table_cell.removesuffix(ELLIPSIS))
    assert f"): {long}." in md  # the list "Every ticket in full"
