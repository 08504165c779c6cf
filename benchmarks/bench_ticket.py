"""Ticket overhead: a whole runner ticket against a bare in-process train + export + dev scoring.

The ticket (``runner.execute_ticket`` with the bwrap backend, the memory estimate already cached,
no gate) does: policy checks, workspace and config, the host-side manifest, the sandbox start,
``vision.worker`` (imports and training), safe copy-out, intake and confined scoring on dev.
The baseline, in this process with torch already imported, does ``vision.train.train`` on the
same dataset version with the same config (it writes model.onnx too) and scores dev with
onnxruntime in-process. Target: ratio <= 1.10. A second baseline, the
same worker as a fresh host process without a sandbox, separates the cost of a new interpreter
importing torch from the cost of the sandbox and of the host-side evidence.
Usage: python benchmarks/bench_ticket.py [--n-train N] [--size S] [--epochs E]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, as a script
import yaml  # noqa: E402

from audit import AuditLog, MemoryAnchorStore  # noqa: E402
from segfactory.home import SOURCE_ROOT, Home  # noqa: E402
from segfactory.records import Ticket  # noqa: E402
from synthetic import generate  # noqa: E402
from synthetic.versions import DatasetVersion, create_version  # noqa: E402

N_TRAIN, N_DEV, SIZE, EPOCHS = (
    128,
    64,
    64,
    3,
)  # defaults: about a minute of CPU training on an idle 2-core machine


def make_dataset(root: Path, n_train: int, n_dev: int, size: int) -> DatasetVersion:
    for name, n, seed in (("train", n_train, 1), ("dev", n_dev, 2)):
        generate(n, size, seed, workers=1).write(root / "src" / name)
    home = root / "home"
    return create_version(home, "bench", {s: root / "src" / s for s in ("train", "dev")}, approve_it=True)


def bench_config(epochs: int) -> dict[str, object]:
    config = yaml.safe_load((SOURCE_ROOT / "configs" / "demo.yaml").read_text())
    config.update(epochs=epochs, device="cpu")
    return dict(config)


def bare_run(dataset: DatasetVersion, config: dict[str, object], out: Path) -> float:
    import onnxruntime as ort

    from synthetic.splits import read_split
    from vision.config import parse_config
    from vision.metrics import aggregate, per_image_metrics
    from vision.train import train

    start = time.monotonic()
    train(parse_config(config), dataset.path, out)
    dev = read_split(dataset.dev)
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    prob = session.run(["prob"], {"image": dev.images[:, None]})[0]
    aggregate(per_image_metrics(prob[:, 0], dev.masks))
    return time.monotonic() - start


def host_process_run(dataset: DatasetVersion, config: dict[str, object], work: Path) -> float:
    """``python -m vision.worker`` as a plain host process (trusted config, no sandbox)."""
    work.mkdir()
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(SOURCE_ROOT)}
    start = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "vision.worker",
            "--config",
            str(work / "config.yaml"),
            "--data",
            str(dataset.path),
            "--out",
            str(work / "out"),
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    return time.monotonic() - start


def ticket_run(
    dataset: DatasetVersion, config: dict[str, object], home: Home, image_size: int
) -> tuple[float, float]:
    from runner import Scheduler, TicketStatus, execute_ticket

    ticket = Ticket(
        id="t1",
        arm="agent",
        kind="config",
        hypothesis="benchmark",
        change={},
        budget={"device_seconds": 1800, "epochs": int(str(config["epochs"]))},
        expected_effect={"metric": "object_f1", "direction": "none", "size": 0},
        seed=0,
    )
    scheduler = Scheduler.for_home(home)
    scheduler.estimate(dict(config), image_size)  # warm the estimate cache: the target is "with it cached"
    with AuditLog(home, MemoryAnchorStore()) as audit:
        start = time.monotonic()
        outcome = execute_ticket(
            ticket,
            home=home,
            dataset_version=dataset,
            backend="bwrap",
            base_config=dict(config),
            audit=audit,
            run_id="bench",
            scheduler=scheduler,
        )
        wall = time.monotonic() - start
    if outcome.status != TicketStatus.DONE:
        raise SystemExit(f"the ticket did not finish: {outcome.reason}")
    return wall, outcome.device_seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n-train", type=int, default=N_TRAIN)
    parser.add_argument("--n-dev", type=int, default=N_DEV)
    parser.add_argument("--size", type=int, default=SIZE)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    args = parser.parse_args()
    import torch  # noqa: F401  (the bare baseline runs with torch already imported)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dataset = make_dataset(root, args.n_train, args.n_dev, args.size)
        home = Home(root / "home")
        config = bench_config(args.epochs)
        bare = bare_run(dataset, config, root / "bare-out")
        process = host_process_run(dataset, config, root / "process")
        wall, in_sandbox = ticket_run(dataset, config, home, args.size)
        bare2 = bare_run(dataset, config, root / "bare-out2")  # bracket the ticket against load drift
        base = (bare + bare2) / 2
        sys.stdout.write(
            f"ticket overhead ({args.n_train} train / {args.n_dev} dev, {args.size}px, "
            f"{args.epochs} epochs, bwrap):\n"
            f"  bare in-process train+export+dev scoring: {bare:.1f}s, {bare2:.1f}s (mean {base:.1f}s)\n"
            f"  same worker as a fresh host process (no sandbox): {process:.1f}s\n"
            f"  ticket wall (no gate): {wall:.1f}s = worker in sandbox {in_sandbox:.1f}s"
            f" + host side {wall - in_sandbox:.1f}s\n"
            f"  ratio ticket / bare in-process: {wall / base:.3f} (target <= 1.10)\n"
            f"  ratio ticket / fresh host process: {wall / process:.3f}\n"
        )


if __name__ == "__main__":
    main()
