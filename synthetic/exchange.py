"""``data export`` (split folder -> PNGs for people) and ``data import`` (import layout -> split).

Export writes the import layout: ``images/<id>.png`` (16-bit greyscale, value = round(x * 65535),
with an ``sBIT`` chunk declaring all 16 bits) and ``masks/<id>.png`` (8-bit, 255 = void), so
exporting and importing again gives back the masks exactly and the images to within 1/65535.
Import runs the same checks as ``data check`` and writes nothing at all if any file is bad;
voids become the 8-connected components of the masks. Raw detector values become [0, 1]
intensities through an explicit mapping (``synthetic.mapping``), recorded in the manifest as
``intensity_mapping`` with each image's source ``bit_depth``; the set's statistics
(``synthetic.intensity``) are recorded as ``intensity``.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from segfactory.errors import DataError
from segfactory.files import staged_dir
from synthetic.check import MAX_LISTED, import_mapping, scan_import
from synthetic.intensity import set_stats
from synthetic.mapping import IntensityMapping, MappingRequest
from synthetic.splits import ImageMeta, SplitManifest, content_hash, image_sha256, read_split, write_split

ImportKind = Literal["imported", "real", "unlabelled"]


class ImportSummary(BaseModel):
    """What ``data import`` made of a folder (``--json`` prints it as it is)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    out: str
    count: int  # images
    kind: ImportKind
    n_defects: int  # voids: connected components of the masks
    intensity_mapping: IntensityMapping
    warnings: list[str]  # about the intensity mapping
    range: tuple[float, float]  # the imported images' smallest and largest value, in 0..1


class RealImportSummary(BaseModel):
    """What ``data import --real`` made of a labelled real set: the host's part and the vault's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    out: str
    kind: Literal["real"] = "real"
    stand_in: bool  # the set is a synthetic stand-in (its stand_in.json says so)
    real_dev: str
    holdout: str
    counts: dict[str, int]  # images in each part
    intensity_mapping: IntensityMapping
    warnings: list[str]
    range: tuple[float, float]


RING_PX = 2  # width of the ring around a void used to estimate its local contrast


def _sbit(bits: int) -> Any:
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add(b"sBIT", bytes([bits]))  # so a re-import reads 16 bits even when the set is dark
    return info


def export_png(split_dir: Path, out: Path) -> int:
    """Write a split folder as PNGs (import layout) into a new folder ``out``; returns the count."""
    from PIL import Image

    split = read_split(split_dir, mmap=True)
    if out.exists():
        raise DataError(f"{out} already exists; choose a new --out")
    sbit = _sbit(16)
    with staged_dir(out, mode=0o755) as tmp:
        (tmp / "images").mkdir()
        (tmp / "masks").mkdir()
        for i, meta in enumerate(split.image_meta):
            stem = f"{int(meta['id']):06d}" if isinstance(meta.get("id"), int) else str(meta["id"])
            pixels = np.round(np.clip(split.images[i], 0, 1) * 65535).astype(np.uint16)
            Image.fromarray(pixels).save(tmp / "images" / f"{stem}.png", pnginfo=sbit)
            Image.fromarray((split.masks[i] > 0).astype(np.uint8) * 255).save(tmp / "masks" / f"{stem}.png")
    return len(split)


def component_rows(index: int, image: np.ndarray, mask: np.ndarray) -> list[dict[str, Any]]:
    from scipy import ndimage

    labels, count = ndimage.label(mask, structure=np.ones((3, 3)))
    rows = []
    h, w = mask.shape
    for k, box in enumerate(ndimage.find_objects(labels), 1):
        if box is None:
            continue
        y0, y1, x0, x1 = box[0].start, box[0].stop, box[1].start, box[1].stop
        inside = labels == k
        grown = ndimage.binary_dilation(inside, iterations=RING_PX) & (labels == 0)
        area = int(inside.sum())
        v, r = float(image[inside].mean()), float(image[grown].mean()) if grown.any() else math.nan
        contrast = abs(v - r) / (v + r) if grown.any() and v + r > 0 else None
        rows.append(
            {
                "image_id": index,
                "area": area,
                "diameter": round(2 * math.sqrt(area / math.pi), 4),
                "contrast": None if contrast is None else round(contrast, 6),
                "thickness": None,
                "noise": None,
                "shape": "unknown",
                "bbox": [y0, x0, y1, x1],
                "edge": y0 == 0 or x0 == 0 or y1 == h or x1 == w,
            }
        )
    return rows


def import_folder(
    src: Path, out: Path, kind: ImportKind = "imported", request: MappingRequest | None = None
) -> ImportSummary:
    """Import ``src`` (import layout) as a split folder at ``out``; DataError lists every bad file.

    ``request`` picks the intensity mapping (default: the detected bit depth). The summary
    holds the mapping, the resulting intensity range and any warnings about it.
    """
    if out.exists():
        raise DataError(f"{out} already exists; split folders are immutable, choose a new --out")
    request = request or MappingRequest()
    report, loaded = scan_import(src, labelled=kind != "unlabelled", request=request)
    if not report.ok:
        listed = "; ".join(f"{p.file}: {p.message}" for p in report.problems[:MAX_LISTED])
        hint = f"; intensity mapping: {'; '.join(report.warnings)}" if report.warnings else ""
        raise DataError(
            f"import refused, nothing written: {len(report.problems)} problem(s) in {src}: {listed}{hint}"
        )
    stems = list(loaded)
    mapping = import_mapping(loaded, request)
    images = np.stack([mapping.apply(loaded[s].pixels) for s in stems])
    masks = np.stack(
        [m if (m := loaded[s].mask) is not None else np.zeros(images.shape[1:], np.uint8) for s in stems]
    )
    metas: list[ImageMeta] = []
    defects = []
    for i, stem in enumerate(stems):
        container = 8 * loaded[stem].pixels.dtype.itemsize
        metas.append(
            {
                "id": i,
                "sha256": image_sha256(images[i]),
                "source": stem,
                "bit_depth": mapping.depth_of(container),
                "container_bits": container,
            }
        )
        if kind != "unlabelled":
            defects.extend(component_rows(i, images[i], masks[i]))
    stats = set_stats(
        images, masks if kind != "unlabelled" else None, content_hash(images, masks, metas, defects)
    )
    manifest: SplitManifest = {
        "generator": None,
        "kind": kind,
        "source": str(src.resolve()),
        "parent": None,
        "intensity_mapping": mapping.model_dump(mode="json"),
        "import_warnings": report.warnings,
        "intensity": stats.model_dump(mode="json"),
    }
    write_split(out, images, masks, metas, defects, manifest)
    return ImportSummary(
        out=str(out),
        count=len(stems),
        kind=kind,
        n_defects=len(defects),
        intensity_mapping=mapping,
        warnings=report.warnings,
        range=(float(images.min()), float(images.max())),
    )


REAL_DEV = "real-dev"  # host-side part of a real import: realism checks, blind test, top-up CI measure
REAL_HOLDOUT = "holdout"  # the rest, for `gate add-real` (the vault's real-holdout tier)
REAL_DEV_FRACTION = 0.5  # share of the images that go to real-dev
MIN_REAL_VOIDS = 20  # labelled voids each part needs (the win rule's min_support); fewer -> DataError
STAND_IN_FILE = "stand_in.json"  # present in SRC when the images are a synthetic stand-in, not real data


def _real_parts(split_dir: Path, dev_fraction: float, seed: int) -> dict[str, np.ndarray]:
    split = read_split(split_dir)
    order = np.random.default_rng(seed).permutation(len(split))
    n_dev = int(round(len(split) * dev_fraction))
    parts = {REAL_DEV: np.sort(order[:n_dev]), REAL_HOLDOUT: np.sort(order[n_dev:])}
    for name, idx in parts.items():
        voids = sum(1 for d in split.defects if d["image_id"] in set(idx.tolist()))
        if voids < MIN_REAL_VOIDS:
            raise DataError(
                f"real set too small: its {name} part holds {voids} labelled voids, the minimum "
                f"support is {MIN_REAL_VOIDS}; {len(split)} images with {len(split.defects)} voids "
                f"were given, add more labelled images"
            )
    return parts


def _write_part(split_dir: Path, idx: np.ndarray, out: Path, extra: SplitManifest) -> None:
    split = read_split(split_dir)
    remap = {int(old): new for new, old in enumerate(idx.tolist())}
    metas = [{**split.image_meta[old], "id": new} for old, new in remap.items()]
    defects = [{**d, "image_id": remap[d["image_id"]]} for d in split.defects if d["image_id"] in remap]
    manifest = {**split.manifest, "parent": split.manifest["content_hash"], **extra}
    for key in ("files", "content_hash", "count", "shape", "n_defects", "manifest_version"):
        manifest.pop(key, None)
    images, masks = split.images[idx], split.masks[idx]
    manifest["intensity"] = set_stats(images, masks, content_hash(images, masks, metas, defects)).model_dump(
        mode="json"
    )
    write_split(out, images, masks, metas, defects, manifest)


def import_real(
    src: Path,
    out: Path,
    *,
    dev_fraction: float = REAL_DEV_FRACTION,
    seed: int = 0,
    request: MappingRequest | None = None,
) -> RealImportSummary:
    """Import labelled real images into ``out/real-dev`` (host side) and ``out/holdout`` (vault).

    ``real-dev`` is for the host's realism checks and people only: never mount it into a
    sandbox and never put it in an agent's context. ``holdout`` goes to ``gate add-real``.
    Raises DataError when ``src`` has no masks or a part would hold fewer than
    ``MIN_REAL_VOIDS`` voids; nothing is written then. A ``stand_in.json`` in ``src`` marks the
    set as a synthetic stand-in (manifest ``stand_in: true``). The intensity mapping
    (``request``) is resolved once over the whole set, so both parts share it.
    """
    if out.exists():
        raise DataError(f"{out} already exists; choose a new --out")
    masks_dir = src / "masks"
    if not masks_dir.is_dir() or not any(masks_dir.iterdir()):
        raise DataError(
            f"real set {src} has no masks ({masks_dir} is missing or empty); a real set must be "
            f"labelled: masks/<stem>.png beside images/<stem>.*, non-zero = void"
        )
    marker = src / STAND_IN_FILE
    extra: SplitManifest = {"kind": "real"}
    if marker.is_file():
        import json

        extra["stand_in"] = True
        extra["stand_in_note"] = json.loads(marker.read_text()).get("note", "synthetic stand-in")
    with staged_dir(out, mode=0o700) as tmp:  # real images: readable by their owner only
        whole = import_folder(src, tmp / "all", "real", request)
        parts = _real_parts(tmp / "all", dev_fraction, seed)
        for name, idx in parts.items():
            _write_part(tmp / "all", idx, tmp / name, {**extra, "real_part": name})
        shutil.rmtree(tmp / "all")
    counts = {name: int(len(idx)) for name, idx in parts.items()}
    return RealImportSummary(
        out=str(out),
        stand_in=bool(extra.get("stand_in", False)),
        real_dev=str(out / REAL_DEV),
        holdout=str(out / REAL_HOLDOUT),
        counts=counts,
        intensity_mapping=whole.intensity_mapping,
        warnings=whole.warnings,
        range=whole.range,
    )
