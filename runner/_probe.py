"""One memory measurement, run as its own process by ``runner.scheduler``.

``python -m runner._probe --preset P --batch-size B --image-size S --device cpu|cuda
[--decoder-width W]`` builds the preset's model (at that decoder width), runs one training step
(forward, BCE loss, backward, AdamW step) on a random batch and exits. On CPU the parent reads
this process's peak RSS from ``os.wait4``; on CUDA the probe writes
``{"peak_bytes": torch.cuda.max_memory_allocated()}`` on stdout. This is host code measuring itself,
not ticket code: it runs outside any sandbox.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="runner._probe")
    parser.add_argument("--preset", required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--image-size", type=int, required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--decoder-width", type=int, default=None)
    args = parser.parse_args(argv)

    import torch

    from vision.models import build_model  # deferred: torch, in the probe's own process

    torch.set_num_threads(1)
    device = torch.device(args.device)
    model = build_model(args.preset, args.decoder_width).to(device)
    optimiser = torch.optim.AdamW(model.parameters())
    images = torch.rand(args.batch_size, 1, args.image_size, args.image_size, device=device)  # (B, 1, S, S)
    masks = (torch.rand_like(images) > 0.95).float()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(model(images), masks)
    loss.backward()
    optimiser.step()
    peak = int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else 0
    sys.stdout.write(json.dumps({"peak_bytes": peak}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
