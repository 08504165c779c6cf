"""``segfactory curate images|defects|apply|compare``: data curation (docs/curation.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from cli._common import HomeOpt, JsonOpt, emit_json, home_for
from controls.executor import RunnerExecutor
from gate.client import GateClient
from segfactory.errors import DataError, PolicyError
from segfactory.home import Home
from segfactory.units import parse_duration
from synthetic.splits import read_split
from synthetic.versions import resolve

curate_app = typer.Typer(
    help="Curate training data: whole images, defect masks, plans and their random control.",
    no_args_is_help=True,
)

DataOpt = Annotated[str, typer.Option("--data", help="Dataset version: NAME/vK of the home, or its folder.")]
PlanOut = Annotated[
    Path | None, typer.Option("--plan-out", help="Where to write the plan (default: beside the version).")
]


def _version(home: Home, data: str) -> Any:
    """Resolve --data to a DatasetVersion of the home; a vault path is refused."""
    path = Path(data).expanduser()
    if path.exists():
        real = path.resolve()
        vault = home.vault.resolve()
        if real == vault or vault in real.parents:
            raise PolicyError(
                f"{data} is under the home's vault; curation never reads a vault tier "
                "(leakage there is the gate's business)"
            )
        datasets = home.datasets.resolve()
        if datasets not in real.parents or len(real.relative_to(datasets).parts) != 2:
            raise DataError(f"{data} is not a dataset version folder of the home ({datasets}/NAME/vK)")
        data = "/".join(real.relative_to(datasets).parts)
    elif "vault" in Path(data).parts:
        raise PolicyError(f"{data} names a vault tier; curation never reads the vault")
    return resolve(home.root, data)


def _plan_path(home: Home, version: Any, kind: str, given: Path | None) -> Path:
    return given or home.root / "curation" / version.name / version.version / f"{kind}-plan.json"


@curate_app.command("images")
def images_cmd(
    data: DataOpt,
    model: Annotated[Path | None, typer.Option("--model", help="ONNX model for hard-image mining.")] = None,
    plan_out: PlanOut = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Duplicates, near duplicates, overlapping tiles, quality, coverage, hard images, split hygiene."""
    from analysis.curation.images import curate_images  # deferred: loads numba
    from analysis.curation.plan import write_plan  # deferred: loads numba

    resolved = home_for(home, create=True)
    version = _version(resolved, data)
    train, dev = read_split(version.train, mmap=True), read_split(version.dev, mmap=True)
    report, plan = curate_images(
        train, dev, dataset=version.ref, content_hash=version.content_hash, model=model
    )
    path = write_plan(plan, _plan_path(resolved, version, "images", plan_out))
    report = report.model_copy(update={"plan": str(path)})
    if json_out:
        emit_json(report.as_json())
        return
    typer.echo(
        f"{version.ref}: {report.n_exact_groups} exact-duplicate groups, "
        f"{report.n_near_duplicates_train} near-duplicate pairs in train, "
        f"{report.n_cross_split} across train/dev, {report.tiles.n_overlaps} tile overlaps; "
        f"plan of {report.plan_items} items -> {path}"
    )


@curate_app.command("defects")
def defects_cmd(
    data: DataOpt,
    model: Annotated[
        Path | None, typer.Option("--model", help="ONNX model: cleanlab label-error ranking.")
    ] = None,
    plan_out: PlanOut = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Duplicate defects, distributions vs dev, bad masks, sampling weights, label-error queue."""
    from analysis.curation.defects import curate_defects  # deferred: loads numba
    from analysis.curation.plan import write_plan  # deferred: loads numba

    resolved = home_for(home, create=True)
    version = _version(resolved, data)
    train, dev = read_split(version.train, mmap=True), read_split(version.dev, mmap=True)
    queue = resolved.root / "curation" / version.name / version.version / "label-review.jsonl"
    report, plan = curate_defects(
        train, dev, dataset=version.ref, content_hash=version.content_hash, model=model, review_queue=queue
    )
    path = write_plan(plan, _plan_path(resolved, version, "defects", plan_out))
    report = report.model_copy(update={"plan": str(path)})
    if json_out:
        emit_json(report.as_json())
        return
    typer.echo(
        f"{version.ref}: {report.n_defects_train} train defects, "
        f"{report.n_duplicate_defects} duplicate, {report.n_bad_masks} bad masks; "
        f"plan of {report.plan_items} items -> {path}"
    )


@curate_app.command("apply")
def apply_cmd(
    plan: Annotated[Path, typer.Argument(help="A plan written by curate images|defects.")],
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Write a new dataset version from a plan; the old version is kept."""
    from analysis.curation.plan import apply_plan, read_plan  # deferred: loads numba

    resolved = home_for(home, create=True)
    loaded = read_plan(plan)
    if "vault" in Path(loaded.dataset).parts:
        raise PolicyError(f"plan names {loaded.dataset}; curation never touches a vault tier")
    version, approved = apply_plan(resolved.root, loaded)
    out = {
        "dataset": version.ref,
        "parent": loaded.dataset,
        "content_hash": version.content_hash,
        "approved": approved,
        "pending_approval": not approved,
        "items": len(loaded.items),
        "plan_hash": loaded.plan_hash,
    }
    if json_out:
        emit_json(out)
        return
    state = "approved" if approved else "pending a person's approval (labels changed)"
    typer.echo(f"{loaded.dataset} -> {version.ref} ({len(loaded.items)} items), {state}")


@curate_app.command("compare")
def compare_cmd(
    plan: Annotated[Path, typer.Argument(help="A plan that was applied (curate apply).")],
    budget: Annotated[str, typer.Option("--budget", help="Device time per ticket (e.g. 90s, 10m).")] = "2m",
    seed: Annotated[
        int,
        typer.Option("--seed", help="Training seed shared by both tickets; also picks the random subset."),
    ] = 0,
    epochs: Annotated[int, typer.Option("--epochs", help="Epochs per ticket (both arms).")] = 8,
    backend: Annotated[str, typer.Option("--backend", help="Sandbox backend: docker or bwrap.")] = "bwrap",
    config: Annotated[Path, typer.Option("--config", help="Base training config.")] = Path(
        "configs/demo.yaml"
    ),
    gate_socket: Annotated[
        Path | None, typer.Option("--gate-socket", help="A running gate's socket: submit both.")
    ] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The curated version against a random control of the same size, as two curation tickets."""
    from analysis.curation.plan import read_plan  # deferred: loads numba
    from controls.curate_compare import compare_plan  # deferred: loads numba

    resolved = home_for(home, create=True)
    gate = None
    if gate_socket is not None:
        gate = GateClient(socket_path=gate_socket)
    executor = RunnerExecutor(resolved, backend=backend, base_config=config, gate=gate, run_id="curation")
    result = compare_plan(
        resolved.root,
        read_plan(plan),
        budget_s=parse_duration(budget),
        seed=seed,
        epochs=epochs,
        executor=executor,
    )
    if json_out:
        emit_json(result.model_dump(mode="json"))
        return
    typer.echo(
        f"curated {result.curated.dataset}: {result.curated.verdict}; "
        f"random control {result.control.dataset}: {result.control.verdict}"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(curate_app, name="curate")
