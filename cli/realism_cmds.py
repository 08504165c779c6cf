"""CLI commands for synthetic data judged by use: ``realism``, ``topup``, ``stand-in``.

See docs/synthetic-by-use.md and docs/cli.md. Real images never reach stdout, logs or reports:
every output here is an aggregate.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from analysis.realism import realism_report, write_stand_in
from cli._common import BackendOpt, HomeOpt, JsonOpt, console, emit_json, home_for
from controls.executor import RunnerExecutor
from controls.rounds import run_round_two
from controls.topup import TopupPlan, parse_doses, run_topup, topup_config
from controls.topup_report import TopupReport
from segfactory.errors import DataError, UsageError
from segfactory.units import parse_duration
from synthetic.versions import resolve

if TYPE_CHECKING:
    from controls.topup_report import RoundTwo

DEFAULT_TICKET_BUDGET = "60s"  # device time per top-up ticket (every arm gets the same)
DEFAULT_TOPUP_EPOCHS = 2  # epochs per top-up ticket (every arm gets the same)
DEFAULT_CONFIG = Path("configs/demo.yaml")  # base training config of the top-up tickets


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.command("realism")(realism_cmd)
    app.command("topup")(topup_cmd)
    app.command("stand-in")(stand_in_cmd)
    app.command("round-two")(round_two_cmd)


def _synthetic_split(home: Path | None, ref: str) -> Path:
    """A split folder path, or NAME/vK of the home -> its train split."""
    path = Path(ref)
    if (path / "manifest.json").is_file():
        return path

    return resolve(home_for(home).root, ref).train


def realism_cmd(
    synthetic: Annotated[
        str,
        typer.Option(
            "--synthetic", help="Synthetic split folder or dataset version NAME/vK (its train split)."
        ),
    ],
    real: Annotated[
        Path, typer.Option("--real", help="Real-dev split (or the folder `data import --real` made).")
    ],
    out: Annotated[
        Path | None, typer.Option("--out", help="Report folder (default: <home>/runs/realism-<time>/people).")
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of subsamples, permutations and the classifier.")
    ] = 0,
    classifier: Annotated[
        bool, typer.Option("--classifier/--no-classifier", help="Train the two-sample CNN.")
    ] = True,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Realism checks of a synthetic set against a real-dev set: aggregates only, not the test that counts."""
    syn_dir = _synthetic_split(home, synthetic)
    folder = out or home_for(home).people_dir(f"realism-{time.strftime('%Y%m%d-%H%M%S')}")
    report = realism_report(syn_dir, real, folder, seed=seed, classifier=classifier)
    if json_out:
        emit_json(report.as_json())
        return
    c = console()
    c.print(f"MMD² {report.mmd.mmd2:.4g} (permutation p = {report.mmd.p_value:.3g})")
    if report.classifier is not None:
        acc = report.classifier.accuracy
        c.print(
            f"classifier held-out accuracy {acc.estimate:.3f} [{acc.low:.3f}, {acc.high:.3f}] "
            f"(training {report.classifier.train_seconds} s)"
        )
    c.print(f"report {report.report}, plots {report.plot}")
    c.print(report.note)


def topup_cmd(
    slice_name: Annotated[
        str,
        typer.Option(
            "--slice", help="Slice constraint: thin, tiny, low-contrast, background:<name> (join with +)."
        ),
    ],
    n: Annotated[
        str, typer.Option("--n", help="Doses: images added per arm, comma-separated (0 is always included).")
    ],
    real: Annotated[
        Path, typer.Option("--real", help="Real-dev split the arms are measured on (host side).")
    ],
    budget: Annotated[
        str | None, typer.Option("--budget", help="Total device time for every ticket (e.g. 10m).")
    ] = None,
    ticket_budget: Annotated[
        str, typer.Option("--ticket-budget", help="Device time per ticket.")
    ] = DEFAULT_TICKET_BUDGET,
    epochs: Annotated[int, typer.Option("--epochs", help="Epochs per ticket.")] = DEFAULT_TOPUP_EPOCHS,
    data: Annotated[str, typer.Option("--data", help="Base dataset version.")] = "synthetic/v1",
    config: Annotated[Path, typer.Option("--config", help="Base training config.")] = DEFAULT_CONFIG,
    seed: Annotated[int, typer.Option("--seed", help="Training seed of every arm.")] = 0,
    run_id: Annotated[str | None, typer.Option("--run-id", help="Run id (default: topup-<time>).")] = None,
    round_two: Annotated[
        bool,
        typer.Option(
            "--round-two/--no-round-two",
            help="Then run round two: the next weakest dev slice, a training or model fix.",
        ),
    ] = False,
    backend: BackendOpt = "bwrap",
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Targeted synthetic top-up against plain augmentation and nothing, measured on a real slice."""
    resolved = home_for(home, create=True)
    plan = TopupPlan(
        slice_name=slice_name,
        doses=parse_doses(n),
        ticket_seconds=parse_duration(ticket_budget),
        epochs=epochs,
        seed=seed,
        budget_s=parse_duration(budget) if budget else None,
        round_two=round_two,
    )
    rid = run_id or f"topup-{time.strftime('%Y%m%d-%H%M%S')}"
    base_config = topup_config(config, resolve(resolved.root, data).train)
    executor = RunnerExecutor(resolved, backend=backend, base_config=base_config, run_id=rid)
    report = run_topup(resolved, plan, base_ref=data, real_path=real, executor=executor, run_id=rid)
    if round_two:
        report = report.model_copy(
            update={"round_two": run_round_two(resolved, report, executor=executor, run_id=rid)}
        )
    if json_out:
        emit_json(report.as_json())
        return
    c = console()
    for row in report.dose_response.rows:
        cells = [
            f"{arm} {at.vs_nothing.estimate:+.3f} [{at.vs_nothing.low:+.3f}, {at.vs_nothing.high:+.3f}]"
            for arm in ("synthetic", "augment")
            if (at := getattr(row, arm))
        ]
        c.print(f"n={row.n}: " + "; ".join(cells))
    c.print(report.dose_response.turning_point.summary)
    c.print(f"report in {Path(str(report.plot)).parent}")
    if report.round_two is not None:
        _print_round_two(report.round_two)


def _print_round_two(result: RoundTwo) -> None:
    console().print(
        f"round two: slice {result.slice} (dev effect {result.slice_effect:+.3f}), "
        f"{result.fix_kind} fix {result.change}: {result.result}"
    )


def round_two_cmd(
    run_id: Annotated[
        str, typer.Option("--run-id", help="The top-up run whose nothing arm is the baseline.")
    ],
    config: Annotated[
        Path, typer.Option("--config", help="Base training config (as the top-up used).")
    ] = DEFAULT_CONFIG,
    backend: BackendOpt = "bwrap",
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Round two after a top-up: the next weakest dev slice and a different kind of fix, recorded."""

    resolved = home_for(home)
    path = resolved.people_dir(run_id) / "topup.json"
    if not path.is_file():
        raise UsageError(f"no top-up report at {path}; run `segfactory topup --run-id {run_id}` first")
    topup = TopupReport.model_validate_json(path.read_text())
    base_config = topup_config(config, resolve(resolved.root, topup.base).train)
    executor = RunnerExecutor(resolved, backend=backend, base_config=base_config, run_id=run_id)
    result = run_round_two(resolved, topup, executor=executor, run_id=run_id)
    if json_out:
        emit_json(result.as_json())
    else:
        _print_round_two(result)


def stand_in_cmd(
    out: Annotated[
        Path, typer.Option("--out", help="New import-layout folder (images/, masks/, stand_in.json).")
    ],
    n: Annotated[int, typer.Option("--n", help="Number of images.")] = 400,
    size: Annotated[int, typer.Option("--size", help="Image side in pixels.")] = 64,
    seed: Annotated[int, typer.Option("--seed", help="Public seed of the stand-in.")] = 9001,
    idx: Annotated[
        Path | None, typer.Option("--idx", help="Fashion-MNIST IDX file: another part family.")
    ] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Write a shifted-domain synthetic stand-in for real data (NOT real data) in the import layout."""
    if out.exists():
        raise DataError(f"{out} already exists; choose a new --out")
    summary = write_stand_in(out, n, size, seed, idx)
    if json_out:
        emit_json(summary.model_dump(mode="json"))
    else:
        console().print(f"wrote {n} stand-in images to {out}. {summary.note}")
