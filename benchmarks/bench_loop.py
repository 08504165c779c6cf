"""The research loop's own overhead against the wall time of the run it served.

Reads a finished ``segfactory run`` (its home and run id) and times, in this process, each step
the loop adds around the tickets, as often as that run did it:

- analysis of a best on dev (once per round),
- realising the recommendations into concrete changes (once per proposal step),
- validation with the fingerprint check (once per proposed ticket),
- scoring a ticket's prediction on dev (once per ticket that executed a recommendation or a control).

It prints each step's time, the sum, and the ratio to the run's wall time (the baseline,
measured by the same run), with the load average it was measured at.
Usage: python benchmarks/bench_loop.py --home HOME --run RUN
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any


def _timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--run", required=True)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

    from agents._analysis import analyse_best
    from agents._predictions import Predictions, recommendation_of
    from agents.context import DevAnalysis
    from agents.graph import PROPOSE_BATCH
    from agents.run_policy import DATASET, load_run_defaults
    from agents.run_setup import RunSetup
    from agents.services import HostServices
    from gate.replies import GateStatus
    from segfactory.home import SOURCE_ROOT, Home
    from segfactory.layout import RunLayout, RunsLayout
    from segfactory.records import sha256_file
    from synthetic.versions import resolve

    home = Home(args.home)
    layout = RunLayout(home, args.run)
    record = layout.read_record()
    wall = float(record.finished_at or 0.0) - float(record.started_at)
    tickets = layout.started()
    rounds = max(1, len(layout.analysis_reports()))
    proposed = [t for t in tickets if t.replicate_of is None]
    proposals = rounds + -(-len(proposed) // PROPOSE_BATCH)  # a propose step per batch, and one per round

    class Gate:  # the best as the run left it: the last promotion of the run, else the baseline
        def status(self) -> GateStatus:
            runs = RunsLayout(home)
            promos = [r for r in runs.promotions() if r.run_id == args.run]
            best = promos[-1].sha256 if promos else sha256_file(runs.baseline_model)
            return GateStatus(
                win_rule_sha256=None,
                win_rule_ok=True,
                pinned_code_sha256=None,
                pinned_code_ok=None,
                tiers=[],
                quarantine=[],
                current_best=best,
            )

    class Sink:
        def append(self, *a: Any, **k: Any) -> None: ...

        def put_blob(self, data: bytes) -> str:
            return ""

    scratch = tempfile.mkdtemp(prefix="bench-loop-")
    try:
        setup = RunSetup(
            home=home,
            run_id=args.run,
            backend="bwrap",
            dataset=resolve(home.root, DATASET),
            base_config=SOURCE_ROOT / load_run_defaults(record.profile).base_config,
            gate=Gate(),  # type: ignore[arg-type]  # the status a gate would answer, nothing else
            audit=Sink(),  # type: ignore[arg-type]
            dev_margin=0.005,
        )
        services = HostServices(setup)
        best = services.comparer.best()
        # the analysis writes its report folder beside the run: send it to a scratch home
        scratch_setup = replace(setup, home=Home(Path(scratch)))
        (Path(scratch) / "runs" / args.run).mkdir(parents=True)
        dataset = resolve(home.root, services.incumbent().dataset)
        t_analyse, report = _timed(lambda: analyse_best(scratch_setup, dataset, best.path, best.sha256))
        analysis = DevAnalysis.from_report(report)
        t_realise, _ = _timed(lambda: services.realise(analysis))
        t_check = sum(_timed(lambda t=t: services.check(t))[0] for t in tickets) / max(1, len(tickets))
        scored = [t for t in tickets if recommendation_of(t) is not None]
        lineage = services.lineage.lineage()
        predictions = Predictions(
            home, f"bench-{os.getpid()}", services.comparer.dev(), setup.threshold, setup.score
        )
        per_prediction = []
        for ticket in scored:
            row = lineage.get(ticket.id)
            model = layout.ticket(ticket.id).model
            if row is None or not model.is_file():
                continue
            parent = services.lineage.incumbent_at(row)
            predictions._evaluated.clear()
            start = time.perf_counter()
            predictions.after_ticket(ticket, row, model, Path(parent.model))
            per_prediction.append(time.perf_counter() - start)
        t_predict = sum(per_prediction) / max(1, len(per_prediction))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(home.people_dir(f"bench-{os.getpid()}"), ignore_errors=True)
        shutil.rmtree(home.runs / f"bench-{os.getpid()}", ignore_errors=True)

    overhead = rounds * t_analyse + proposals * t_realise + len(tickets) * (t_check + t_predict)
    load = os.getloadavg()
    out = sys.stdout.write
    out(
        f"run {args.run}: wall {wall:.1f} s, {len(tickets)} tickets, {rounds} rounds, "
        f"{proposals} proposal steps\n"
    )
    out(f"analysis of a best      {t_analyse:7.2f} s  x {rounds}\n")
    out(f"realise recommendations {t_realise:7.2f} s  x {proposals}\n")
    out(f"validate (fingerprint)  {t_check:7.2f} s  x {len(tickets)}\n")
    out(f"score a prediction      {t_predict:7.2f} s  x {len(tickets)}\n")
    out(
        f"loop overhead {overhead:.1f} s / run wall {wall:.1f} s = {overhead / max(wall, 1e-9):.3f} "
        f"(target < 0.10); load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
    )


if __name__ == "__main__":
    main()
