"""Dataset versions that add images to a base: the base's first images, then the added ones.

A training config with ``max_train_images`` keeps the first images of its split. A version that
adds images therefore holds the images its parent trained on (the base's first ``keep``) and puts
the added ones after them; its manifest's ``appended`` and ``base_images`` say so, and the runner
refuses a ticket whose cap would cut the added images (``runner/_execute.py``). Two builders use
it: the targeted synthetic top-up and its augmentation control (``build_arm``, for the loop's
data tickets and ``controls.topup``), and the loop's approved-data versions
(``agents/_realise.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import SupportsInt

import numpy as np

from synthetic import generate
from synthetic.params import GenParams, make_params
from synthetic.splits import ImageMeta, Split, SplitManifest, image_sha256, read_split, write_split
from synthetic.versions import DatasetVersion, create_version

TOPUP_SEED_OFFSET = 7_000_000  # public generator seed of a dose = offset + dose (documented, reproducible)
AUG_GAIN = (0.95, 1.05)  # gain range of the augmentation arm's re-drawn copies


def append_images(
    base: Split,
    images: np.ndarray,
    masks: np.ndarray,
    metas: Sequence[Mapping[str, object]],
    defects: Sequence[Mapping[str, object]],
    manifest: Mapping[str, object],
    out: Path,
    keep: int | None = None,
) -> Path:
    """Write ``base``'s first ``keep`` images (all when None), then ``images``, as a split at ``out``.

    ``metas[i]`` and the defects whose ``image_id`` is ``i`` describe ``images[i]``; both are
    renumbered to follow the kept base images. ``manifest`` gains ``appended`` and ``base_images``.
    The rows are written as given otherwise (a caller may add keys to a split's rows).
    """
    n0 = len(base) if keep is None else min(keep, len(base))
    kept = {str(m["id"]) for m in base.image_meta[:n0]}
    base_defects = (
        base.defects if n0 == len(base) else [d for d in base.defects if str(d["image_id"]) in kept]
    )
    new_metas = [{**m, "id": n0 + i} for i, m in enumerate(metas)]
    new_defects = [{**d, "image_id": n0 + _position(d["image_id"])} for d in defects]
    return write_split(
        out,
        np.concatenate([np.asarray(base.images[:n0]), np.asarray(images)]),
        np.concatenate([np.asarray(base.masks[:n0]), np.asarray(masks)]),
        [*base.image_meta[:n0], *new_metas],
        [*base_defects, *new_defects],
        {**manifest, "appended": len(images), "base_images": n0},
    )


def _position(image_id: object) -> int:
    """``int(image_id)``: an added defect's ``image_id`` is its image's position in the added images."""
    if isinstance(image_id, str | SupportsInt):
        return int(image_id)
    raise TypeError(f"a defect's image_id must be a number; got {image_id!r}")


def base_params(split_manifest: SplitManifest) -> GenParams:
    """The generator parameters a split was drawn with (the defaults when it does not say)."""
    params = split_manifest.get("params")
    return make_params(**params) if isinstance(params, dict) else GenParams()


def _augmented(
    images: np.ndarray, masks: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, ...]:
    picks = rng.choice(len(images), n, replace=n > len(images))
    out_i, out_m = [], []
    for k in picks:
        turns, flip = int(rng.integers(4)), bool(rng.integers(2))
        img, msk = np.rot90(images[k], turns), np.rot90(masks[k], turns)
        if flip:
            img, msk = img[:, ::-1], msk[:, ::-1]
        out_i.append(np.clip(img * rng.uniform(*AUG_GAIN), 0, 1))
        out_m.append(msk)
    return np.stack(out_i).astype(np.float32), np.stack(out_m).astype(np.uint8), picks


def build_arm(
    home_root: Path,
    base: DatasetVersion,
    arm: str,
    n: int,
    params: GenParams,
    slice_name: str,
    seed: int,
    work: Path,
    keep: int | None = None,
) -> DatasetVersion:
    """The approved dataset version of one top-up arm at one dose: base train (its first ``keep``
    images, the ones a capped training config trains on; all when None) + ``n`` images, either
    generated with ``params`` (arm ``synthetic``) or re-drawn from the kept base images with a
    flip, a 90-degree rotation and a small gain (arm ``augment``, seeded by ``seed``)."""
    split = read_split(base.train, mmap=True)
    size = int(split.images.shape[1])
    note: dict[str, str | int] = {"arm": arm, "n": n, "slice": slice_name, "base": base.ref}
    if arm == "synthetic":
        drawn = generate(n, size, TOPUP_SEED_OFFSET + n, params, workers=1)
        extra = (drawn.images, drawn.masks, drawn.image_meta, drawn.defects)
    else:
        rng = np.random.default_rng(seed * 1_000_003 + n)
        images, masks, picks = _augmented(
            np.asarray(split.images[:keep]), np.asarray(split.masks[:keep]), n, rng
        )
        metas: list[ImageMeta] = [
            {"id": i, "sha256": image_sha256(images[i]), "augmented_from": int(k)}
            for i, k in enumerate(picks)
        ]
        extra = (images, masks, metas, [])
    manifest: SplitManifest = {
        "generator": "segfactory.topup",
        "kind": "synthetic",
        "parent": split.manifest.get("content_hash"),
        "topup": note,
    }
    path = append_images(split, *extra, manifest, work / f"{arm}-n{n}", keep)
    return create_version(
        home_root, f"topup-{_slug(slice_name)}-{arm}", {"train": path}, parent=base.ref, approve_it=True
    )


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


__all__ = ["AUG_GAIN", "TOPUP_SEED_OFFSET", "append_images", "base_params", "build_arm"]
