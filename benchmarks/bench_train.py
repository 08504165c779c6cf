"""``segfactory train`` throughput against a bare PyTorch loop, same model and data (target >= 0.95).

Both arms train the reference preset for the same epochs on the same images with the same
loss, batch size, optimiser and thread count; augmentation is off, so the comparison measures
the framework's overhead (sampler, batch assembly, loss plumbing, progress, checkpointing).
``train`` reports its training-phase throughput (dev evaluation and the end checks excluded);
its end-to-end wall time is printed too. Arms alternate and the best of REPEATS is kept.
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
from vision.config import parse_config  # noqa: E402
from vision.losses import combined_loss  # noqa: E402
from vision.models import REFERENCE_PRESET, build_model  # noqa: E402
from vision.train import train  # noqa: E402

N_TRAIN, N_DEV, SIZE, EPOCHS, BATCH, REPEATS = 256, 64, 64, 2, 32, 2
TARGET = 0.95
CONFIG = {
    "epochs": EPOCHS,
    "batch_size": BATCH,
    "threads": 1,
    "model": {"name": REFERENCE_PRESET},
    "augment": {"flip": False},
    "schedule": {"name": "constant"},
}


def bare_loop(images: np.ndarray, masks: np.ndarray) -> float:
    """Images per second of a plain loop: permutation, slice, forward, loss, backward, step."""
    cfg = parse_config(CONFIG)
    torch.manual_seed(0)
    model = build_model(REFERENCE_PRESET).train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    x_all, y_all = (
        torch.from_numpy(images).unsqueeze(1),
        torch.from_numpy(masks.astype(np.float32)).unsqueeze(1),
    )
    seen, t0 = 0, time.perf_counter()
    for _ in range(EPOCHS):
        order = torch.randperm(len(images))
        for start in range(0, len(order) - BATCH + 1, BATCH):
            idx = order[start : start + BATCH]
            loss = combined_loss(cfg.loss, model(x_all[idx]), y_all[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seen += BATCH
    return seen / (time.perf_counter() - t0)


def main() -> int:
    torch.set_num_threads(1)
    tr, dev = generate(N_TRAIN, SIZE, seed=1, workers=1), generate(N_DEV, SIZE, seed=2, workers=1)
    bare, ours, wall = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        tr.write(Path(tmp) / "v" / "train")
        dev.write(Path(tmp) / "v" / "dev")
        for k in range(REPEATS):
            bare.append(bare_loop(tr.images, tr.masks))
            t0 = time.perf_counter()
            result = train(parse_config(CONFIG), Path(tmp) / "v", Path(tmp) / f"run{k}")
            wall.append(time.perf_counter() - t0)
            ours.append(result.timings["train_images_per_s"])
    ratio = max(ours) / max(bare)
    e2e = EPOCHS * (N_TRAIN // BATCH) * BATCH / min(wall) / max(bare)
    sys.stdout.write(
        f"bench_train: preset {REFERENCE_PRESET}, {N_TRAIN} images {SIZE}x{SIZE}, "
        f"{EPOCHS} epochs, batch {BATCH}, 1 thread\n"
        f"  bare loop            {max(bare):.1f} images/s\n"
        f"  segfactory train     {max(ours):.1f} images/s (training phase)\n"
        f"  ratio                {ratio:.3f} (target >= {TARGET}) {'OK' if ratio >= TARGET else 'MISSED'}\n"
        f"  end-to-end ratio     {e2e:.3f} (incl. per-epoch dev eval, checkpoints, reload + ONNX checks)\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
