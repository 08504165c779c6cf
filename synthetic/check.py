"""``data check``: is a split folder (or an import-layout folder) what it claims to be?

Checks: files present and of the type their bytes say (magic + full decode); arrays of the
right dtype and shape; no NaN/inf, values in [0, 1]; no blank or saturated images; binary
masks; per-image hashes and manifest file hashes; masks agree with ``defects.jsonl`` (void
counts and areas per image). Every finding names its file (and image id where there is one).
An import-layout folder is checked through the intensity mapping an import would apply.
``require_intact`` is the short check a scorer runs first: the files against the manifest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from segfactory.errors import DataError
from segfactory.records import sha256_file
from synthetic._files import BadFile, read_image, read_source, sniff
from synthetic.mapping import IntensityMapping, MappingRequest, mapping_warnings, resolve_mapping
from synthetic.splits import SPLIT_FILES, DefectRow, ImageMeta, SplitManifest, image_sha256

BLANK_STD = 1e-4  # an image whose pixel std is below this (in [0, 1] units) is blank
SATURATED_FRACTION = 0.5  # an image with more than this fraction of pixels at 0 or 1 is saturated
MAX_LISTED = 20  # image ids listed per finding; the rest are counted


class Problem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str
    kind: str  # e.g. corrupt, not-a-split, nan, blank, saturated, mask-mismatch, hash-mismatch
    message: str


class CheckReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    layout: str  # split | import
    count: int = 0
    n_defects: int = 0
    contrast_range: list[float] | None = None  # [min, max] over defects, when known
    intensity_mapping: dict[str, Any] | None = None  # import layout: the mapping an import would apply
    warnings: list[str] = Field(default_factory=list)  # import layout: low range use, saturation
    problems: list[Problem] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, file: str, kind: str, message: str) -> None:
        self.problems.append(Problem(file=file, kind=kind, message=message))

    def summary(self) -> dict[str, object]:
        return {"ok": self.ok, **self.model_dump(mode="json")}


def _ids(indices: np.ndarray, names: list[str] | None = None) -> str:
    shown = ", ".join(names[int(i)] if names else str(int(i)) for i in indices[:MAX_LISTED])
    more = len(indices) - MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def image_problems(
    report: CheckReport, file: str, images: np.ndarray, names: list[str] | None = None
) -> None:
    """NaN/inf, out-of-range, blank and saturated images in a float (N, H, W) stack.

    Findings list image ids (stack positions), or ``names`` (e.g. file names) when given.
    """
    what = "files" if names else "images"
    flat = images.reshape(len(images), -1)
    bad = ~np.isfinite(flat).all(axis=1)
    if bad.any():
        report.add(file, "nan", f"NaN or inf in {what} {_ids(np.flatnonzero(bad), names)}")
    clean = np.where(np.isfinite(flat), flat, 0.5)
    out = (clean < 0).any(axis=1) | (clean > 1).any(axis=1)
    if out.any():
        report.add(file, "range", f"values outside [0, 1] in {what} {_ids(np.flatnonzero(out), names)}")
    flat_signal = clean.std(axis=1) < BLANK_STD
    high = (clean >= 1).mean(axis=1) > SATURATED_FRACTION
    low = (clean <= 0).mean(axis=1) > SATURATED_FRACTION
    blank = flat_signal & ~high  # constant (all dark included); constant at full scale is saturated
    if blank.any():
        report.add(file, "blank", f"blank {what} {_ids(np.flatnonzero(blank), names)}")
    saturated = high | (low & ~flat_signal)
    if saturated.any():
        report.add(file, "saturated", f"saturated {what} {_ids(np.flatnonzero(saturated), names)}")


def _load_npy(report: CheckReport, folder: Path, name: str) -> np.ndarray | None:
    path = folder / name
    with open(path, "rb") as handle:
        head = handle.read(16)
    if sniff(head) != "npy":
        report.add(name, "corrupt", f"not a .npy file: its bytes look like {sniff(head)}")
        return None
    try:
        array: np.ndarray = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        report.add(name, "corrupt", f"cannot decode ({exc}); truncated or damaged")
        return None
    return array


_Row = TypeVar("_Row", ImageMeta, DefectRow)


def _load_jsonl(report: CheckReport, folder: Path, name: str) -> list[_Row] | None:
    """The file's rows, of the row type the caller reads them as; None (and a finding) if corrupt."""
    rows: list[_Row] = []
    for line_no, line in enumerate((folder / name).read_text(errors="replace").splitlines(), 1):
        try:
            if line.strip():
                rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            report.add(name, "corrupt", f"line {line_no}: not JSON ({exc.msg})")
            return None
    return rows


def _mask_agreement(report: CheckReport, masks: np.ndarray, defects: list[DefectRow]) -> None:
    if not set(np.unique(masks).tolist()) <= {0, 1}:
        report.add("masks.npy", "mask-values", "masks are not binary (values other than 0 and 1)")
        return
    n = len(masks)
    areas = np.zeros(n, dtype=np.int64)
    size = masks.shape[1:]
    for d in defects:
        i = d.get("image_id")
        if not isinstance(i, int) or not 0 <= i < n:
            report.add("defects.jsonl", "mask-mismatch", f"defect names image {i!r}, not in 0..{n - 1}")
            return
        y0, x0, y1, x1 = d["bbox"]
        if not (0 <= y0 < y1 <= size[0] and 0 <= x0 < x1 <= size[1]):
            report.add("defects.jsonl", "mask-mismatch", f"image {i}: bbox {d['bbox']} outside {list(size)}")
        areas[i] += int(d["area"])
    mismatch = np.flatnonzero(areas != masks.reshape(n, -1).sum(axis=1, dtype=np.int64))
    if len(mismatch):
        report.add(
            "defects.jsonl",
            "mask-mismatch",
            f"void areas in defects.jsonl disagree with masks.npy for images {_ids(mismatch)}",
        )


def check_split(folder: Path) -> CheckReport:
    """Check a split folder; never raises on bad content (findings go into the report)."""
    report = CheckReport(path=str(folder), layout="split")
    missing = [name for name in SPLIT_FILES if not (folder / name).is_file()]
    for name in missing:
        report.add(name, "missing", f"{name} is missing")
    if missing:
        return report
    images = _load_npy(report, folder, "images.npy")
    masks = _load_npy(report, folder, "masks.npy")
    metas: list[ImageMeta] | None = _load_jsonl(report, folder, "images.jsonl")
    defects: list[DefectRow] | None = _load_jsonl(report, folder, "defects.jsonl")
    manifest: SplitManifest
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        report.add("manifest.json", "corrupt", f"not JSON ({exc})")
        manifest = {}
    for name, digest in manifest.get("files", {}).items():
        if (folder / name).is_file() and sha256_file(folder / name) != digest:
            report.add(name, "hash-mismatch", "file hash differs from manifest.json; the file was changed")
    if images is None or masks is None or metas is None or defects is None:
        return report
    _check_arrays(report, images, masks, metas, defects, manifest)
    return report


def _check_arrays(
    report: CheckReport,
    images: np.ndarray,
    masks: np.ndarray,
    metas: list[ImageMeta],
    defects: list[DefectRow],
    manifest: SplitManifest,
) -> None:
    report.count, report.n_defects = int(images.shape[0]) if images.ndim else 0, len(defects)
    if images.ndim != 3 or images.dtype != np.float32:
        report.add(
            "images.npy", "shape", f"images must be float32 (N, H, W); got {images.dtype} {images.shape}"
        )
        return
    if masks.shape != images.shape or masks.dtype != np.uint8:
        report.add(
            "masks.npy", "shape", f"masks must be uint8 {images.shape}; got {masks.dtype} {masks.shape}"
        )
        return
    if len(metas) != len(images):
        report.add("images.jsonl", "shape", f"{len(metas)} rows for {len(images)} images")
        return
    image_problems(report, "images.npy", images)
    wrong = [m.get("id") for i, m in enumerate(metas) if m.get("sha256") != image_sha256(images[i])]
    if wrong:
        report.add("images.jsonl", "hash-mismatch", f"image hashes differ for ids {wrong[:MAX_LISTED]}")
    if manifest.get("kind") == "unlabelled":
        if masks.any() or defects:
            report.add("masks.npy", "mask-mismatch", "an unlabelled split holds masks or defects")
        return
    _mask_agreement(report, masks, defects)
    contrasts = [float(c) for d in defects if (c := d.get("contrast")) is not None]
    report.contrast_range = [min(contrasts), max(contrasts)] if contrasts else None


class Loaded(NamedTuple):
    """One image of an import-layout folder, as read."""

    pixels: np.ndarray  # raw uint8 or uint16
    mask: np.ndarray | None  # uint8 {0, 1}, None when unlabelled or unreadable
    declared_bits: int | None  # the bit depth the file itself declares


def require_intact(folder: Path) -> None:
    """Raise DataError naming the file when a split's files differ from its manifest's hashes.

    Readers that score a split (``evaluate``, ``analyse``) call this first, so a changed
    ``images.npy`` is refused rather than scored.
    """
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        raise DataError(f"{folder} is not a split folder: it has no manifest.json")
    try:
        files = json.loads(manifest_path.read_text()).get("files")
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{manifest_path}: cannot read the manifest ({exc}); the split is damaged") from None
    if not isinstance(files, dict) or not files:
        raise DataError(
            f"{manifest_path} records no file hashes, so its arrays cannot be verified; "
            "write the split with segfactory (data generate / data import)"
        )
    for name, digest in sorted(files.items()):
        path = folder / name
        got = sha256_file(path) if path.is_file() else None
        if got != digest:
            state = (
                "is missing"
                if got is None
                else f"has sha256 {got[:12]}..., the manifest records {digest[:12]}..."
            )
            raise DataError(
                f"{path} does not match {manifest_path}: it {state}; the file was changed after "
                "the split was written, so it is not scored: restore it, or import or generate "
                "the split again"
            )


def scan_import(
    src: Path, labelled: bool, request: MappingRequest | None = None
) -> tuple[CheckReport, dict[str, Loaded]]:
    """Read and check an import-layout folder: (report, stem -> Loaded).

    The images are checked as they will be imported, through the intensity mapping of
    ``request`` (default: the detected bit depth); the mapping and its warnings go in the report.
    """
    report = CheckReport(path=str(src), layout="import")
    image_dir, mask_dir = src / "images", src / "masks"
    if not image_dir.is_dir():
        report.add(
            "images/", "missing", f"{src} has no images/ folder (import layout: images/<stem>.png ...)"
        )
        return report, {}
    files = sorted(p for p in image_dir.iterdir() if p.is_file() and not p.name.startswith("."))
    loaded: dict[str, Loaded] = {}
    for path in files:
        name = f"images/{path.name}"
        if path.stem in loaded:
            report.add(name, "duplicate", f"two images share the stem {path.stem!r}")
            continue
        try:
            pixels, bits = read_source(path)
        except BadFile as exc:
            report.add(name, "corrupt", str(exc))
            continue
        mask = _read_mask(report, mask_dir, path.stem, pixels.shape) if labelled else None
        loaded[path.stem] = Loaded(pixels, mask, bits)
    if labelled and mask_dir.is_dir():
        for extra in sorted(set(p.stem for p in mask_dir.iterdir()) - {p.stem for p in files}):
            report.add(f"masks/{extra}.png", "orphan", "mask without an image of the same stem")
    if not files:
        report.add("images/", "missing", "no image files")
    _check_import_shapes(report, loaded, request or MappingRequest())
    return report, loaded


def _read_mask(report: CheckReport, mask_dir: Path, stem: str, shape: tuple[int, ...]) -> np.ndarray | None:
    path = mask_dir / f"{stem}.png"
    if not path.is_file():
        report.add(f"masks/{stem}.png", "missing", "mask missing (use --unlabelled for images without masks)")
        return None
    try:
        mask = read_image(path)
    except BadFile as exc:
        report.add(f"masks/{stem}.png", "corrupt", str(exc))
        return None
    if mask.shape != shape:
        report.add(f"masks/{stem}.png", "shape", f"mask shape {mask.shape} differs from its image {shape}")
        return None
    return (mask > 0).astype(np.uint8)


def _check_import_shapes(report: CheckReport, loaded: dict[str, Loaded], request: MappingRequest) -> None:
    shapes = {stem: item.pixels.shape for stem, item in loaded.items()}
    if len(set(shapes.values())) > 1:
        common = max(set(shapes.values()), key=list(shapes.values()).count)
        for stem, shape in shapes.items():
            if shape != common:
                report.add(f"images/{stem}", "shape", f"shape {shape} differs from the common {common}")
        return
    stems = list(loaded)
    if stems:
        mapping = import_mapping(loaded, request)
        report.intensity_mapping = mapping.model_dump(mode="json")
        report.warnings = mapping_warnings(mapping, [loaded[s].pixels for s in stems])
        stack = np.stack([mapping.apply(loaded[s].pixels) for s in stems])
        image_problems(report, "images/", stack, names=stems)
    report.count = len(loaded)


def import_mapping(loaded: dict[str, Loaded], request: MappingRequest) -> IntensityMapping:
    """The intensity mapping of a whole import-layout set (DataError when the request cannot apply)."""
    items = list(loaded.values())
    return resolve_mapping([i.pixels for i in items], [i.declared_bits for i in items], request)


def check_path(path: Path, request: MappingRequest | None = None) -> CheckReport:
    """A split folder (has manifest.json) or an import-layout folder (has images/).

    ``request`` is the intensity mapping an import would use (import layout only).
    """
    if not path.is_dir():
        report = CheckReport(path=str(path), layout="split")
        report.add(str(path), "missing", "not a folder")
        return report
    if (path / "images").is_dir() and not (path / "manifest.json").exists():
        return scan_import(path, labelled=(path / "masks").is_dir(), request=request)[0]
    return check_split(path)
