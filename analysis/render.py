"""Write an analysis report to a folder: JSON, Markdown, HTML, plots and overlay crops.

Plots use matplotlib's Agg backend (no display). Crops are PNG overlays of the worst dev
images (ground truth green, prediction red, both yellow), cut around their errors; they are
made from dev only. The folder is written to a temporary sibling and renamed into place.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import numpy as np
from markdown_it import MarkdownIt

from analysis.errortypes import SIZE_BIN_NAMES, ErrorAnalysis
from analysis.report import AnalysisReport, Evaluated
from segfactory.errors import UsageError
from segfactory.files import staged_dir

N_CROPS = 8  # worst dev images drawn as overlays
CROP_PAD_PX = 4  # context around the error region of a crop
CROP_SCALE = 4  # nearest-neighbour upscaling of a crop
CHART_SLICES = 15  # slices drawn in the slice chart


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def error_bars(report: AnalysisReport, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    types = list(report.error_counts)
    bottom = np.zeros(len(types))
    for size in SIZE_BIN_NAMES:
        counts = np.array([report.error_counts[t][size] for t in types], dtype=float)
        ax.bar(types, counts, bottom=bottom, label=size)
        bottom += counts
    ax.set_ylabel("count")
    ax.set_title("errors by type and void size")
    ax.legend(title="size", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.12, top=0.9)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def slice_chart(report: AnalysisReport, path: Path) -> None:
    plt = _plt()
    rows = report.slices[:CHART_SLICES]
    fig, ax = plt.subplots(figsize=(8, 0.35 * max(len(rows), 2) + 1.2))
    y = np.arange(len(rows))[::-1]
    colors = ["tab:red" if r.confirmed else ("tab:orange" if r.discovered else "tab:gray") for r in rows]
    for yi, r, c in zip(y, rows, colors, strict=True):
        xerr = [[max(r.score - r.low, 0.0)], [max(r.high - r.score, 0.0)]]
        ax.errorbar(r.score, yi, xerr=xerr, fmt="o", color=c, capsize=3)
        ax.plot(r.complement, yi, "|", color="black", markersize=10)
    ax.set_yticks(y, [f"{r.name} ({r.unit}, n={r.n})" for r in rows], fontsize=7)
    ax.set_xlabel("failure (miss rate or 1 - dice); | = rest of dev; red = confirmed")
    fig.subplots_adjust(left=0.45, right=0.97, bottom=0.12, top=0.97)  # tight_layout costs ~1 s here
    fig.savefig(path, dpi=90)
    plt.close(fig)


def learning_curve(curve: dict[str, float], path: Path) -> None:
    plt = _plt()
    xs = sorted(curve, key=float)
    fig, ax = plt.subplots(figsize=(4.5, 3))
    ax.plot([float(x) * 100 for x in xs], [curve[x] for x in xs], "o-")
    ax.set_xlabel("% of training data")
    ax.set_ylabel("dev dice")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _overlay(image: np.ndarray, gt: np.ndarray, pred: np.ndarray) -> np.ndarray:
    gray = (np.clip(image, 0, 1) * 200).astype(np.uint8)
    rgb = np.stack([gray] * 3, axis=-1)
    rgb[gt & ~pred] = (0, 220, 0)
    rgb[pred & ~gt] = (230, 30, 30)
    rgb[gt & pred] = (240, 220, 0)
    return rgb


def crops(dev: Evaluated, errors: ErrorAnalysis, threshold: float, folder: Path) -> list[str]:
    """PNG overlays of the N_CROPS worst dev images (lowest dice among images with an error)."""
    from PIL import Image

    bad = np.sum([v for k, v in errors.per_image.items() if k != "dice"], axis=0)
    order = [int(k) for k in np.argsort(errors.per_image["dice"], kind="stable") if bad[k] > 0][:N_CROPS]
    names = []
    for rank, k in enumerate(order):
        gt, pred = dev.split.masks[k] > 0, dev.prob[k] >= threshold
        ys, xs = np.nonzero(gt | pred)
        y0, x0 = max(int(ys.min()) - CROP_PAD_PX, 0), max(int(xs.min()) - CROP_PAD_PX, 0)
        y1, x1 = int(ys.max()) + CROP_PAD_PX + 1, int(xs.max()) + CROP_PAD_PX + 1
        rgb = _overlay(np.asarray(dev.split.images[k]), gt, pred)[y0:y1, x0:x1]
        rgb = rgb.repeat(CROP_SCALE, axis=0).repeat(CROP_SCALE, axis=1)
        name = f"crop_{rank:02d}_{dev.ids[k]}.png"
        Image.fromarray(rgb).save(folder / name)
        names.append(name)
    return names


def markdown(report: AnalysisReport, plots: dict[str, str]) -> str:
    o = report.overall
    lines = [
        "# Analysis report (dev only)",
        "",
        f"{report.n_images} images, {report.n_defects} defect rows, threshold {report.threshold}.",
        "",
        f"- dice {o['dice']:.3f} [{o['dice_low']:.3f}, {o['dice_high']:.3f}]",
        f"- void miss rate {o['miss_rate']:.3f} [{o['miss_rate_low']:.3f}, {o['miss_rate_high']:.3f}]"
        f" over {int(o['voids'])} voids",
        f"- false alarms per image {o['false_alarms_per_image']:.2f}",
        "",
    ]
    if report.notes:
        lines += ["## Notes on the input", ""] + [f"- {n}" for n in report.notes] + [""]
    lines += ["## Recommendations", ""]
    for r in report.recommendations:
        e = r.predicted_effect
        lines.append(
            f"- **{r.action}** ({r.kind.value}): {r.rationale}; predicts {e.metric} on "
            f"`{e.slice}` {e.direction.value} by {e.size}"
        )
    lines += ["", "## What goes wrong (ranked)", ""] + [
        f"{k + 1}. {p.text}" for k, p in enumerate(report.problems)
    ]
    lines += [
        "",
        f"![errors]({plots['errors']})",
        "",
        "## Slices",
        "",
        f"{report.n_slices_tested} slices tested, {report.n_slices_below_support} below minimum support; "
        f"{len(report.findings)} confirmed on the held-out half.",
        "",
        "| slice | unit | n | failure | interval | rest | discovered | confirmed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in report.slices:
        lines.append(
            f"| {s.name} | {s.unit} | {s.n} | {s.score:.3f} | [{s.low:.3f}, {s.high:.3f}] | "
            f"{s.complement:.3f} | {'yes' if s.discovered else 'no'} | {'yes' if s.confirmed else 'no'} |"
        )
    lines += ["", f"![slices]({plots['slices']})", ""]
    if "learning_curve" in plots:
        lines += ["## Learning curve", "", f"![learning curve]({plots['learning_curve']})", ""]
    if report.dev_labels is not None:
        d = report.dev_labels
        lines += [
            "## Label-error estimate (cleanlab)",
            "",
            f"dev: {d.flagged}/{d.n_images} images flagged ({d.rate:.2f} [{d.low:.2f}, {d.high:.2f}])",
            "",
        ]
    if report.crops:
        lines += ["## Worst cases (green: missed, red: false alarm, yellow: hit)", ""]
        lines += [f"![{c}]({c})" for c in report.crops] + [""]
    return "\n".join(lines) + "\n"


# The page fits its tables: cells wrap between words, and a table still wider than the page
# scrolls inside its own box rather than widening the page.
PAGE_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2328;margin:0;line-height:1.45}
main{max-width:1100px;margin:0 auto;padding:8px 20px 48px}
h1{margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #d8dee4;padding-bottom:.2em}
.table-wrap{max-width:100%;overflow-x:auto;margin:.6em 0}
table{border-collapse:collapse;font-size:.88em;table-layout:auto;max-width:100%}
td,th{border:1px solid #d0d7de;padding:3px 6px;vertical-align:top;overflow-wrap:break-word;text-align:left}
th{background:#f6f8fa}
code{font-size:.9em;background:#f6f8fa;border-radius:3px;padding:0 3px;overflow-wrap:break-word}
img{max-width:100%;height:auto}
details{margin:.6em 0}summary{cursor:pointer;font-weight:600}
section#outcome{border-left:4px solid #1a7f37;padding-left:14px}
"""
# Only the report's own files may load: no script, no image from elsewhere.
PAGE_CSP = "default-src 'none'; img-src 'self' file:; style-src 'unsafe-inline'"
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def _relative(url: str) -> bool:
    """Links and images may point only at files beside the report (no scheme, no other host)."""
    return not _SCHEME.match(url) and not url.startswith(("//", "\\\\"))


def _wrapped(open_tag: bool) -> Any:
    def render(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        return '<div class="table-wrap"><table>\n' if open_tag else "</table></div>\n"

    return render


def markdown_renderer() -> MarkdownIt:
    """CommonMark with tables, raw HTML off (``<`` in text stays text), relative links only."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    md.validateLink = _relative  # type: ignore[method-assign]
    md.add_render_rule("table_open", _wrapped(True))
    md.add_render_rule("table_close", _wrapped(False))
    return md


def markdown_html(text: str) -> str:
    """A Markdown fragment as HTML."""
    return str(markdown_renderer().render(text))


def page(body: str, title: str) -> str:
    """A whole HTML page around ``body``; ``title`` is text (escaped here)."""
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{PAGE_CSP}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title><style>{PAGE_CSS}</style></head>\n"
        f"<body><main>\n{body}</main></body></html>\n"
    )


def to_html(md: str, title: str = "segfactory analysis") -> str:
    """The analysis report's Markdown as a page."""
    return page(markdown_html(md), title)


def write_report(report: AnalysisReport, dev: Evaluated, errors: ErrorAnalysis, out: Path) -> AnalysisReport:
    """Write everything under ``out`` (which must not exist or be empty); returns the report with crops."""
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"--out {out} exists and is not empty; choose a new folder")
    with staged_dir(out) as tmp:  # an empty ``out`` is replaced
        report = report.model_copy(update={"crops": crops(dev, errors, report.threshold, tmp)})
        plots = {"errors": "errors.png", "slices": "slices.png"}
        error_bars(report, tmp / plots["errors"])
        slice_chart(report, tmp / plots["slices"])
        if report.learning_curve:
            plots["learning_curve"] = "learning_curve.png"
            learning_curve(report.learning_curve, tmp / plots["learning_curve"])
        (tmp / "report.json").write_text(report.model_dump_json(indent=2) + "\n")
        md = markdown(report, plots)
        (tmp / "report.md").write_text(md)
        (tmp / "report.html").write_text(to_html(md))
    return report
