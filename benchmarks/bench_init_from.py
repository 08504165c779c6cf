"""Set-up cost of a continued ticket: staging and loading the parent's weights against its training.

A parent ticket trains at demo size through the real runner and sandbox; a child continues from
its checkpoint (``init_from``). The set-up a continuation adds is the host's check and copy of
the checkpoint into the child's folder (``staged_s``), the host's hash of the staged copy just
before each sandbox start (``verified_s``, from the audit log) and the worker's strict load of
the weights in the sandbox (``init_s``, the worker's own timing). The ratio printed is that sum
over the child's training time (the worker's ``total_train_s``: its epochs, dev scoring
included). Target: ratio < 0.05.

Usage: python benchmarks/bench_init_from.py [--backend bwrap|docker] [--epochs E] [--n-train N]
[--size S]; the default is a demo ticket: configs/run-demo.yaml, 768 train / 256 dev, 64 px.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, as a script
import yaml  # noqa: E402

from audit import AuditLog, MemoryAnchorStore, iter_records  # noqa: E402
from runner import InitFrom, Scheduler, TicketOutcome, TicketStatus, execute_ticket  # noqa: E402
from segfactory.home import SOURCE_ROOT, Home  # noqa: E402
from segfactory.records import Ticket  # noqa: E402
from synthetic import generate  # noqa: E402
from synthetic.versions import DatasetVersion, create_version  # noqa: E402

TARGET_RATIO = 0.05  # set-up of a continuation against its training time, at demo size
DEMO = {"n_train": 768, "n_dev": 256, "size": 64, "epochs": 4}  # the demo profile's ticket

log = logging.getLogger("bench_init_from")


def make_dataset(root: Path, n_train: int, n_dev: int, size: int) -> DatasetVersion:
    for name, n, seed in (("train", n_train, 1), ("dev", n_dev, 2)):
        generate(n, size, seed, workers=1).write(root / "src" / name)
    home = root / "home"
    return create_version(home, "bench", {s: root / "src" / s for s in ("train", "dev")}, approve_it=True)


def ticket(tid: str, epochs: int, seed: int) -> Ticket:
    return Ticket(
        id=tid,
        arm="agent",
        kind="config",
        hypothesis="benchmark",
        change={},
        budget={"device_seconds": 1800, "epochs": epochs},
        expected_effect={"metric": "object_f1", "direction": "none", "size": 0},
        seed=seed,
    )


def run_ticket(
    t: Ticket, home: Home, dataset: DatasetVersion, config: dict[str, Any], backend: str, **kw: Any
) -> TicketOutcome:
    with AuditLog(home, MemoryAnchorStore()) as audit:
        outcome = execute_ticket(
            t,
            home=home,
            dataset_version=dataset,
            backend=backend,
            base_config=dict(config),
            audit=audit,
            run_id="bench",
            scheduler=Scheduler.for_home(home),
            **kw,
        )
    if outcome.status != TicketStatus.DONE:
        raise SystemExit(f"ticket {t.id} did not finish: {outcome.reason}")
    return outcome


def host_staging(home: Home, ticket_id: str) -> dict[str, float]:
    """The child's last attempt record: the host's staging and re-hash times."""
    attempts = [
        r.payload
        for r in iter_records(home.audit / "log.jsonl")
        if r.event == "ticket_attempt" and r.payload.get("ticket_id") == ticket_id
    ]
    staged: dict[str, float] = attempts[-1]["staged"]
    return staged


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="bwrap", choices=("bwrap", "docker"))
    parser.add_argument("--epochs", type=int, default=DEMO["epochs"])
    parser.add_argument("--n-train", type=int, default=DEMO["n_train"])
    parser.add_argument("--n-dev", type=int, default=DEMO["n_dev"])
    parser.add_argument("--size", type=int, default=DEMO["size"])
    args = parser.parse_args()
    config = yaml.safe_load((SOURCE_ROOT / "configs" / "run-demo.yaml").read_text())
    config.update(epochs=args.epochs, device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dataset = make_dataset(root, args.n_train, args.n_dev, args.size)
        home = Home(root / "home")
        parent = run_ticket(ticket("parent", args.epochs, 1), home, dataset, config, args.backend)
        init_from: InitFrom = parent.continuation()
        child = run_ticket(
            ticket("child", args.epochs, 2), home, dataset, config, args.backend, init_from=init_from
        )
        staged = host_staging(home, "child")
        worker = (child.sandbox_reported or {}).get("timings", {})
        setup = staged["staged_s"] + staged["verified_s"] + float(worker.get("init_s", 0.0))
        train_s = float(worker.get("total_train_s", 0.0))
        ratio = setup / train_s if train_s else float("inf")
        size = parent.evidence.checkpoint_bytes if parent.evidence else 0
        lines = [
            f"continued ticket set-up at {args.n_train} train / {args.n_dev} dev, {args.size} px, "
            f"{args.epochs} epochs, {args.backend}; checkpoint {size / 2**20:.2f} MiB",
            f"  host: check + copy in       {staged['staged_s']:8.3f} s",
            f"  host: re-hash at the start  {staged['verified_s']:8.3f} s",
            f"  sandbox: strict load        {float(worker.get('init_s', 0.0)):8.3f} s",
            f"  child training (epochs)     {train_s:8.2f} s",
            f"ratio set-up / training: {ratio:.4f} (target < {TARGET_RATIO})",
        ]
        sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
