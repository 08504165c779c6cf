"""CLI commands for the gate and the holdout-reuse attack. See docs/cli.md for the contract."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli._common import HomeOpt, JsonOpt, console, emit_json, home_for, print_training_range
from cli.init import reference_config
from gate import users
from gate.attack import run_attack
from gate.calibrate import REFERENCE_DIR, Override, requested_override
from gate.client import home_gate, running_gate
from gate.core import Gate
from gate.init_step import REFERENCE_FILE
from gate.intake import IntakeError, inspect_model
from gate.milestones import host_copies
from gate.pinned import PinError, current_pinned
from gate.replies import AnswerTime
from gate.setup import add_real, export_reference, register_reference, relock
from gate.win_rule import DEFAULT_WIN_RULE
from segfactory.errors import GateError, UsageError
from segfactory.files import write_atomic
from segfactory.handover import parent_env
from segfactory.home import Home
from segfactory.privilege import SAFE_CWD
from segfactory.profiles import get_profile
from segfactory.text import inert
from synthetic.check import require_intact
from synthetic.intensity import split_stats
from synthetic.splits import read_split
from vision.training_data import TrainingRange, collapse_finding, training_range

if TYPE_CHECKING:
    from gate.milestone_report import MilestoneReport
    from vision.training_data import TrainingRange

gate_app = typer.Typer(
    help="The locked evaluator: serve, status, submit, milestones, tiers.", no_args_is_help=True
)
attack_app = typer.Typer(help="Attacks on evaluators (Blum & Hardt boosting).", no_args_is_help=True)


def _gate(home: Path | None) -> Any:
    resolved = home_for(home, create=True)
    return Gate(resolved.vault, home_root=resolved.root)


@gate_app.command("serve")
def serve_cmd(
    home: HomeOpt = None,
    socket: Annotated[
        Path | None, typer.Option("--socket", help="Unix socket path (its directory is the gate's own).")
    ] = None,
    host: Annotated[
        str | None, typer.Option("--host", help="TCP host; needs $SEGFACTORY_GATE_TOKEN.")
    ] = None,
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 0,
    answer: Annotated[
        str | None,
        typer.Option(
            "--answer-time",
            "--pad-quantum",
            help="Every /submit answer leaves this long after its request: seconds (600) or a "
            "multiple of the verdict time the gate measures at start (2x); never below that time. "
            "Default: $SEGFACTORY_GATE_ANSWER_TIME, else calibrated (3x the measured time, at least 10 s).",
        ),
    ] = None,
) -> None:
    """Run the gate service until stopped (from the vault's pinned copy when there is one)."""
    from gate.service import TOKEN_ENV, serve  # deferred: loads fastapi

    override = requested_override(answer)  # a malformed value fails before anything starts
    resolved = home_for(home, create=True)
    sock = socket if socket is not None or host is not None else resolved.root / "gate-run" / "gate.sock"
    if host is not None and not os.environ.get(TOKEN_ENV):
        raise UsageError(f"the gate refuses TCP without a bearer token; set ${TOKEN_ENV} or use --socket")
    problem = users.vault_problem(resolved.vault)
    if problem is not None:
        raise GateError(f"the gate refuses to serve {resolved.vault}: {problem}")
    pinned = _pinned_dir(resolved.vault)
    ensure_reference(resolved)
    if pinned is not None:
        _exec_pinned(resolved.root, pinned, sock, host, port, override)
    serve(_gate(home), sock, host, port, os.environ.get(TOKEN_ENV) or None, override)


def ensure_reference(home: Home) -> None:
    """A home made before the gate timed itself has no reference candidate: export the one init
    would make for the home's profile and register it (a person's command, like ``add-real``).
    The vault's reference folder tells, so a served gate's ledger is not opened for nothing."""
    if any((home.vault / REFERENCE_DIR).glob("*.onnx")) or not (home.vault / "ledger.sqlite").is_file():
        return
    profile = str(home.info().get("profile", ""))
    config = reference_config(profile)
    size = get_profile(profile).image_size if config is not None else 0
    model = (
        export_reference(home.root / "runs" / "baseline" / REFERENCE_FILE, config, size) if config else None
    )
    if model is None:
        raise UsageError(
            f"the vault of {home.root} has no reference model and none can be made for its profile "
            f"{profile!r}; the gate times its verdicts with one (docs/gate.md), so re-create the home "
            "with `segfactory init`"
        )
    gate = _gate(home.root)
    try:
        sha = register_reference(gate, model)
    finally:
        gate.ledger.close()
    relock(gate.vault)
    console().print(f"registered the reference model {sha[:12]}… for the gate's answer time ({model})")


def _pinned_dir(vault: Path) -> Path | None:
    """The copy to run: named by its digest in the vault, and root's when root starts it (as it
    is after ``init`` as root), else the starting user's or root's; anything else is refused. A
    copy pinned before the gate timed itself is refused too (it would pad to a fixed constant)."""
    try:
        pinned = current_pinned(vault)
    except PinError as exc:
        raise GateError(f"the gate refuses to serve {vault}: {exc}") from None
    if pinned is None:
        return None
    if not (pinned / "gate" / "calibrate.py").is_file():
        raise UsageError(
            f"the gate code pinned in {pinned} predates the calibrated answer time (it would pad every "
            "answer to a fixed constant instead of timing itself); re-create the home with "
            "`segfactory init` to pin the current gate"
        )
    owner = pinned.lstat().st_uid
    if owner not in {0, os.geteuid()}:
        raise GateError(
            f"the gate refuses to run its pinned copy {pinned}: it belongs to uid {owner}, not to root"
        )
    return pinned


def _exec_pinned(
    home: Path, pinned: Path, sock: Path | None, host: str | None, port: int, override: Override | None
) -> None:
    """Replace this process with the pinned service (``python -I -B``: the copy first on sys.path,
    and no bytecode written into it).

    When the vault belongs to ``segfactory-gate`` (init as root), the service starts as that
    user in its own mount namespace (gate.users.gate_launcher).
    """
    import sys

    from gate import boot_code  # deferred: loads fastapi (the service it boots)

    argv = [
        sys.executable,
        "-I",
        "-B",
        "-c",
        boot_code(pinned),
        "--home",
        str(home),
        "--pinned",
        str(pinned),
        "--win-rule",
        str(DEFAULT_WIN_RULE),
        "--port",
        str(port),
    ]
    argv += (
        ["--answer-time", override.text, "--answer-source", override.source] if override is not None else []
    )
    argv += ["--socket", str(sock)] if sock is not None else []
    argv += ["--host", host] if host is not None else []
    if users.is_root() and users.vault_is_separated(home / "vault"):
        if sock is not None and not sock.parent.is_dir():
            users.prepare_socket_dir(sock.parent)
        needed = [Path(sys.base_prefix), Path(sys.prefix), home, DEFAULT_WIN_RULE.parent]
        argv = users.gate_launcher(needed + ([sock.parent] if sock is not None else [])) + argv
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(SAFE_CWD)  # root's current directory may be one that others can write
    os.environ.update(parent_env())  # the pinned service dies with the process that started this one
    os.execv(argv[0], argv)


@gate_app.command("status")
def status_cmd(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Pinned code hash, win-rule hash, tier versions and budgets left, quarantines, the answer time.

    Asks the home's served gate (its answer time is the one agents get), else one started for the call."""
    with home_gate(home_for(home, create=True).root) as client:
        status = client.status()
    if as_json:
        emit_json(status.as_json())
        return
    out = console()
    out.print(f"win rule {status.win_rule_sha256} ok={status.win_rule_ok}")
    if status.answer_time is not None:
        out.print(_answer_line(status.answer_time))
    for row in status.tiers:
        out.print(f"{row.tier:>14} v{row.version}  budget left {row.left}/{row.budget}")
    from rich.markup import escape

    for q in status.quarantine:
        why = escape(inert(q.reason or "", multiline=False))  # it can quote a ref the submitter chose
        out.print(f"[red]quarantined[/red] run {q.run_id} ticket {q.ticket_id}: {why}", highlight=False)


def _answer_line(answer: AnswerTime) -> str:
    """``answer time 8 s (calibrated: 2x the measured 3.71 s verdict on confirm-a v1, floor 10 s;
    scaled by scoring cost against the reference pair's 143,785,984 multiply-accumulates)``."""
    line = f"answer time {answer.seconds:g} s ({answer.source}"
    if answer.source != "calibrated":
        line += f" {answer.requested}"
    if answer.measured_verdict_s is not None:
        how = f"{answer.multiple:g}x the" if answer.source == "calibrated" and answer.multiple else "over the"
        where = f"{answer.tier} v{answer.tier_version}"
        line += f": {how} measured {answer.measured_verdict_s:.2f} s verdict on {where}"
    if answer.floor_s is not None:
        line += f", floor {answer.floor_s:g} s"
    if answer.reference_cost:
        line += (
            f"; scaled by scoring cost against the reference pair's {answer.reference_cost:,} "
            "multiply-accumulates"
        )
    return line + ")"


@gate_app.command("submit")
def submit_cmd(
    model: Annotated[Path, typer.Option("--model", help="model.onnx to judge.")],
    ticket: Annotated[str, typer.Option("--ticket", help="Ticket id (a repeated id replays its verdict).")],
    train_data: Annotated[
        str | None, typer.Option("--train-data", help="Approved dataset version it trained on.")
    ] = None,
    replicate_of: Annotated[
        str | None, typer.Option("--replicate-of", help="Ticket whose confirm-a WIN this replicates.")
    ] = None,
    run: Annotated[str | None, typer.Option("--run", help="Run id (for quarantine).")] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a model; prints the coarse verdict only."""
    # a submission needs only the agent credential, so that is all this command holds
    with running_gate(home_for(home, create=True).root, role="agent") as client:
        verdict = client.submit(model, train_data, ticket, replicate_of=replicate_of, run_id=run)
    if as_json:
        emit_json(verdict.model_dump(mode="json"))
    else:
        console().print(f"{verdict.tier}: {verdict.verdict.value} ({verdict.queries_left} queries left)")


def _milestone_md(report: MilestoneReport) -> str:
    lines = [f"# Milestone {report.name} (run {report.run_id})", ""]
    for tier, block in report.tiers.items():
        lines.append(f"## {tier} v{block.version}")
        if block.error is not None:
            lines.append(f"- not scored: {block.error}")
        for sha, scores in block.models.items():
            f1 = scores.object_f1
            lines.append(f"- `{sha[:12]}` object F1 {f1.estimate:.4f} [{f1.low:.4f}, {f1.high:.4f}]")
            if scores.training_range is not None:
                lines.append(f"  - {_range_line(scores.training_range)}")
        lines.append("")
    return "\n".join(lines)


def _range_line(shift: TrainingRange) -> str:
    if not shift.known:
        return f"training range unknown: {shift.reason}"
    if not shift.outside:
        return "within the training range"
    text = "**outside the training range**: " + "; ".join(shift.reasons or [])
    return text + (f". {shift.message}" if shift.message else "")


def _outside(report: MilestoneReport) -> dict[str, dict[str, bool | None]]:
    """Per real tier and model: outside its training range (None: unknown)."""
    return {
        tier: {
            sha: scores.training_range.outside
            for sha, scores in block.models.items()
            if scores.training_range is not None
        }
        for tier, block in report.tiers.items()
        if block.intensity is not None
    }


def _fill_ranges(report: MilestoneReport, models: list[Path], home_root: Path) -> MilestoneReport:
    """Training ranges the gate could not read (models outside the home), from the given paths."""
    import hashlib

    by_sha = {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in models if p.is_file()}
    tiers = dict(report.tiers)
    for tier, block in report.tiers.items():
        if block.intensity is None:
            continue
        scored = dict(block.models)
        for sha, scores in block.models.items():
            shift = scores.training_range
            if shift is not None and not shift.known and sha in by_sha:
                found = training_range(block.intensity, by_sha[sha], None, home_root, with_set=False)
                finding = collapse_finding(found, scores.n_detections or 0, scores.n_voids or 0)
                scored[sha] = scores.model_copy(update={"training_range": finding})
        tiers[tier] = block.model_copy(update={"models": scored})
    return report.model_copy(update={"tiers": tiers})


@gate_app.command("milestone")
def milestone_cmd(
    name: Annotated[str, typer.Option("--name", help="Milestone name (used once).")],
    run: Annotated[
        str, typer.Option("--run", help="Run id; the report goes to runs/<run>/people/milestones/.")
    ],
    model: Annotated[
        list[Path] | None, typer.Option("--model", help="Models to score (default: current best).")
    ] = None,
    tiers: Annotated[
        str, typer.Option("--tiers", help="Comma-separated milestone tiers.")
    ] = "sealed,never-queried,real-holdout",
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Score milestone tiers once (people only); refuses a used name or a spent quota."""
    resolved = home_for(home, create=True)
    with running_gate(resolved.root) as client:
        report = client.milestone(name, run, list(model or []), [t for t in tiers.split(",") if t])
    report = _fill_ranges(report, list(model or []), resolved.root)
    out_dir = resolved.people_dir(run) / "milestones"
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / f"{name}.json", json.dumps(report.as_json(), indent=2, sort_keys=True))
    write_atomic(out_dir / f"{name}.md", _milestone_md(report))
    if as_json:
        emit_json(
            {
                "name": name,
                "run_id": run,
                "report": str(out_dir / f"{name}.json"),
                "tiers": sorted(report.tiers),
                "outside_training_range": _outside(report),
            }
        )
    else:
        console().print(f"milestone {name}: report in {out_dir}")


@gate_app.command("rotate")
def rotate_cmd(
    tier: Annotated[str, typer.Option("--tier", help="Tier to redraw from fresh secret seeds.")],
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Draw a fresh secret-seeded version of a tier (a person runs this; the gate draws it)."""
    with home_gate(home_for(home, create=True).root) as client:
        version = client.rotate(tier)
    if as_json:
        emit_json({"tier": tier, "version": version})
    else:
        console().print(f"{tier} is now v{version}")


@gate_app.command("add-real")
def add_real_cmd(
    source: Annotated[Path, typer.Argument(help="A labelled real split folder (from `data import --real`).")],
    train_data: Annotated[
        str | None,
        typer.Option(
            "--train-data",
            help="Training data to compare with (default: the current best's, from its records).",
        ),
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add labelled real images to the vault as a new real-holdout version.

    The set is compared with the training data of the current best (the model milestones
    score on it) and marked when it lies outside that training range.
    """
    require_intact(source)
    gate = _gate(home)
    shift = _real_set_range(gate, source, train_data)
    version = add_real(gate, source)
    gate.ledger.close()
    relock(gate.vault)
    if as_json:
        emit_json(
            {
                "tier": "real-holdout",
                "version": version,
                "training_range": shift.as_json(),
                "outside_training_range": shift.outside,
            }
        )
    else:
        con = console()
        con.print(f"real-holdout is now v{version}")
        print_training_range(con, shift)


def _real_set_range(gate: Any, source: Path, train_data: str | None) -> TrainingRange:
    """The real set against the current best's training data (or ``--train-data``)."""
    stats = split_stats(read_split(source, mmap=True))
    best = gate.ledger.current_best()
    try:
        copies = host_copies(gate, [inspect_model(Path(best["model_path"]))]) if best is not None else {}
    except (IntakeError, OSError):
        copies = {}  # an unreadable best leaves the range unknown; adding the real set goes on
    model = next(iter(copies.values()), None)
    if model is None and train_data is None:
        return TrainingRange(
            known=False,
            outside=None,
            model=best["model_path"] if best else None,
            reason="no host copy of the current best with its training records; pass --train-data",
        )
    block = training_range(stats, model or source, train_data, gate.home_root)
    return block.model_copy(update={"model": str(model) if model else None})


@attack_app.command("boost")
def boost_cmd(
    n: Annotated[int, typer.Option("--n", help="Holdout size (labels).")] = 4000,
    k: Annotated[int, typer.Option("--k", help="Random submissions.")] = 400,
    reps: Annotated[int, typer.Option("--reps", help="Repetitions (for the interval).")] = 5,
    seed: Annotated[int, typer.Option("--seed", help="Random seed.")] = 0,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Blum & Hardt boosting against a naive score-returning evaluator and the gate's rule."""
    if min(n, k, reps) < 1:
        raise UsageError(f"--n, --k and --reps must be >= 1; got {n}, {k}, {reps}")
    result = run_attack(n=n, k=k, reps=reps, seed=seed)
    if as_json:
        emit_json(result.model_dump(mode="json"))
        return
    for name, block in result.evaluators.items():
        leak = block.leak
        console().print(
            f"{name:>6}: holdout {block.holdout_loss:.4f}  fresh {block.fresh_loss:.4f}  "
            f"leak {leak.estimate:+.4f} [{leak.low:+.4f}, {leak.high:+.4f}]"
        )


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.add_typer(gate_app, name="gate")
    app.add_typer(attack_app, name="attack")
