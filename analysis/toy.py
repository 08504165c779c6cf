"""A small, fully numpy data source and learner for exercising the analysis without torch.

``toy_split`` draws images with voids and the metadata columns of a split folder (dose,
background, thickness; per void area, diameter, contrast, shape, bbox, edge). ``HistogramTrainer``
finds candidate regions of raised contrast and learns P(void) per cell of (area, peak contrast,
background class); a cell it never saw in training predicts background, so removing a size or
contrast range, a background type, or corrupting masks changes it in the way the planted-cause
experiments need. It is a test instrument, not a segmentation model; real runs use ONNX models
through ``analysis.predict``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import ndimage

from synthetic.splits import ImageMeta, image_sha256

BACKGROUNDS = ("flat", "gradient", "texture")
SHAPES = ("round", "elongated")
DIAMETER_RANGE_PX = (2.0, 10.0)
CONTRAST_RANGE = (0.08, 0.40)
MAX_VOIDS = 3
TEXTURE_AMPLITUDE = 0.04  # standard deviation of the "texture" background
AREA_EDGES_LOG2 = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)  # region area cut points, log2 pixels (full capacity)
CONTRAST_EDGES = (0.05, 0.08, 0.12, 0.18, 0.26)  # region peak contrast cut points (full capacity)
TEXTURE_CUT, SLOPE_CUT = 0.0105, 0.0045  # image features that read a background as textured / sloped
MIN_CELL_REGIONS = 2  # training regions a cell needs before it predicts anything but background
SUBSAMPLE = 0.9  # share of training images each fit sees (seeded)
CANDIDATE_CONTRAST = 0.035  # local contrast above which pixels form candidate regions
SMOOTH_PX = 0.8  # images are denoised by this Gaussian sigma (pixels) before features
N_FEATURES = 4


@dataclass
class ToySplit:
    images: np.ndarray  # (N, H, W) float32 in [0, 1]
    masks: np.ndarray  # (N, H, W) uint8
    image_meta: list[ImageMeta]
    defects: list[dict[str, Any]]  # defects.jsonl rows, typed as synthetic.splits.Split holds them


def _background(kind: str, size: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "flat":
        return np.zeros((size, size))
    if kind == "gradient":
        ramp = np.linspace(-0.15, 0.15, size)
        return ramp[None, :] if rng.random() < 0.5 else ramp[:, None] * np.ones((1, size))
    texture = ndimage.gaussian_filter(rng.normal(0, 1, (size, size)), 2.0)
    return TEXTURE_AMPLITUDE * texture / (texture.std() + 1e-9)


def _void(size: int, rng: np.random.Generator, prefix: str) -> tuple[np.ndarray, dict[str, Any]]:
    diameter = float(rng.uniform(*DIAMETER_RANGE_PX))
    shape = str(rng.choice(SHAPES))
    cy, cx = rng.uniform(2, size - 2, 2)
    ry = diameter / 2 * (0.5 if shape == "elongated" else 1.0)
    rx = diameter / 2
    yy, xx = np.mgrid[:size, :size]
    blob = ((yy - cy) / max(ry, 0.8)) ** 2 + ((xx - cx) / max(rx, 0.8)) ** 2 <= 1.0
    if not blob.any():
        blob[int(cy), int(cx)] = True
    ys, xs = np.nonzero(blob)
    bbox = [int(ys.min()), int(xs.min()), int(ys.max()) + 1, int(xs.max()) + 1]
    row = {
        "image_id": prefix,
        "area": int(blob.sum()),
        "diameter": round(diameter, 3),
        "contrast": round(float(rng.uniform(*CONTRAST_RANGE)), 4),
        "shape": shape,
        "bbox": bbox,
        "edge": bool(bbox[0] == 0 or bbox[1] == 0 or bbox[2] == size or bbox[3] == size),
    }
    return blob, row


def toy_split(n: int, size: int = 40, seed: int = 0) -> ToySplit:
    """``n`` images of ``size`` pixels; each has 0..MAX_VOIDS voids and its metadata."""
    rng = np.random.default_rng(seed)
    images = np.zeros((n, size, size), dtype=np.float32)
    masks = np.zeros((n, size, size), dtype=np.uint8)
    meta: list[ImageMeta] = []
    defects = []
    for k in range(n):
        image_id = f"toy-{seed}-{k:05d}"
        background = str(rng.choice(BACKGROUNDS))
        dose, thickness = float(rng.uniform(0.5, 2.0)), float(rng.uniform(0.5, 1.5))
        signal = 0.55 - 0.1 * thickness + _background(background, size, rng)
        for _ in range(int(rng.integers(0, MAX_VOIDS + 1))):
            blob, row = _void(size, rng, image_id)
            row.update(thickness=round(thickness, 3), noise=round(0.04 / np.sqrt(dose), 4))
            signal = signal + row["contrast"] * ndimage.gaussian_filter(blob.astype(float), 0.6)
            masks[k] |= blob.astype(np.uint8)
            defects.append(row)
        noisy = signal + rng.normal(0, 0.04 / np.sqrt(dose), (size, size))
        images[k] = np.clip(noisy, 0, 1).astype(np.float32)
        meta.append(
            {
                "id": image_id,
                "sha256": image_sha256(images[k]),
                "dose": round(dose, 3),
                "background": background,
                "thickness": round(thickness, 3),
                "part": "toy",
            }
        )
    return ToySplit(images, masks, meta, defects)


def _contrast(images: np.ndarray) -> np.ndarray:
    x = ndimage.gaussian_filter(images.astype(np.float64), (0, SMOOTH_PX, SMOOTH_PX))
    return x - ndimage.gaussian_filter(x, (0, 5.0, 5.0))


def _image_features(images: np.ndarray) -> np.ndarray:
    """(N, 2): band-pass texture energy and background slope, which tell background types apart."""
    x = images.astype(np.float64)

    def g(sigma: float) -> np.ndarray:
        return ndimage.gaussian_filter(x, (0, sigma, sigma))

    wide = g(6.0)
    band = np.median(np.abs(g(1.5) - g(4.0)), axis=(1, 2))
    slope = np.median(np.hypot(*np.gradient(wide, axis=(1, 2))), axis=(1, 2))
    return np.stack([band, slope], axis=1)


@dataclass
class Candidates:
    """Connected regions of raised local contrast, with one feature row per region."""

    labels: np.ndarray  # (N, H, W) int: region id, 0 = none (ids are global across images)
    feats: np.ndarray  # (R, N_FEATURES): log2 area, peak contrast, texture, slope


def candidates(images: np.ndarray) -> Candidates:
    contrast = _contrast(images)
    labels, n_regions = ndimage.label(
        contrast > CANDIDATE_CONTRAST,
        structure=np.array(
            [
                [[0, 0, 0], [0, 0, 0], [0, 0, 0]],
                [[0, 1, 0], [1, 1, 1], [0, 1, 0]],
                [[0, 0, 0], [0, 0, 0], [0, 0, 0]],
            ]
        ),
    )
    ids = np.arange(1, n_regions + 1)
    area = np.bincount(labels.ravel(), minlength=n_regions + 1)[1:].astype(float)
    peak = np.asarray(ndimage.maximum(contrast, labels, ids)) if n_regions else np.zeros(0)
    owner = (
        np.asarray(ndimage.minimum(np.indices(labels.shape)[0], labels, ids)).astype(int)
        if n_regions
        else np.zeros(0, int)
    )
    per_image = _image_features(images)
    feats = (
        np.column_stack([np.log2(area), peak, per_image[owner, 0], per_image[owner, 1]])
        if n_regions
        else np.zeros((0, N_FEATURES))
    )
    return Candidates(labels, feats)


def _background_class(per_image: np.ndarray) -> np.ndarray:
    """0 flat, 1 textured, 2 sloped: a fixed-threshold reading of the image features."""
    texture = per_image[:, 0] > TEXTURE_CUT
    return np.where(per_image[:, 1] > SLOPE_CUT, 2, texture.astype(int))


def _keep_edges(edges: tuple[float, ...], capacity: float) -> np.ndarray:
    n = max(1, round(len(edges) * capacity))
    return np.array(edges)[np.linspace(0, len(edges) - 1, n).round().astype(int)]


@dataclass
class HistogramPredictor:
    """P(void) per cell of (area, peak contrast, background class); implements ``Predictor``.

    A cell that held fewer than ``MIN_CELL_REGIONS`` training regions predicts background:
    the model cannot detect what it never saw.
    """

    area_edges: np.ndarray  # log2 pixels
    contrast_edges: np.ndarray
    table: np.ndarray  # (area bins, contrast bins, 3) P(void)

    def cells(self, feats: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (
            np.searchsorted(self.area_edges, feats[:, 0]),
            np.searchsorted(self.contrast_edges, feats[:, 1]),
            _background_class(feats[:, 2:4]),
        )

    def predict(self, images: np.ndarray) -> np.ndarray:
        cand = candidates(images)
        region_prob = np.concatenate([[0.0], self.table[self.cells(cand.feats)]])
        return region_prob[cand.labels].astype(np.float32)


class HistogramTrainer:
    """Fits a ``HistogramPredictor``; ``capacity`` in (0, 1] keeps that share of the bin edges."""

    def fit(
        self, images: np.ndarray, masks: np.ndarray, *, capacity: float = 1.0, seed: int = 0
    ) -> HistogramPredictor:
        rng = np.random.default_rng(seed)
        keep = rng.random(images.shape[0]) < SUBSAMPLE  # training noise: each seed sees a different subset
        images, masks = images[keep], masks[keep]
        cand = candidates(images)
        n_regions = cand.feats.shape[0]
        hits = np.bincount(cand.labels.ravel(), weights=masks.ravel().astype(float), minlength=n_regions + 1)[
            1:
        ]
        area = np.bincount(cand.labels.ravel(), minlength=n_regions + 1)[1:]
        is_void = (hits >= 0.5 * np.maximum(area, 1)).astype(float)
        model = HistogramPredictor(
            _keep_edges(AREA_EDGES_LOG2, capacity), _keep_edges(CONTRAST_EDGES, capacity), np.zeros(1)
        )
        shape = (model.area_edges.size + 1, model.contrast_edges.size + 1, 3)
        flat = np.ravel_multi_index(model.cells(cand.feats), shape) if n_regions else np.zeros(0, int)
        size = int(np.prod(shape))
        pos = np.bincount(flat, weights=is_void, minlength=size)
        tot = np.bincount(flat, minlength=size).astype(float)
        seen = tot >= MIN_CELL_REGIONS
        model.table = np.where(seen, pos / np.maximum(tot, 1), 0.0).reshape(shape)
        return model


def contrast_onnx(path: Path, gain: float = 40.0) -> Path:
    """Write a tiny ONNX blob detector under the model contract (input ``image``, output ``prob``):
    prob = sigmoid(gain * (image - 9x9 local mean) - 2). ``gain=0`` predicts nothing."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node(
            "AveragePool", ["image"], ["mean"], kernel_shape=[9, 9], pads=[4, 4, 4, 4], count_include_pad=0
        ),
        helper.make_node("Sub", ["image", "mean"], ["diff"]),
        helper.make_node("Mul", ["diff", "gain"], ["scaled"]),
        helper.make_node("Sub", ["scaled", "two"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["prob"]),
    ]
    shape: list[str | int] = ["N", 1, "H", "W"]
    graph = helper.make_graph(
        nodes,
        "contrast",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, shape)],
        [
            helper.make_tensor("gain", TensorProto.FLOAT, [], [gain]),
            helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
