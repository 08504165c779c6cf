"""Ticket overhead: a whole runner ticket against a bare in-process train + export + dev scoring.

The ticket (``runner.execute_ticket`` with the bwrap backend, the memory estimate already cached,
no gate) does: policy checks, workspace and config, the host-side manifest, the sandbox start,
``vision.worker`` (imports and training), safe copy-out, intake and confined scoring on dev.
The baseline, in this process with torch already imported, does ``vision.train.train`` on the
same dataset version with the same config (it writes model.onnx too) and scores dev with
onnxruntime in-process. Target: ratio <= 1.10. A second baseline, the
same worker as a fresh host process without a sandbox, separates the cost of a new interpreter
importing torch from the cost of the sandbox and of the host-side evidence. A breakdown follows,
from the worker's own timings (result.json) and ``python -X importtime``: where the fixed cost of
a fresh process goes, outside and inside the sandbox.
Usage: python benchmarks/bench_ticket.py [--demo] [--backend bwrap|docker] [--n-train N] [--size S]
[--epochs E]; ``--demo`` is a demo ticket: configs/run-demo.yaml, 768 train / 256 dev, 64 px.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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

# The small default: about 4 s of training on an idle 2-core machine.
N_TRAIN, N_DEV, SIZE, EPOCHS = 128, 64, 64, 3


def make_dataset(root: Path, n_train: int, n_dev: int, size: int) -> DatasetVersion:
    for name, n, seed in (("train", n_train, 1), ("dev", n_dev, 2)):
        generate(n, size, seed, workers=1).write(root / "src" / name)
    home = root / "home"
    return create_version(home, "bench", {s: root / "src" / s for s in ("train", "dev")}, approve_it=True)


DEMO = {"n_train": 768, "n_dev": 256, "size": 64, "epochs": 4}  # the demo profile's ticket
STAGES = (  # (label, result.json timing keys): the worker's phases, in order
    ("interpreter start-up", ("startup_s",)),
    ("imports (config, torch, timm, ...)", ("imports_s",)),
    ("setup (data, model, optimiser)", ("setup_s",)),
    ("epochs (training + dev per epoch)", ("total_train_s",)),
    ("checks (reload, ONNX export, parity)", ("checks_s",)),
)


def bench_config(epochs: int, demo: bool) -> dict[str, object]:
    name = "run-demo.yaml" if demo else "demo.yaml"
    config = yaml.safe_load((SOURCE_ROOT / "configs" / name).read_text())
    config.update(epochs=epochs, device="cpu")
    return dict(config)


def worker_timings(out: Path) -> dict[str, float]:
    return dict(json.loads((out / "result.json").read_text())["timings"])


def import_breakdown(top: int = 8) -> list[tuple[str, float]]:
    """Self time of each top-level package the worker imports, in a fresh host process."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import vision.worker, vision.config, vision.train"],
        env={**os.environ, "PYTHONPATH": str(SOURCE_ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    totals: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if match:
            package = match.group(2).split(".")[0]
            totals[package] = totals.get(package, 0.0) + int(match.group(1)) / 1e6
    return sorted(totals.items(), key=lambda kv: -kv[1])[:top]


def bare_run(dataset: DatasetVersion, config: dict[str, object], out: Path) -> float:
    import onnxruntime as ort

    from synthetic.splits import read_split
    from vision.config import parse_config
    from vision.metrics import aggregate, per_image_metrics
    from vision.train import train

    start = time.monotonic()
    train(parse_config(config), dataset.path, out, timings={"startup_s": 0.0, "imports_s": 0.0})
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
    dataset: DatasetVersion, config: dict[str, object], home: Home, image_size: int, backend: str
) -> tuple[float, float, Path]:
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
            backend=backend,
            base_config=dict(config),
            audit=audit,
            run_id="bench",
            scheduler=scheduler,
        )
        wall = time.monotonic() - start
    if outcome.status != TicketStatus.DONE:
        raise SystemExit(f"the ticket did not finish: {outcome.reason}")
    return wall, outcome.device_seconds, home.tickets_dir("bench") / ticket.id / "work" / "out"


def breakdown(columns: dict[str, tuple[float, dict[str, float]]]) -> str:
    """One row per worker phase, one column per way of running it; the rest is what no phase covers."""
    lines = [f"  {'where the time goes (s)':<40}" + "".join(f"{name:>16}" for name in columns)]
    for label, keys in STAGES:
        cells = [sum(t.get(k, 0.0) for k in keys) for _, t in columns.values()]
        lines.append(f"    {label:<38}" + "".join(f"{c:>16.2f}" for c in cells))
    rest = [wall - sum(t.get(k, 0.0) for _, ks in STAGES for k in ks) for wall, t in columns.values()]
    lines.append(
        f"    {'rest (dev scoring, exit, sandbox, host)':<38}" + "".join(f"{r:>16.2f}" for r in rest)
    )
    lines.append(f"    {'total':<38}" + "".join(f"{wall:>16.2f}" for wall, _ in columns.values()))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n-train", type=int, default=N_TRAIN)
    parser.add_argument("--n-dev", type=int, default=N_DEV)
    parser.add_argument("--size", type=int, default=SIZE)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument(
        "--demo", action="store_true", help="a demo ticket (run-demo.yaml, 768/256, 4 epochs)"
    )
    parser.add_argument("--backend", default="bwrap", choices=("bwrap", "docker"))
    args = parser.parse_args()
    if args.demo:
        vars(args).update(DEMO)
    import torch  # noqa: F401  (the bare baseline runs with torch already imported)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dataset = make_dataset(root, args.n_train, args.n_dev, args.size)
        home = Home(root / "home")
        config = bench_config(args.epochs, args.demo)
        bare = bare_run(dataset, config, root / "bare-out")
        process = host_process_run(dataset, config, root / "process")
        wall, in_sandbox, ticket_out = ticket_run(dataset, config, home, args.size, args.backend)
        bare2 = bare_run(dataset, config, root / "bare-out2")  # bracket the ticket against load drift
        base = (bare + bare2) / 2
        imports = import_breakdown()
        sys.stdout.write(
            f"ticket overhead ({args.n_train} train / {args.n_dev} dev, {args.size}px, "
            f"{args.epochs} epochs, {'run-demo' if args.demo else 'demo'}.yaml, {args.backend}; "
            f"load average {os.getloadavg()[0]:.2f}):\n"
            f"  bare in-process train+export+dev scoring: {bare:.1f}s, {bare2:.1f}s (mean {base:.1f}s)\n"
            f"  same worker as a fresh host process (no sandbox): {process:.1f}s\n"
            f"  ticket wall (no gate): {wall:.1f}s = worker in sandbox {in_sandbox:.1f}s"
            f" + host side {wall - in_sandbox:.1f}s\n"
            f"  ratio ticket / bare in-process: {wall / base:.3f} (target <= 1.10)\n"
            f"  ratio ticket / fresh host process: {wall / process:.3f}\n"
        )
        sys.stdout.write(
            breakdown(
                {
                    "bare (2nd)": (bare2, worker_timings(root / "bare-out2")),
                    "host process": (process, worker_timings(root / "process" / "out")),
                    "ticket": (wall, worker_timings(ticket_out)),
                }
            )
        )
        sys.stdout.write(
            "  imports in a fresh host process, self time by package (s): "
            + ", ".join(f"{name} {seconds:.2f}" for name, seconds in imports)
            + "\n"
        )


if __name__ == "__main__":
    main()
