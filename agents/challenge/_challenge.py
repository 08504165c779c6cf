"""``challenge_ticket``: re-derive a claimed result with new host-chosen seeds, then uphold or retract it.

Steps: locate the ticket's records and its claim; refuse (audited, nothing run) an unknown
ticket or a challenge over the policy's budget; re-run the ticket through the runner with K
seeds from ``os.urandom`` (same dataset version, recorded config, code); for a collapse, measure
every model at the claimed perturbation cell on dev through the confined scorer, check each
evaluation against the trained augmentation range and, when it lay outside, train a control
over the full range; diff the conditions; write the verdict under
``runs/<run>/people/challenges/`` and to the audit log; ask the gate (``POST /retract``) to
demote a retracted win that is the best.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import JsonValue

from agents._config_values import as_float, as_int
from agents.challenge._demote import demote_if_best
from agents.challenge._locate import Located, code_sha256, host_config, locate
from agents.challenge._policy import ChallengePolicy, load_policy
from agents.challenge._records import ChallengeRecord, Claim, ClaimKind, Condition, RangeCheck, Verdict
from agents.challenge._verdict import collapse_verdict, diff_conditions, range_check, win_verdict
from runner import TicketRunner, TicketStatus, default_scorer
from segfactory.errors import DataError, LimitExceeded, SegfactoryError, UsageError
from segfactory.files import write_atomic
from segfactory.home import Home
from segfactory.records import Actor, Arm, Ticket, TicketKind
from synthetic.splits import read_split
from vision.config import AugmentConfig
from vision.metrics import aggregate, per_image_metrics
from vision.perturb import PERTURBATIONS, perturb

CHALLENGES_DIR = "challenges"  # runs/<run>/people/challenges/<challenge id>.json
PERTURB_SEED = 0  # the seed `segfactory evaluate --robustness` perturbs with (vision.evaluate default)

log = logging.getLogger(__name__)


@dataclass
class ChallengeSetup:
    """What a challenge needs. ``backend`` is a sandbox name or a ``runner.WorkerLauncher``."""

    home: Home
    audit: Any  # segfactory.seams.AuditSink (audit.AuditLog)
    backend: Any = "bwrap"
    scheduler: Any = None  # runner.Scheduler; None: Scheduler.for_home
    scorer: Any = None  # runner.Scorer; None: runner.default_scorer (the confined scorer)
    policy: ChallengePolicy | None = None
    gate: Any = None  # gate.client.GateClient for a demotion; None: the home's gate is started for it

    def event(self, event: str, payload: dict[str, object], run_id: str | None) -> None:
        self.audit.append(Actor.SYSTEM, event, payload, run_id=run_id)


def challenge_ticket(
    setup: ChallengeSetup, ticket_id: str, *, seeds: int | None = None, run_id: str | None = None
) -> ChallengeRecord:
    """Re-derive ``ticket_id``'s claimed result; raises UsageError / LimitExceeded (audited) before
    running."""
    policy = setup.policy or load_policy()
    k = policy.default_seeds if seeds is None else seeds
    try:
        located = locate(setup.home, ticket_id, run_id)
        _check_budget(located, k, policy)
    except SegfactoryError as exc:
        setup.event(
            "challenge_refused",
            {"ticket_id": ticket_id, "run": run_id, "seeds": k, "reason": str(exc)},
            run_id,
        )
        raise
    cid = f"ch-{secrets.token_hex(4)}"
    host_seeds = [int.from_bytes(os.urandom(4), "little") % 2**31 for _ in range(k)]
    setup.event(
        "challenge_opened",
        {
            "challenge_id": cid,
            "ticket_id": ticket_id,
            "seeds": host_seeds,
            "claim": located.claim.model_dump(mode="json"),
        },
        located.run_id,
    )
    return _run_challenge(setup, located, cid, host_seeds, policy)


def _check_budget(located: Located, k: int, policy: ChallengePolicy) -> None:
    if k < 1:
        raise UsageError(f"--seeds must be at least 1; got {k}")
    if k > policy.max_seeds:
        raise LimitExceeded(
            f"challenge over budget: {k} seeds > the policy's max_seeds {policy.max_seeds} "
            "(policies/challenge.yaml); ask for fewer seeds"
        )
    runs = k + (1 if located.claim.kind is ClaimKind.COLLAPSE else 0)
    need = runs * located.ticket.budget.device_seconds
    if need > policy.max_device_seconds:
        raise LimitExceeded(
            f"challenge over budget: {runs} re-runs x {located.ticket.budget.device_seconds:g} "
            f"device-s = {need:g} > the policy's max_device_seconds {policy.max_device_seconds:g} "
            "(policies/challenge.yaml); ask for fewer seeds or raise the limit"
        )


def _run_challenge(
    setup: ChallengeSetup, located: Located, cid: str, host_seeds: list[int], policy: ChallengePolicy
) -> ChallengeRecord:
    claim = located.claim
    original = _condition(setup, located, claim, "claimed", located.ticket, located.folder, located.outcome)
    spent, rederived = 0.0, []
    for i, seed in enumerate(host_seeds):
        cond, secs = _rerun(
            setup, located, f"{cid}-{located.ticket.id[:40]}-s{i}", seed, None, f"rederived-{seed}"
        )
        rederived.append(cond)
        spent += secs
    checks: list[RangeCheck] = []
    control = None
    if claim.kind is ClaimKind.COLLAPSE:
        checks = [range_check(claim, original)]
        patch = _full_range_patch(claim, located.config, policy)
        if not checks[0].within_training_range and patch is not None:
            control, secs = _rerun(
                setup,
                located,
                f"{cid}-{located.ticket.id[:40]}-full",
                host_seeds[0],
                patch,
                "full-range control",
            )
            spent += secs
            checks.append(range_check(claim, control))
        verdict, reasons = collapse_verdict(claim, original, rederived, control, checks, policy)
    else:
        verdict, reasons = win_verdict(claim, rederived, policy)
    conditions = [original, *rederived, *([control] if control else [])]
    record = ChallengeRecord(
        challenge_id=cid,
        claim=claim,
        seeds=host_seeds,
        conditions=conditions,
        diff=diff_conditions(conditions),
        range_checks=checks,
        verdict=verdict,
        reasons=reasons,
        device_seconds=round(spent, 3),
    )
    return _record(setup, located, record)


def _record(setup: ChallengeSetup, located: Located, record: ChallengeRecord) -> ChallengeRecord:
    """Write the verdict first (no decision lost), then demote, then rewrite with the demotion."""
    path = _write(setup.home, located.run_id, record)
    setup.event("challenge_verdict", {"file": str(path), **record.model_dump(mode="json")}, located.run_id)
    claim = record.claim
    if record.verdict is Verdict.RETRACTED and claim.kind is ClaimKind.WIN and claim.model_sha256:
        reason = (
            f"challenge {record.challenge_id} retracted the win of {claim.ticket_id}: {record.reasons[0]}"
        )
        moved_to = demote_if_best(setup.home, claim.model_sha256, reason[:2000], setup.gate)
        if moved_to is not None:
            record = record.model_copy(update={"demoted": True, "demoted_to": moved_to})
            _write(setup.home, located.run_id, record)
            setup.event(
                "challenge_demoted",
                {
                    "challenge_id": record.challenge_id,
                    "model_sha256": claim.model_sha256,
                    "best_now": moved_to,
                },
                located.run_id,
            )
    return record


def _write(home: Home, run_id: str, record: ChallengeRecord) -> Path:
    folder = home.people_dir(run_id) / CHALLENGES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record.challenge_id}.json"
    write_atomic(path, record.model_dump_json(indent=2))
    return path


def _rerun(
    setup: ChallengeSetup,
    located: Located,
    ticket_id: str,
    seed: int,
    patch: dict[str, JsonValue] | None,
    label: str,
) -> tuple[Condition, float]:
    """One re-derivation through the runner; a failed run is a condition without metrics."""

    ticket = _challenge_ticket(located, ticket_id, seed, patch)
    base = {k: v for k, v in located.config.items() if k != "seed"}
    runner = TicketRunner(
        setup.home,
        setup.backend,
        setup.audit,
        run_id=located.run_id,
        scheduler=setup.scheduler,
        scorer=setup.scorer,
    )
    outcome = runner.run(ticket, located.dataset, base)
    folder = setup.home.tickets_dir(located.run_id) / ticket_id
    if outcome.status is not TicketStatus.DONE:
        log.warning("challenge re-run %s ended %s: %s", ticket_id, outcome.status.value, outcome.reason)
    return _condition(setup, located, located.claim, label, ticket, folder, outcome), outcome.device_seconds


def _challenge_ticket(
    located: Located, ticket_id: str, seed: int, patch: dict[str, JsonValue] | None
) -> Ticket:
    original = located.ticket
    if original.kind is TicketKind.CONFIG:
        change = patch or {}
    else:
        change = {**original.change, "config": {**original.change.get("config", {}), **(patch or {})}}
    what = "train over the full perturbation range" if patch else f"re-derive with seed {seed}"
    return Ticket(
        id=ticket_id,
        arm=Arm.CHALLENGE,
        kind=original.kind,
        hypothesis=f"challenge of {original.id}: {what}",
        change=change,
        budget=original.budget,
        expected_effect=original.expected_effect,
        seed=seed,
    )


def _condition(
    setup: ChallengeSetup,
    located: Located,
    claim: Claim,
    label: str,
    ticket: Ticket,
    folder: Path,
    outcome: Any,
) -> Condition:
    """What one run trained with and scored: its config and code from the host's own records
    (never from the workspace the sandbox wrote), its dev score from the host's evidence."""
    config = _trained_config(folder, located.config)
    ok = outcome.evidence is not None
    dev_f1 = float(outcome.evidence.dev_metrics["object_f1"]) if ok else None
    pert = None
    if ok and claim.kind is ClaimKind.COLLAPSE:
        pert = _perturbed_f1(
            setup, folder / "model.onnx", located, claim, as_float(config.get("threshold", 0.5))
        )
    stable = {k: v for k, v in config.items() if k != "seed"}
    return Condition(
        label=label,
        ticket_id=ticket.id,
        seed=as_int(config.get("seed", 0)),
        dataset=located.dataset.ref,
        dataset_hash=located.dataset.content_hash,
        code_sha256=code_sha256(ticket),
        config_sha256=hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest(),
        augment=config.get("augment", {}),  # validated (and copied) as the record's mapping
        dev_object_f1=dev_f1,
        perturbed_object_f1=pert,
    )


def _trained_config(folder: Path, fallback: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """A run's config from the host's copy; a re-run that kept none (it failed) takes ``fallback``."""
    try:
        return host_config(folder)
    except DataError:
        return fallback


def _perturbed_f1(
    setup: ChallengeSetup, model: Path, located: Located, claim: Claim, threshold: float
) -> float:
    """Object F1 on the dev split under the claimed perturbation cell, through the confined scorer."""

    assert claim.perturbation is not None and claim.severity is not None
    dev = read_split(located.dataset.dev)
    x, y = perturb(
        claim.perturbation, claim.severity, np.asarray(dev.images), np.asarray(dev.masks), PERTURB_SEED
    )
    prob = np.asarray((setup.scorer or default_scorer)(model, x))[:, 0]
    return float(aggregate(per_image_metrics(prob, y, threshold=threshold))["object_f1"])


def _full_range_patch(
    claim: Claim, config: dict[str, JsonValue], policy: ChallengePolicy
) -> dict[str, JsonValue] | None:
    """A config patch whose augmentation covers every severity of the claimed perturbation."""

    p = PERTURBATIONS.get(claim.perturbation or "")
    if p is None or p.augment_field is None:
        return None
    augment = AugmentConfig.model_validate(config.get("augment", {}))
    current = getattr(augment, p.augment_field)
    full = {"low": min(current.low, *p.values), "high": max(current.high, *p.values)}
    return {"augment": {p.augment_field: full, "p": max(augment.p, policy.control_augment_p)}}


def retractions(home: Home) -> list[ChallengeRecord]:
    """Every retracted claim in the home, oldest first: for every later report and the console."""
    if not home.runs.is_dir():
        return []
    records = [
        ChallengeRecord.model_validate_json(p.read_text())
        for p in home.runs.glob(f"*/people/{CHALLENGES_DIR}/*.json")
    ]
    return sorted((r for r in records if r.verdict is Verdict.RETRACTED), key=lambda r: r.created)
