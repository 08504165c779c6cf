"""``data export`` (split folder -> PNGs for people) and ``data import`` (import layout -> split).

Export writes the import layout: ``images/<id>.png`` (16-bit greyscale, value = round(x * 65535))
and ``masks/<id>.png`` (8-bit, 255 = void), so exporting and importing again gives back the
masks exactly and the images to within 1/65535. Import runs the same checks as ``data check``
and writes nothing at all if any file is bad; voids become the 8-connected components of the
masks.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

import numpy as np

from segfactory.errors import DataError
from synthetic._files import to_unit
from synthetic.check import MAX_LISTED, scan_import
from synthetic.splits import image_sha256, read_split, write_split

ImportKind = Literal["imported", "real", "unlabelled"]
RING_PX = 2  # width of the ring around a void used to estimate its local contrast


def export_png(split_dir: Path, out: Path) -> int:
    """Write a split folder as PNGs (import layout) into a new folder ``out``; returns the count."""
    from PIL import Image

    split = read_split(split_dir, mmap=True)
    if out.exists():
        raise DataError(f"{out} already exists; choose a new --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        (tmp / "images").mkdir()
        (tmp / "masks").mkdir()
        for i, meta in enumerate(split.image_meta):
            stem = f"{int(meta['id']):06d}" if isinstance(meta.get("id"), int) else str(meta["id"])
            pixels = np.round(np.clip(split.images[i], 0, 1) * 65535).astype(np.uint16)
            Image.fromarray(pixels).save(tmp / "images" / f"{stem}.png")
            Image.fromarray((split.masks[i] > 0).astype(np.uint8) * 255).save(tmp / "masks" / f"{stem}.png")
        os.chmod(tmp, 0o755)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return len(split)


def _component_rows(index: int, image: np.ndarray, mask: np.ndarray) -> list[dict[str, Any]]:
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
        rows.append({"image_id": index, "area": area, "diameter": round(2 * math.sqrt(area / math.pi), 4),
                     "contrast": None if contrast is None else round(contrast, 6), "thickness": None,
                     "noise": None, "shape": "unknown", "bbox": [y0, x0, y1, x1],
                     "edge": y0 == 0 or x0 == 0 or y1 == h or x1 == w})
    return rows


def import_folder(src: Path, out: Path, kind: ImportKind = "imported") -> dict[str, Any]:
    """Import ``src`` (import layout) as a split folder at ``out``; DataError lists every bad file."""
    if out.exists():
        raise DataError(f"{out} already exists; split folders are immutable, choose a new --out")
    report, loaded = scan_import(src, labelled=kind != "unlabelled")
    if not report.ok:
        listed = "; ".join(f"{p.file}: {p.message}" for p in report.problems[:MAX_LISTED])
        raise DataError(f"import refused, nothing written: {len(report.problems)} problem(s) in {src}: {listed}")
    stems = list(loaded)
    images = np.stack([to_unit(loaded[s][0]) for s in stems])
    masks = np.stack([m if (m := loaded[s][1]) is not None else np.zeros(images.shape[1:], np.uint8)
                      for s in stems])
    metas, defects = [], []
    for i, stem in enumerate(stems):
        pixels = loaded[stem][0]
        metas.append({"id": i, "sha256": image_sha256(images[i]), "source": stem,
                      "bit_depth": 8 if pixels.dtype == np.uint8 else 16})
        if kind != "unlabelled":
            defects.extend(_component_rows(i, images[i], masks[i]))
    manifest = {"generator": None, "kind": kind, "source": str(src.resolve()), "parent": None}
    write_split(out, images, masks, metas, defects, manifest)
    return {"out": str(out), "count": len(stems), "kind": kind, "n_defects": len(defects)}
