"""A dataset version in nnU-Net's raw format: ``Dataset<id>_<name>/imagesTr, labelsTr, dataset.json``.

Each image becomes one 2D ``.mha`` file (float32, read by nnU-Net's SimpleITK reader as a 2D
case of spacing 1 x 1), each mask a ``uint8`` label map (0 background, 1 void). The training
cases are the version's train split; a few dev images are added as the validation cases nnU-Net
logs its pseudo Dice on, listed in ``splits_final.json`` so that fold 0 trains on exactly the
train split (nnU-Net's default would hold a fifth of it out).

Images are written shifted by ``+1``: nnU-Net crops every case to the bounding box of its
non-zero pixels and normalises inside it, so a part whose background reads exactly 0 would be
cropped in training and prediction but not by the exported graph. With the shift no pixel is 0,
nothing is cropped, and the z-score normalisation nnU-Net plans for a non-CT channel is
unchanged by a constant offset, so the exported graph normalises the unshifted image exactly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from segfactory.errors import DataError

FILE_ENDING = ".mha"  # uncompressed: fast to write and read
CHANNEL_NAME = "xray"  # any name but "CT" gets nnU-Net's per-image z-score normalisation
RAW_NAME = "voids"  # the dataset's name in nnU-Net's folders: Dataset<id>_voids
INTENSITY_SHIFT = 1.0  # added to every written image (see the module docstring)


@dataclass(frozen=True)
class RawDataset:
    folder: Path  # <nnUNet_raw>/Dataset<id>_<name>
    name: str  # Dataset<id>_<name>
    train_ids: list[str]
    val_ids: list[str]


def _write_case(folder: Path, case: str, image: np.ndarray, mask: np.ndarray) -> None:
    import SimpleITK as sitk  # noqa: N813  (the package's own name)

    img = sitk.GetImageFromArray(image.astype(np.float32) + np.float32(INTENSITY_SHIFT))
    seg = sitk.GetImageFromArray((mask > 0).astype(np.uint8))
    sitk.WriteImage(img, str(folder / "imagesTr" / f"{case}_0000{FILE_ENDING}"))
    sitk.WriteImage(seg, str(folder / "labelsTr" / f"{case}{FILE_ENDING}"))


def write_raw(
    train_images: np.ndarray,
    train_masks: np.ndarray,
    val_images: np.ndarray,
    val_masks: np.ndarray,
    raw_root: Path,
    dataset_id: int,
    name: str = RAW_NAME,
) -> RawDataset:
    """Write the raw dataset; raises DataError on shapes nnU-Net cannot take or a mask without voids
    anywhere."""
    if train_images.ndim != 3 or train_images.shape != train_masks.shape:
        raise DataError(
            f"nnU-Net export needs (N, H, W) images and masks of one shape; got "
            f"{train_images.shape} and {train_masks.shape}"
        )
    if not train_masks.any():
        raise DataError("the training split has no void pixels; nnU-Net cannot plan a foreground class")
    dataset = f"Dataset{dataset_id:03d}_{name}"
    folder = raw_root / dataset
    for sub in ("imagesTr", "labelsTr"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    train_ids = [f"tr{i:05d}" for i in range(len(train_images))]
    val_ids = [f"dev{i:05d}" for i in range(len(val_images))]
    for case, image, mask in zip(
        train_ids + val_ids, [*train_images, *val_images], [*train_masks, *val_masks], strict=True
    ):
        _write_case(folder, case, image, mask)
    meta = {
        "channel_names": {"0": CHANNEL_NAME},
        "labels": {"background": 0, "void": 1},
        "numTraining": len(train_ids) + len(val_ids),
        "file_ending": FILE_ENDING,
    }
    (folder / "dataset.json").write_text(json.dumps(meta, indent=2))
    return RawDataset(folder, dataset, train_ids, val_ids)


def write_splits(preprocessed_dataset: Path, raw: RawDataset) -> Path:
    """Fold 0 = the train split for training, the dev sample for nnU-Net's logged validation."""
    path = preprocessed_dataset / "splits_final.json"
    path.write_text(json.dumps([{"train": raw.train_ids, "val": raw.val_ids}], indent=2))
    return path
