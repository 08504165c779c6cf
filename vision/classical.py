"""``baseline-classical``: background estimation, threshold, morphology, size filter.

    background = mean filter of side ``bg_kernel``            (AveragePool, pads excluded)
    score      = polarity * (image - background) - threshold  (voids are brighter: polarity +1)
    logits     = scale * opening(score, open_size)             (min-pool then max-pool)

The opening is the size filter: a component narrower than ``open_size`` pixels disappears. It
is built from standard torch ops, so it exports to ONNX under the same contract as any model,
and the gate scores it the same way. Its few parameters are tuned on dev by grid search for
object F1 (tuning on the split it is then scored on favours the baseline, which makes "the
trained model beats it" a conservative claim).
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict
from torch import nn

from vision.config import TrainConfig, dump_config
from vision.data import load_version
from vision.export import export_onnx, parity, torch_predict
from vision.metrics import aggregate, per_image_metrics
from vision.result import PARITY_IMAGES, TrainResult, write_result

PARAMS_FILE = "classical.json"
BG_KERNELS = (7, 11, 15)  # background window sides tried, pixels
OPEN_SIZES = (1, 2, 3)  # opening sides tried, pixels (1 = no size filter)
THRESHOLD_QUANTILES = (0.90, 0.95, 0.97, 0.98, 0.99, 0.995, 0.998, 0.999)  # of the dev score
LOGIT_SCALE = 200.0  # sharpness: logits per unit of intensity difference


class ClassicalParams(BaseModel):
    """Defaults are the values tuned on the demo profile's dev split (generator defaults, 64 px)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bg_kernel: int = 7  # background window side, pixels (odd)
    polarity: float = 1.0  # +1: voids are brighter than their surroundings (more transmission)
    threshold: float = 0.04  # intensity difference above the background that marks a void
    open_size: int = 2  # opening side, pixels (1 = no size filter)
    scale: float = LOGIT_SCALE


class ClassicalDetector(nn.Module):
    """The classical detector as a logits model (N, 1, H, W) -> (N, 1, H, W)."""

    def __init__(self, params: ClassicalParams | None = None) -> None:
        super().__init__()
        self.params = params or ClassicalParams()

    def score(self, x: torch.Tensor) -> torch.Tensor:
        k = self.params.bg_kernel
        background = F.avg_pool2d(x, k, stride=1, padding=k // 2, count_include_pad=False)
        return self.params.polarity * (x - background) - self.params.threshold

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.params.scale * opening(self.score(x), self.params.open_size)


def opening(s: torch.Tensor, k: int) -> torch.Tensor:
    """Grey-level opening with a k x k square (min-pool then max-pool); k = 1 is the identity."""
    if k <= 1:
        return s
    h, w = s.shape[-2:]
    lo, hi = (k - 1) // 2, k // 2
    s = -F.max_pool2d(F.pad(-s, (lo, hi, lo, hi), value=1e4), k, stride=1)  # erosion
    s = F.max_pool2d(F.pad(s, (hi, lo, hi, lo), value=-1e4), k, stride=1)  # dilation
    return s[..., :h, :w]


def tune(images: np.ndarray, masks: np.ndarray, threshold: float = 0.5) -> tuple[ClassicalParams, float]:
    """Grid-search the parameters on (dev) images for object F1; returns (best, its F1).

    The background score is computed once per (window, polarity); thresholds are quantiles of it.
    """
    x = torch.from_numpy(np.ascontiguousarray(images[:, None]))
    best, best_f1 = ClassicalParams(), -1.0
    with torch.no_grad():
        for k, pol in itertools.product(BG_KERNELS, (1.0, -1.0)):
            raw = ClassicalDetector(ClassicalParams(bg_kernel=k, polarity=pol, threshold=0.0)).score(x)
            sample = raw.flatten()[:: max(1, raw.numel() // 200_000)]
            for t in torch.quantile(sample, torch.tensor(THRESHOLD_QUANTILES)).tolist():
                for o in OPEN_SIZES:
                    pred = (opening(raw - t, o) >= 0)[:, 0].numpy().astype(np.float32)
                    f1 = aggregate(per_image_metrics(pred, masks, threshold=threshold))["object_f1"]
                    if f1 > best_f1:
                        best, best_f1 = (
                            ClassicalParams(bg_kernel=k, polarity=pol, threshold=float(t), open_size=o),
                            f1,
                        )
    return best, best_f1


def fit_classical(config: TrainConfig, data_dir: Path, out_dir: Path) -> TrainResult:
    """Tune on dev, write ``classical.json``, ``model.onnx`` and ``result.json``; returns a TrainResult."""
    data = load_version(data_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    images, masks = np.asarray(data.dev.images), np.asarray(data.dev.masks)
    params, _ = tune(images, masks, config.threshold)

    (out_dir / "config.yaml").write_text(dump_config(config))
    (out_dir / PARAMS_FILE).write_text(params.model_dump_json(indent=2) + "\n")
    model = ClassicalDetector(params)
    reloaded = ClassicalDetector(
        ClassicalParams.model_validate(json.loads((out_dir / PARAMS_FILE).read_text()))
    )
    probe = images[:PARITY_IMAGES]
    reload_ok = bool(np.array_equal(torch_predict(model, probe), torch_predict(reloaded, probe)))
    export_onnx(reloaded, out_dir / "model.onnx", size=(images.shape[1], images.shape[2]))
    par = parity(reloaded, out_dir / "model.onnx", probe)
    dev = aggregate(per_image_metrics(torch_predict(model, images), masks, threshold=config.threshold))
    result = TrainResult(
        usable=bool(reload_ok and par["ok"]),
        model=config.model.name,
        epochs_completed=0,
        device="cpu",
        reload_ok=reload_ok,
        parity=par,
        dev=dev,
        timings={"total_train_s": round(time.perf_counter() - t0, 4)},
        files={p.name: p.name for p in sorted(out_dir.iterdir()) if p.is_file()},
    )
    write_result(out_dir, result)
    return result


def export_tuned(images: np.ndarray, masks: np.ndarray, path: Path) -> tuple[Path, ClassicalParams]:
    """Tune on (dev) images and masks, export the tuned detector to ``path``; for the gate's init."""
    params, _ = tune(images, masks)
    path.parent.mkdir(parents=True, exist_ok=True)
    return export_onnx(ClassicalDetector(params), path, (images.shape[1], images.shape[2])), params
