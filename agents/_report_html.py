"""``report.html``: the run report's sections as one page, each a ``<section>``, the outcome first.

Each block's Markdown is rendered by markdown-it with raw HTML off (``analysis.render``), so a
value that reached the Markdown as text (``agents._report_text``) stays text here; a folded block
becomes a ``<details>`` under its title, which holds the full text the tables cut.
"""

from __future__ import annotations

import html

from markdown_it import MarkdownIt

from agents._report_md import Block, sections, title
from agents._report_records import RunReport
from analysis.render import markdown_renderer, page


def render_html(r: RunReport) -> str:
    md = markdown_renderer()
    body = [f"<h1>{md.renderInline(title(r))}</h1>"]
    for section in sections(r):
        blocks = "".join(_block(md, block) for block in section.blocks)
        body.append(
            f"<section id='{html.escape(section.anchor)}'><h2>{md.renderInline(section.title)}</h2>\n"
            f"{blocks}</section>\n"
        )
    return page("\n".join(body), f"segfactory run {r.run_id}")


def _block(md: MarkdownIt, block: Block) -> str:
    rendered = md.render("\n".join(block.lines))
    if block.fold is None:
        return rendered
    return f"<details><summary>{md.renderInline(block.fold)}</summary>\n{rendered}</details>\n"


__all__ = ["render_html"]
