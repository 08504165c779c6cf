"""ONNX export under the model contract, and the parity check against PyTorch."""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from vision.onnx_infer import INPUT_NAME, OUTPUT_NAME, open_session, predict
from vision.tiling import predict_batched

OPSET = 17  # standard ops only; the gate's allowlist is written against this opset
PARITY_ATOL = 1e-4  # max |onnxruntime - torch| on probabilities for the export to count


class WithSigmoid(nn.Module):
    """Wrap a logits model so its graph outputs probabilities."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.model(image))


def export_onnx(model: nn.Module, path: Path, size: tuple[int, int] = (64, 64)) -> Path:
    """Write a self-contained ONNX file (no external data) for ``model`` (logits out)."""
    import onnx

    wrapped = WithSigmoid(model).eval().to("cpu").to(memory_format=torch.contiguous_format)
    example = torch.rand(2, 1, *size)
    buffer = io.BytesIO()
    dynamic = {0: "n", 2: "h", 3: "w"}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(  # a BytesIO target is supported at runtime
            wrapped,
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


def torch_predict(model: nn.Module, images: np.ndarray, batch: int = 64) -> np.ndarray:
    """Probabilities (N, H, W) from a logits model on the CPU, in float32; a large image in tiles."""
    model = model.eval().to("cpu").to(memory_format=torch.contiguous_format)

    def one(chunk: np.ndarray) -> np.ndarray:
        return torch.sigmoid(model(torch.from_numpy(np.ascontiguousarray(chunk[:, None]))))[:, 0].numpy()

    with torch.no_grad():
        return predict_batched(one, images, batch).astype(np.float32)


def parity(model: nn.Module, onnx_path: Path, images: np.ndarray) -> dict[str, float | bool]:
    """Compare onnxruntime and torch on ``images``; ``ok`` when within PARITY_ATOL."""
    ref = torch_predict(model, images)
    got = predict(onnx_path, images, session=open_session(onnx_path))
    max_abs = float(np.abs(ref - got).max())
    return {"ok": bool(max_abs <= PARITY_ATOL), "max_abs_diff": max_abs, "atol": PARITY_ATOL}
