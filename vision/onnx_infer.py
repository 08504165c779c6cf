"""Host-side ONNX inference under the model contract (input ``image``, output ``prob``).

The contract every segfactory model exports to: input ``image`` float32 [N, 1, H, W] in [0, 1]
with dynamic N (and H, W); output ``prob`` float32 [N, 1, H, W], sigmoid probabilities.
The gate wraps the same contract in a confined child process; this runs in-process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from segfactory.errors import DataError
from vision.tiling import predict_batched

INPUT_NAME = "image"
OUTPUT_NAME = "prob"
DEFAULT_BATCH = 64  # images per onnxruntime call


def open_session(model_path: Path | str, threads: int = 0) -> Any:
    """An onnxruntime CPU session for ``model_path``, checked against the contract."""
    import onnxruntime as ort

    path = Path(model_path)
    if not path.is_file():
        raise DataError(f"model {path} not found; give the path of a model.onnx")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types
        raise DataError(f"onnxruntime cannot load {path}: {exc}") from None
    inputs = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    if inputs != [INPUT_NAME] or OUTPUT_NAME not in outputs:
        raise DataError(
            f"{path} breaks the model contract: inputs {inputs}, outputs {outputs}; "
            f"expected input {INPUT_NAME!r} and output {OUTPUT_NAME!r}"
        )
    return session


def predict(
    model_path: Path | str, images: np.ndarray, batch: int = DEFAULT_BATCH, *, session: Any = None
) -> np.ndarray:
    """Probabilities (N, H, W) float32 for images (N, H, W) float32 in [0, 1]."""
    if not isinstance(images, np.ndarray) or images.ndim != 3 or images.dtype != np.float32:
        got = f"{images.dtype} {images.shape}" if isinstance(images, np.ndarray) else type(images).__name__
        raise DataError(f"images must be float32 (N, H, W); got {got}")
    if images.shape[0] == 0:
        raise DataError("no images to predict: the dataset is empty")
    if batch < 1:
        raise DataError(f"batch must be >= 1; got {batch}")

    sess = session if session is not None else open_session(model_path)

    def one(images: np.ndarray) -> np.ndarray:
        chunk = np.ascontiguousarray(images[:, None])
        (prob,) = sess.run([OUTPUT_NAME], {INPUT_NAME: chunk})
        if prob.shape != chunk.shape:
            raise DataError(f"model output shape {prob.shape} does not match input {chunk.shape}")
        return np.asarray(prob[:, 0], dtype=np.float32)

    return predict_batched(one, images, batch)
