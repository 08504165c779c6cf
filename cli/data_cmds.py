"""CLI commands for data: ``data generate | check | export | import``. See docs/cli.md."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli._common import HomeOpt, JsonOpt, console, emit_json, exit_without_teardown
from segfactory.errors import DataError, UsageError
from synthetic import generate_split, make_params, parse_param_args
from synthetic.check import check_path
from synthetic.exchange import export_png, import_folder, import_real
from synthetic.mapping import MappingRequest

if TYPE_CHECKING:
    from synthetic.exchange import ImportSummary, RealImportSummary

data_app = typer.Typer(help="Generate, check, export and import split folders.", no_args_is_help=True)
PROGRESS_MIN_IMAGES = 2000  # show a progress bar from this many images on (human output only)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.add_typer(data_app, name="data")


def _with_progress(total: int, enabled: bool, work: Any) -> Any:
    """Run ``work(progress_callback_or_None)`` under a rich progress bar when enabled."""
    if not enabled:
        return work(None)
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task("generating", total=total)
        return work(lambda done: bar.advance(task, done))


@data_app.command("generate")
def generate_cmd(
    out: Annotated[Path, typer.Option("--out", help="Split folder to create (must not exist).")],
    n: Annotated[int, typer.Option("--n", help="Number of images.")],
    size: Annotated[int, typer.Option("--size", help="Image side in pixels.")],
    seed: Annotated[int, typer.Option("--seed", help="Public seed; the same seed gives identical arrays.")],
    part_source: Annotated[
        str, typer.Option("--part-source", help="procedural or fashion-mnist.")
    ] = "procedural",
    idx: Annotated[Path | None, typer.Option("--idx", help="Fashion-MNIST IDX images file.")] = None,
    param: Annotated[
        list[str] | None, typer.Option("--param", help="Generator parameter KEY=VALUE (repeatable).")
    ] = None,
    workers: Annotated[int, typer.Option("--workers", help="Processes (0 = every core).")] = 0,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Draw N synthetic X-ray images with exact void masks into a new split folder."""
    values = parse_param_args(param or [])
    values["part_source"] = part_source
    if idx is not None:
        values["idx_path"] = str(idx)
    params = make_params(**values)
    if out.exists():
        raise DataError(f"{out} already exists; split folders are immutable, choose a new --out")
    started = time.perf_counter()
    show = not json_out and n >= PROGRESS_MIN_IMAGES
    result = _with_progress(
        n, show, lambda cb: generate_split(out, n, size, seed, params, workers=workers or None, progress=cb)
    )
    summary = {
        "out": str(out),
        "count": n,
        "size": size,
        "seed": seed,
        "n_defects": len(result.defects),
        "images_with_defects": sum(1 for row in result.image_meta if row["n_defects"]),
        "seconds": round(time.perf_counter() - started, 3),
    }
    if json_out:
        emit_json(summary)
    else:
        console().print(
            f"wrote {n} images ({size}x{size}, {summary['n_defects']} voids) to {out} "
            f"in {summary['seconds']} s"
        )
    exit_without_teardown(0)


BitDepthOpt = Annotated[
    int | None,
    typer.Option(
        "--bit-depth", help="Source bit depth N: value / (2^N - 1) (default: detected, and printed)."
    ),
]
WindowOpt = Annotated[
    str | None, typer.Option("--window", help="LOW:HIGH raw values mapped to 0 and 1 (clipped outside).")
]
PercentileOpt = Annotated[
    str | None,
    typer.Option(
        "--percentile", help="P_LOW:P_HIGH: a window from the whole set's percentiles, e.g. 0.5:99.5."
    ),
]


@data_app.command("check")
def check_cmd(
    folder: Annotated[Path, typer.Argument(help="A split folder or an import-layout folder.")],
    bit_depth: BitDepthOpt = None,
    window: WindowOpt = None,
    percentile: PercentileOpt = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Check a data folder; exits 1 and names the bad files when anything is wrong.

    An import-layout folder is checked through the intensity mapping an import would apply
    (the same --bit-depth / --window / --percentile flags); the mapping and its warnings are shown.
    """
    report = check_path(folder, MappingRequest.from_flags(bit_depth, window, percentile))
    if json_out:
        emit_json(report.summary())
    else:
        out = console()
        out.print(f"{report.layout} folder {folder}: {report.count} images, {report.n_defects} voids")
        if report.contrast_range:
            out.print(f"contrast range: {report.contrast_range[0]:.4f} .. {report.contrast_range[1]:.4f}")
        if report.intensity_mapping:
            m = report.intensity_mapping
            windows = ", ".join(
                f"{b}-bit files {lo:g}..{hi:g}" for b, (lo, hi) in sorted(m["windows"].items())
            )
            out.print(
                f"intensity mapping: {m['mode']}, source bit depth {m['bit_depth']} "
                f"(from {m['detected_from']}); {windows} -> 0..1",
                highlight=False,
                soft_wrap=True,
            )
        for warning in report.warnings:
            out.print(f"[yellow]warning[/yellow] {warning}", highlight=False, soft_wrap=True)
        for problem in report.problems:
            out.print(
                f"[red]{problem.kind}[/red] {problem.file}: {problem.message}",
                highlight=False,
                soft_wrap=True,
            )
        out.print("[green]ok[/green]" if report.ok else f"[red]{len(report.problems)} problem(s)[/red]")
    if not report.ok:
        raise typer.Exit(1)


@data_app.command("export")
def export_cmd(
    folder: Annotated[Path, typer.Argument(help="The split folder to export.")],
    out: Annotated[Path, typer.Option("--out", help="New folder for images/ and masks/.")],
    png: Annotated[bool, typer.Option("--png", help="Write PNG files (16-bit images, 8-bit masks).")] = False,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Export a split folder as PNGs for people (the import layout)."""
    if not png:
        raise UsageError("choose an export format: --png (the only one so far)")
    count = export_png(folder, out)
    if json_out:
        emit_json({"out": str(out), "count": count, "format": "png"})
    else:
        console().print(f"exported {count} images to {out}/images and masks to {out}/masks")


@data_app.command("import")
def import_cmd(
    src: Annotated[
        Path, typer.Argument(help="Folder with images/<stem>.{png,tif,tiff,jpg,dcm} and masks/<stem>.png.")
    ],
    out: Annotated[Path, typer.Option("--out", help="Split folder to create (must not exist).")],
    real: Annotated[
        bool,
        typer.Option(
            "--real",
            help="Labelled real images: OUT/real-dev (host only) and OUT/holdout (for gate add-real).",
        ),
    ] = False,
    unlabelled: Annotated[bool, typer.Option("--unlabelled", help="Images without masks.")] = False,
    bit_depth: BitDepthOpt = None,
    window: WindowOpt = None,
    percentile: PercentileOpt = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Import an image folder into a split folder; writes nothing if any file is bad.

    Raw values become [0, 1] through one recorded mapping (docs/real-data.md): the detected or
    given bit depth, a --window, or a --percentile window.
    """
    if real and unlabelled:
        raise UsageError("--real and --unlabelled exclude each other")
    request = MappingRequest.from_flags(bit_depth, window, percentile)
    if (
        real
    ):  # splits into OUT/real-dev (host side) and OUT/holdout (for `gate add-real`); docs/synthetic-by-use.md
        real_summary = import_real(src, out, request=request)
        where = f"{real_summary.counts} into {real_summary.real_dev} and {real_summary.holdout}"
        summary: ImportSummary | RealImportSummary = real_summary
    else:
        summary = import_folder(src, out, "unlabelled" if unlabelled else "imported", request)
        where = f"{summary.count} images ({summary.kind}, {summary.n_defects} voids) into {out}"
    _report_mapping(summary, json_out)
    if json_out:
        emit_json(summary.model_dump(mode="json"))
    else:
        console().print(f"imported {where}", highlight=False)


def _report_mapping(summary: ImportSummary | RealImportSummary, json_out: bool) -> None:
    """The mapping (with where the bit depth came from) and every warning, on stderr."""
    import sys

    m = summary.intensity_mapping
    windows = ", ".join(f"{bits}-bit files {lo:g}..{hi:g}" for bits, (lo, hi) in sorted(m.windows.items()))
    low, high = summary.range
    lines = [
        f"intensity mapping: {m.mode}, source bit depth {m.bit_depth} (from {m.detected_from}); "
        f"{windows} -> 0..1; imported range {low:.4f}..{high:.4f}"
    ]
    if m.mode == "bit-depth" and m.detected_from != "--bit-depth":
        lines.append(
            "  (detected; pass --bit-depth N, --window LOW:HIGH or --percentile P_LOW:P_HIGH to choose)"
        )
    lines += [f"warning: {w}" for w in summary.warnings]
    if not json_out or summary.warnings:
        sys.stderr.write("\n".join(lines) + "\n")
