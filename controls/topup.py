"""Targeted synthetic top-up against matched controls.

For each dose ``n`` of a slice ``S`` three arms train with the same budget, epochs and seed:

- ``synthetic``: the base train split plus ``n`` generated images constrained to ``S``
  (``synthetic.slices.constrain``);
- ``augment``: the base train split plus ``n`` existing train images, re-drawn with a flip,
  a 90-degree rotation and a small gain change (plain augmentation adding the same number);
- ``nothing``: the base train split (one ticket, shared by every dose: it does not change).

Each arm is a ``topup`` data ticket on its own approved dataset version, run by an executor
(``RunnerExecutor``: ``runner.execute_ticket`` in the sandbox). Its ``model.onnx`` is then
scored on the host-side real-dev split with the gate's confined scorer, and object recall on
the real voids of slice ``S`` is compared with the nothing arm by a paired bootstrap over the
real images. The real-holdout tier is scored only at a gate milestone (``gate milestone
--tiers real-holdout --model ...``), which this module names but never runs itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import JsonValue

from analysis.realism.report import load_real
from controls.executor import TicketExecutor
from controls.rounds import RoundRecord, record_round
from controls.topup_report import (
    ArmAtDose,
    ArmTicket,
    DoseResponse,
    DoseRow,
    MilestoneNote,
    RealDev,
    TopupReport,
    TurningPoint,
)
from runner import default_scorer
from segfactory.errors import DataError, LimitExceeded, UsageError
from segfactory.home import Home
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind
from segfactory.stats import bootstrap_ci, paired_bootstrap_diff
from synthetic.extend import base_params, build_arm
from synthetic.params import GenParams
from synthetic.slices import constrain, in_slice
from synthetic.splits import read_split
from synthetic.versions import DatasetVersion, resolve
from vision.metrics import per_image_metrics
from vision.slices import defect_detected

MAX_DOSE = 100_000  # images added per arm; past this the top-up is refused
N_BOOT = 1000  # paired bootstrap resamples


@dataclass
class TopupPlan:
    """What a top-up will run; ``check`` raises before anything is built or trained."""

    slice_name: str
    doses: list[int]
    ticket_seconds: float
    epochs: int
    seed: int
    budget_s: float | None
    round_two: bool = False  # one more ticket after the top-up: controls.rounds.run_round_two

    @property
    def n_tickets(self) -> int:
        return 1 + 2 * sum(1 for n in self.doses if n > 0) + int(self.round_two)

    def check(self, base_params: GenParams) -> GenParams:
        if not self.doses or any(n < 0 or n > MAX_DOSE for n in self.doses):
            raise UsageError(f"--n doses must lie in 0..{MAX_DOSE}; got {self.doses}")
        need = self.n_tickets * self.ticket_seconds
        if self.budget_s is not None and need > self.budget_s:
            raise LimitExceeded(
                f"top-up needs {self.n_tickets} tickets x {self.ticket_seconds:g} s = {need:g} "
                f"device-seconds but --budget is {self.budget_s:g} s; raise the budget, lower "
                f"--ticket-budget or use fewer doses"
            )
        return constrain(base_params, self.slice_name)


def parse_doses(text: str) -> list[int]:
    try:
        doses = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"--n must be comma-separated integers such as 0,250,500; got {text!r}") from None
    return doses if 0 in doses else [0, *doses]


def topup_config(base_config: Path | dict[str, JsonValue], base_train: Path) -> dict[str, JsonValue]:
    """The arms' base training config: ``max_train_images`` lifted so the added images are trained on.

    Training keeps the first ``max_train_images`` images and the top-up images come last, so a
    cap would silently drop them. A cap at or above the base train split is dropped for every arm;
    a cap below it is refused (the arms would not share the base images they claim to)."""
    import yaml

    config: dict[str, JsonValue] = (
        dict(base_config) if isinstance(base_config, dict) else yaml.safe_load(Path(base_config).read_text())
    )
    cap, base_n = config.get("max_train_images"), int(read_split(base_train, mmap=True).images.shape[0])
    if cap is not None and not isinstance(cap, int | float):  # as `cap < base_n` would refuse it
        raise TypeError(f"'<' not supported between instances of '{type(cap).__name__}' and 'int'")
    if cap is not None and cap < base_n:
        raise UsageError(
            f"the training config caps training at max_train_images={cap} but the base train split "
            f"holds {base_n} images, so top-up images would be cut; use a config without the cap "
            f"or a base version of at most {cap} images"
        )
    config.pop("max_train_images", None)
    return config


def make_ticket(tid: str, arm: str, n: int, version: DatasetVersion, plan: TopupPlan) -> Ticket:
    return Ticket(
        id=tid,
        arm=Arm.TOPUP,
        kind=TicketKind.DATA,
        seed=plan.seed,
        change={},
        hypothesis=f"{arm} top-up of {n} images for slice {plan.slice_name} raises real-slice recall",
        budget=Budget(device_seconds=plan.ticket_seconds, epochs=plan.epochs),
        expected_effect=ExpectedEffect(
            metric="object_recall", slice=plan.slice_name, direction=Direction.UP, size=0.0
        ),
        evidence=[f"dataset:{version.ref}"],
    )


def slice_counts(
    probs: np.ndarray, real: Any, slice_name: str, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per real image: (voids of the slice detected, voids of the slice) — for ratio bootstraps."""

    masks = np.asarray(real.masks)
    probs = np.asarray(probs, dtype=np.float32).reshape(masks.shape)  # the scorer answers (N, 1, H, W)
    per_image = per_image_metrics(probs, masks, threshold=threshold)
    index = {str(m["id"]): i for i, m in enumerate(real.image_meta)}
    picked = [d for d in real.defects if in_slice(slice_name, d)]
    hit = defect_detected(per_image, index, picked)
    n = len(real)
    rows = np.array([index[str(d["image_id"])] for d in picked], dtype=np.int64)
    return (
        np.bincount(rows, weights=hit.astype(float), minlength=n),
        np.bincount(rows, minlength=n).astype(float),
    )


def load_real_dev(path: Path, slice_name: str) -> Any:
    real = load_real(path)
    count = sum(1 for d in real.defects if in_slice(slice_name, d))
    if count == 0:
        raise DataError(
            f"the real-dev set at {path} holds no voids of slice {slice_name!r}; "
            f"a top-up cannot be measured on it"
        )
    return real


def _recall(arrays: tuple[np.ndarray, ...]) -> float:
    return float(arrays[0].sum() / arrays[1].sum()) if arrays[1].sum() else float("nan")


def summarise(
    curve: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]], doses: list[int], seed: int
) -> DoseResponse:
    """Dose-response rows with paired-bootstrap intervals and the named turning point."""

    nothing = curve["nothing"][0]
    rows = []
    for n in doses:
        arms: dict[str, ArmAtDose | None] = {}
        for arm in ("synthetic", "augment"):
            counts = nothing if n == 0 else curve[arm].get(n)
            arms[arm] = (
                None
                if counts is None
                else ArmAtDose(
                    recall=bootstrap_ci(counts, _recall, n_boot=N_BOOT, seed=seed),
                    vs_nothing=paired_bootstrap_diff(nothing, counts, _recall, n_boot=N_BOOT, seed=seed),
                )
            )
        row = DoseRow(n=n, synthetic=arms["synthetic"], augment=arms["augment"])
        if n > 0 and row.synthetic and row.augment:
            diff = paired_bootstrap_diff(
                curve["augment"][n], curve["synthetic"][n], _recall, n_boot=N_BOOT, seed=seed
            )
            row = row.model_copy(update={"synthetic_vs_augment": diff})
        rows.append(row)
    return DoseResponse(rows=rows, turning_point=turning_point(rows))


def turning_point(rows: list[DoseRow]) -> TurningPoint:
    """Where more synthetic data stops helping (the best dose) or starts hurting (interval < 0)."""
    scored = [(r.n, r.synthetic.vs_nothing) for r in rows if r.synthetic]
    best_n, _ = max(scored, key=lambda x: x[1].estimate)
    hurting = [n for n, d in scored if n > 0 and d.high < 0]
    helping = [n for n, d in scored if n > 0 and d.low > 0]
    larger = [n for n, _ in scored if n > best_n]
    if hurting:
        text = f"synthetic top-up starts hurting at n={hurting[0]} (interval below 0 against nothing)"
    elif helping:
        text = (
            f"synthetic top-up helps (interval above 0) at n={helping}; the best dose measured is n={best_n}"
        )
    else:
        text = "no dose measurably changed real-slice recall against nothing (every interval contains 0)"
    if larger and best_n > 0:
        text += f"; more than n={best_n} stopped helping"
    return TurningPoint(
        best_n=best_n,
        helping=helping,
        hurting=hurting,
        stops_helping_after=best_n if larger else None,
        summary=text,
    )


def write_report(report: TopupReport, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "topup.json").write_text(json.dumps(report.as_json(), indent=2, sort_keys=True) + "\n")
    return plot_curve(report, out_dir / "dose_response.png")


def plot_curve(report: TopupReport, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for arm in ("synthetic", "augment"):
        pts = [(r.n, at.vs_nothing) for r in report.dose_response.rows if (at := getattr(r, arm))]
        xs = [p[0] for p in pts]
        ax.errorbar(
            xs,
            [p[1].estimate for p in pts],
            yerr=[
                [p[1].estimate - p[1].low for p in pts],
                [p[1].high - p[1].estimate for p in pts],
            ],
            marker="o",
            capsize=3,
            label=arm,
        )
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xlabel("images added")
    ax.set_ylabel(f"real-slice recall minus nothing ({report.slice})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


Scorer = Callable[[Path, np.ndarray], np.ndarray]  # (model path, images (N, H, W)) -> probabilities (N, H, W)


def run_topup(
    home: Home,
    plan: TopupPlan,
    *,
    base_ref: str,
    real_path: Path,
    executor: TicketExecutor,
    run_id: str,
    scorer: Scorer | None = None,
    threshold: float = 0.5,
) -> TopupReport:
    """Build, train and measure every arm; write ``people/<run>/topup.json`` and the curve plot."""
    import tempfile

    if scorer is None:
        scorer = default_scorer
    base = resolve(home.root, base_ref)
    params = plan.check(base_params(read_split(base.train, mmap=True).manifest))
    real = load_real_dev(real_path, plan.slice_name)
    tickets: list[ArmTicket] = []
    curve: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]] = {
        "synthetic": {},
        "augment": {},
        "nothing": {},
    }
    with tempfile.TemporaryDirectory(prefix=".topup-", dir=home.root) as work:
        arms = [("nothing", 0, base)] + [
            (arm, n, build_arm(home.root, base, arm, n, params, plan.slice_name, plan.seed, Path(work)))
            for n in plan.doses
            if n > 0
            for arm in ("synthetic", "augment")
        ]
    for arm, n, version in arms:
        ticket = make_ticket(f"{run_id}-{arm}-n{n}", arm, n, version, plan)
        outcome = executor(ticket, version)
        status, model = outcome.status, Path(outcome.model) if outcome.model else None
        tickets.append(
            ArmTicket(
                ticket=ticket.id,
                arm=arm,
                n=n,
                dataset=version.ref,
                status=status,
                model=str(model) if model else None,
            )
        )
        if model is not None:
            curve[arm][n] = slice_counts(
                scorer(model, np.asarray(real.images)), real, plan.slice_name, threshold
            )
    if 0 not in curve["nothing"]:
        raise DataError(f"the nothing arm did not train ({tickets[0].status}); no comparison is possible")
    response = summarise(curve, plan.doses, plan.seed)
    report = TopupReport(
        slice=plan.slice_name,
        doses=plan.doses,
        seed=plan.seed,
        epochs=plan.epochs,
        ticket_seconds=plan.ticket_seconds,
        budget_s=plan.budget_s,
        base=base.ref,
        real_dev=RealDev(
            n_images=len(real),
            n_slice_voids=int(sum(c[1].sum() for c in curve["nothing"].values())),
            stand_in=bool(real.manifest.get("stand_in", False)),
        ),
        measured_on="real-dev (host side)",
        tickets=tickets,
        dose_response=response,
        milestone=MilestoneNote(
            tiers="real-holdout",
            models=[t.model for t in tickets if t.model],
            note="the real-holdout tier is scored only at a gate milestone: "
            "segfactory gate milestone --tiers real-holdout --model M ...",
        ),
    )
    report = report.model_copy(update={"plot": str(write_report(report, home.people_dir(run_id)))})
    record_round(
        home.people_dir(run_id),
        RoundRecord(
            weakness=f"real-slice recall on {plan.slice_name}",
            fix_kind="targeted_synthetic",
            fix=f"top-up doses {plan.doses} against augmentation and nothing",
            result=response.turning_point.summary,
            report=str(home.people_dir(run_id) / "topup.json"),
            slice=plan.slice_name,
            measured_on="real-dev slice recall (paired against the nothing arm)",
        ),
    )
    return report
