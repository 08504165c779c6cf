"""All metrics for 1,000 images divided by the ONNX inference time for them (target <= 0.2).

"All metrics" is what ``segfactory evaluate`` computes without --robustness: per-image pixel,
object, size-bin and boundary metrics, the pooled aggregate, bootstrap intervals over images
(2,000 resamples) and the worst slice. Inference runs the reference preset's model.onnx (random
init) through onnxruntime on the same images, in the same process.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import numpy as np  # noqa: E402
import torch  # noqa: E402

from synthetic import generate  # noqa: E402
from vision.evaluate import intervals  # noqa: E402
from vision.export import export_onnx  # noqa: E402
from vision.metrics import aggregate, per_image_metrics  # noqa: E402
from vision.models import REFERENCE_PRESET, build_model  # noqa: E402
from vision.onnx_infer import open_session, predict  # noqa: E402
from vision.slices import worst_slice  # noqa: E402

N_IMAGES = 1000
SIZE = 64
TARGET = 0.2


def all_metrics(prob: np.ndarray, masks: np.ndarray, meta: list, defects: list) -> None:
    per = per_image_metrics(prob, masks)
    aggregate(per)
    intervals(per, 2000, 0)
    worst_slice(per, meta, defects)


def best_of(fn: object, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    torch.manual_seed(0)
    data = generate(N_IMAGES, SIZE, seed=123, workers=1)
    with tempfile.TemporaryDirectory() as tmp:
        path = export_onnx(build_model(REFERENCE_PRESET).eval(), Path(tmp) / "model.onnx", (SIZE, SIZE))
        session = open_session(path)
        t_onnx = best_of(lambda: predict(path, data.images, session=session))
        prob = predict(path, data.images, session=session)
    # a trained model's output is near the masks: score those too (more matched components)
    rng = np.random.default_rng(0)
    near = np.clip(data.masks * 0.8 + rng.normal(0, 0.15, data.masks.shape), 0, 1).astype(np.float32)
    t_random = best_of(lambda: all_metrics(prob, data.masks, data.image_meta, data.defects))
    t_near = best_of(lambda: all_metrics(near, data.masks, data.image_meta, data.defects))
    t_metrics = max(t_random, t_near)
    ratio = t_metrics / t_onnx
    sys.stdout.write(
        f"bench_metrics: {N_IMAGES} images {SIZE}x{SIZE}, preset {REFERENCE_PRESET}\n"
        f"  onnx inference        {t_onnx:.3f} s\n"
        f"  all metrics (random)  {t_random:.3f} s\n"
        f"  all metrics (near-GT) {t_near:.3f} s\n"
        f"  ratio metrics/onnx    {ratio:.3f} (target <= {TARGET}) {'OK' if ratio <= TARGET else 'MISSED'}\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
