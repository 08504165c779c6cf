"""nnU-Net's trained 2D network as the gate's ONNX contract, and its parity with nnU-Net's predictor.

The exported graph takes the factory's input, ``image`` (N, 1, H, W) in [0, 1], and returns
``prob`` (N, 1, H, W), the void probability. Folded in: nnU-Net's per-image z-score
normalisation (mean and population std over the image, std floored at 1e-8, as its
``ZScoreNormalization``) before the network, and the softmax over its two classes after it.
Deep supervision is off, so the network returns only the full-resolution logits.

Left out, on purpose: test-time mirroring (the predictor here runs with ``use_mirroring=False``
so both sides compute the same thing), and nnU-Net's "keep the largest component"
postprocessing, which nnU-Net applies only when its 5-fold cross-validation shows it helps and
which would delete all but one void of an image with many. The factory scores every connected
component, so the arm keeps them all.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from vision.export import OPSET
from vision.nnunet._raw import INTENSITY_SHIFT
from vision.onnx_infer import INPUT_NAME, OUTPUT_NAME, open_session, predict

ZSCORE_EPS = 1e-8  # nnU-Net's ZScoreNormalization floors the std here
PARITY_ATOL = 1e-4  # max |onnxruntime - nnU-Net's network in float32| on void probabilities
# nnU-Net's predictor sums tile logits in float16 (predict_from_raw_data.py), which moves a
# probability by up to a few 1e-3 (6.3e-3 measured on a 9-iteration model); past this: not usable.
PREDICTOR_ATOL = 2e-2


class FoldedNnunet(nn.Module):
    """z-score -> nnU-Net network (deep supervision off) -> softmax -> the void channel."""

    def __init__(self, network: nn.Module) -> None:
        super().__init__()
        self.network = network

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        mean = image.mean(dim=(2, 3), keepdim=True)  # (N, 1, 1, 1)
        std = torch.sqrt(((image - mean) ** 2).mean(dim=(2, 3), keepdim=True))  # population std, as numpy's
        x = (image - mean) / torch.clamp(std, min=ZSCORE_EPS)
        logits = self.network(x)  # (N, 2, H, W): background, void
        return torch.softmax(logits, dim=1)[:, 1:2]  # (N, 1, H, W)


def deep_supervision_off(network: nn.Module) -> nn.Module:
    """nnU-Net's plain and residual U-Nets keep the switch on their decoder."""
    decoder = getattr(network, "decoder", None)
    if decoder is None or not hasattr(decoder, "deep_supervision"):
        raise TypeError(f"{type(network).__name__} has no decoder.deep_supervision switch; cannot export it")
    decoder.deep_supervision = False
    return network


def export_nnunet_onnx(network: nn.Module, path: Path, size: tuple[int, int]) -> Path:
    """Write the folded network as a self-contained ONNX file (dynamic batch and image size)."""
    import onnx

    folded = FoldedNnunet(deep_supervision_off(network)).eval().to("cpu").float()
    example = torch.rand(2, 1, *size)
    buffer = io.BytesIO()
    dynamic = {0: "n", 2: "h", 3: "w"}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            folded,
            (example,),
            cast(Any, buffer),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: dynamic, OUTPUT_NAME: dynamic},
            opset_version=OPSET,
            dynamo=False,
        )
    proto = onnx.load_from_string(buffer.getvalue())
    onnx.checker.check_model(proto)
    path.write_bytes(proto.SerializeToString())
    return path


def _predictor(model_folder: Path, checkpoint: str) -> Any:
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    predictor = nnUNetPredictor(
        tile_step_size=0.5,
        use_gaussian=True,
        use_mirroring=False,
        perform_everything_on_device=False,
        device=torch.device("cpu"),
        verbose=False,
        verbose_preprocessing=False,
        allow_tqdm=False,
    )
    predictor.initialize_from_trained_model_folder(
        str(model_folder), use_folds=(0,), checkpoint_name=checkpoint
    )
    return predictor


def nnunet_probs(
    model_folder: Path, images: np.ndarray, checkpoint: str = "checkpoint_final.pth"
) -> tuple[np.ndarray, np.ndarray]:
    """Void probabilities (N, H, W) from nnU-Net's own code on its own final checkpoint, two ways.

    First: its predictor end to end (preprocessing, sliding window, softmax, no mirroring).
    Second: its preprocessor, then its network in float32, then softmax: the same computation
    without the predictor's float16 accumulation of tile logits.
    """
    predictor = _predictor(model_folder, checkpoint)
    network = predictor.network
    network.load_state_dict(predictor.list_of_parameters[0])
    network.eval()
    preprocessor = predictor.configuration_manager.preprocessor_class(verbose=False)
    ends, nets = [], []
    for image in images:  # the raw case as nnU-Net's SimpleITK reader returns a 2D image: (C, 1, H, W)
        case = (image.astype(np.float32) + np.float32(INTENSITY_SHIFT))[None, None]
        _, probs = predictor.predict_single_npy_array(case, {"spacing": [999.0, 1.0, 1.0]}, None, None, True)
        ends.append(np.asarray(probs)[1, 0])  # (classes, 1, H, W) -> the void class
        data, _, _ = preprocessor.run_case_npy(
            case,
            None,
            {"spacing": [999.0, 1.0, 1.0]},
            predictor.plans_manager,
            predictor.configuration_manager,
            predictor.dataset_json,
        )
        with torch.no_grad():
            logits = network(torch.from_numpy(np.ascontiguousarray(data[:, 0])).float()[None])  # (1, 2, H, W)
        nets.append(torch.softmax(logits, dim=1)[0, 1].numpy())
    return np.stack(ends).astype(np.float32), np.stack(nets).astype(np.float32)


def parity(
    model_folder: Path, onnx_path: Path, images: np.ndarray, threshold: float = 0.5
) -> dict[str, float | bool]:
    """ONNX (onnxruntime) against nnU-Net's network (``PARITY_ATOL``) and predictor (``PREDICTOR_ATOL``)."""
    predictor, network = nnunet_probs(model_folder, images)
    got = predict(onnx_path, images, session=open_session(onnx_path))
    net_diff = float(np.abs(network - got).max())
    pred_diff = float(np.abs(predictor - got).max())
    flips = float(np.mean((predictor >= threshold) != (got >= threshold)))
    return {
        "ok": bool(net_diff <= PARITY_ATOL and pred_diff <= PREDICTOR_ATOL),
        "max_abs_diff": net_diff,
        "atol": PARITY_ATOL,
        "predictor_max_abs_diff": pred_diff,
        "predictor_atol": PREDICTOR_ATOL,
        "predictor_pixel_flips": flips,
        "images": int(len(images)),
    }
