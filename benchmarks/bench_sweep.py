"""Sweep overhead: ``controls.sweep.run_sweep`` per trial against a bare in-process Optuna loop.

Both loops run the same search space with the same sampler and seed, trial 0 enqueued as the
default config. A bare trial trains in this process (``vision.train.train``, torch already
imported), which writes model.onnx, and scores dev with onnxruntime. A sweep trial is a Ticket
through ``controls.pipeline.run_candidate`` and ``runner.execute_ticket`` (bwrap sandbox,
fresh interpreter, host-side manifest, copy-out, intake and the confined scorer), plus Optuna's
SQLite storage. The gate's verdict time is excluded: the dev margin is set out of reach, so no
trial queries (the stand-in gate only names the current best). Target: ratio <= 1.10.
Usage: python benchmarks/bench_sweep.py [--trials T] [--n-train N] [--epochs E]
"""

from __future__ import annotations

import argparse
import copy
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, as a script
sys.path.insert(0, str(Path(__file__).resolve().parent))
import yaml  # noqa: E402
from bench_ticket import bare_run, bench_config, make_dataset  # noqa: E402

from audit import AuditLog, MemoryAnchorStore  # noqa: E402
from segfactory.home import Home  # noqa: E402

TRIALS, N_TRAIN, N_DEV, SIZE, EPOCHS = 3, 128, 64, 64, 2
UNREACHABLE_MARGIN = 1.0  # object F1 points: no trial is a dev win, so no gate time is counted


class StandInGate:
    """Only ``status``: the current best is the bench's own first model. Never asked to score."""

    def __init__(self, best_sha: str) -> None:
        self.best_sha = best_sha

    def status(self) -> dict[str, Any]:
        return {"current_best": self.best_sha}


def patched(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(config)
    for dotted, value in params.items():
        node = out
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def bare_loop(dataset: Any, config: dict[str, Any], trials: int, root: Path) -> float:
    import optuna

    from agents.space import default_params, load_space

    space = load_space()
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=0))
    study.enqueue_trial(default_params(space, config))
    start = time.monotonic()
    for i in range(trials):
        trial = study.ask()
        study.tell(trial, -bare_run(dataset, patched(config, space.suggest(trial)), root / f"bare-{i}"))
    return (time.monotonic() - start) / trials


def sweep_loop(
    dataset: Any, config: dict[str, Any], trials: int, root: Path, home: Home
) -> tuple[float, float]:
    """Per trial: the wall time, and the part of it the worker spent in the sandbox (device-seconds)."""
    from agents.judge import Judge
    from agents.run_setup import RunSetup
    from agents.services import HostServices
    from agents.space import load_space
    from controls.session import ControlServices
    from controls.sweep import check_sweep, run_sweep, storage_url
    from segfactory.layout import BASELINE_MODEL
    from segfactory.records import Budget, sha256_file

    baseline = home.root / BASELINE_MODEL
    baseline.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "bare-0" / "model.onnx", baseline)
    (root / "base.yaml").write_text(yaml.safe_dump(config))
    ticket = Budget(device_seconds=1800, epochs=int(config["epochs"]))
    plan = check_sweep(
        "tpe", ticket.device_seconds * trials, 0, storage_url(home.root, None), load_space(), config, ticket
    )
    with AuditLog(home, MemoryAnchorStore()) as audit:
        setup = RunSetup(
            home=home,
            run_id="bench",
            backend="bwrap",
            dataset=dataset,
            base_config=root / "base.yaml",
            gate=StandInGate(sha256_file(baseline)),
            audit=audit,
            dev_margin=UNREACHABLE_MARGIN,
        )
        services = ControlServices(HostServices(setup))
        services.host.comparer.best()  # the best's dev score is computed once per run, not per trial
        start = time.monotonic()
        result = run_sweep(
            plan, services, Judge(audit), run_id="bench", make_seed=lambda: 0, max_trials=trials
        )
        seconds = time.monotonic() - start
    failed = [t["reason"] for t in result.trials if t["status"] == "failed"]
    if failed:
        raise SystemExit(f"a sweep trial failed: {failed[0]}")
    return seconds / trials, sum(t["device_seconds"] for t in result.trials) / trials


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=TRIALS)
    parser.add_argument("--n-train", type=int, default=N_TRAIN)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    args = parser.parse_args()
    import torch  # noqa: F401  (the bare loop runs with torch already imported)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dataset = make_dataset(root, args.n_train, N_DEV, SIZE)
        home = Home(root / "home")
        config = bench_config(args.epochs)
        bare = bare_loop(dataset, config, args.trials, root)
        swept, in_sandbox = sweep_loop(dataset, config, args.trials, root, home)
        sys.stdout.write(
            f"sweep overhead ({args.trials} trials, {args.n_train} train / {N_DEV} dev, {SIZE}px, "
            f"{args.epochs} epochs, bwrap, gate excluded):\n"
            f"  bare in-process Optuna loop: {bare:.1f}s per trial\n"
            f"  segfactory sweep (run_sweep, tickets in the sandbox): {swept:.1f}s per trial"
            f" = worker in sandbox {in_sandbox:.1f}s + host side (runner evidence, pipeline, Optuna)"
            f" {swept - in_sandbox:.1f}s\n"
            f"  ratio sweep / bare: {swept / bare:.3f} (target <= 1.10)\n"
        )


if __name__ == "__main__":
    main()
