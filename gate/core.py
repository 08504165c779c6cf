"""The gate's decision procedure, independent of transport (the service wraps it in HTTP).

``Gate.submit`` is trust rules 4, 5 and 8 in code: replay a known ticket id; refuse while the
win rule changed, the pinned code is broken or the run is quarantined; spend one query on the
tier version (confirm-a, or confirm-b for a replicate) before anything else; check the model at
intake; check the training data for leakage; answer from the verdict cache (keyed by model hash,
tier version and current best, since a verdict compares against the best) or score best and
candidate confined and apply the win rule. Every outcome is recorded with its reason for people
and queued as an audit event; the agent gets only a ``CoarseVerdict``.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gate import tiers
from gate._provider import ProviderError, Scoring, pinned_scoring
from gate.intake import (
    CheckedModel,
    IntakeError,
    IntakeUnavailable,
    inspect_bytes,
    inspect_model,
    inspect_own_model,
)
from gate.leakage import LeakError, check_training_data
from gate.ledger import PENDING, BestRow, Ledger, LedgerError, QueryRow
from gate.replies import AnswerTime, GateStatus
from gate.scorer import ScoringError, score_checked
from gate.win_rule import DEFAULT_WIN_RULE, WinRule, check_pinned, decide, load_win_rule, perturbed_views
from segfactory.errors import DataError, GateError, PolicyError
from segfactory.files import write_atomic
from segfactory.records import CoarseVerdict, Tier, Verdict

log = logging.getLogger(__name__)

TICKET_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
META_WIN_RULE = "win_rule_sha256"
BEST_DIR = "best"
MODELS_DIR = "models"  # every submitted model that passed intake, by sha256 (for promotion)


class Deadline:
    """The moment a submission's answer leaves (``time.monotonic()``), shared by the service and the gate.

    The service answers at ``at`` whatever happens; the first to ``claim`` decides what that answer
    holds: the gate with its verdict, when it is reached in time, or the service with ``INVALID``
    (an overrun, which the gate then records in place of the late verdict, so the ledger always
    says what the agent was told).

    Submissions are judged one at a time, so each has a slot of its own: its time starts when it
    arrived or when the submission before it (``after``) answers, whichever is later, and lasts
    ``seconds``. Once intake has counted what scoring it costs, the gate may ``extend`` that time
    (never past its start's ``at``, and never shorten it). So an answer's time follows from arrival
    times and the submitted bytes alone.
    """

    def __init__(self, arrived: float, seconds: float, after: Deadline | None = None):
        self.arrived = arrived
        self.seconds = seconds
        self._after = after if after is not None and after.at > arrived else None
        self._lock = threading.Lock()
        self._owner: str | None = None

    @property
    def at(self) -> float:
        start = self.arrived if self._after is None else max(self.arrived, self._after.at)
        return start + self.seconds

    def extend(self, seconds: float) -> None:
        """Give this submission ``seconds`` in all, when that is longer and nobody has claimed the
        answer yet (an answer whose time already passed keeps it)."""
        with self._lock:
            if self._owner is None and time.monotonic() <= self.at and seconds > self.seconds:
                self.seconds = seconds

    def claim(self, who: str) -> bool:
        """True when ``who`` decides the answer (first claim, and a verdict only before ``at``)."""
        with self._lock:
            if self._owner is None and (who != "verdict" or time.monotonic() <= self.at):
                self._owner = who
            return self._owner == who


@dataclass(frozen=True)
class Outcome:
    """The agent's answer plus the reason, which goes only to people (ledger and audit)."""

    verdict: CoarseVerdict
    reason: str


class Gate:
    """One vault's gate. Not thread-safe: the service serialises submissions."""

    def __init__(self, vault: Path, win_rule_path: Path = DEFAULT_WIN_RULE, home_root: Path | None = None):
        self.vault = Path(vault)
        self.home_root = home_root if home_root is not None else self.vault.parent
        self.win_rule_path = Path(win_rule_path)
        self.ledger = Ledger(self.vault / "ledger.sqlite")
        self._prob_cache: dict[tuple[str, str, int], np.ndarray] = {}
        self._cost_cache: dict[str, int | None] = {}  # model sha256 -> its scoring cost
        self.integrity_check: Any = None  # set by the service: a callable raising GateError
        self.answer_time: AnswerTime | None = None  # set by the service at start (gate.calibrate)
        self.pin_providers()

    def pin_providers(self) -> None:
        """Pin this machine's scoring provider for every built tier version not yet pinned, when
        the gate starts (and after a rotation), so that no submission is what writes a pin."""
        for tier, version in tiers.built_tiers(self.vault).items():
            try:
                self.scoring(tier, version)
            except ProviderError:
                pass  # pinned to CUDA and this machine lacks it: each submission says so

    # -- set-up -------------------------------------------------------------------------------
    def pin_win_rule(self) -> str:
        """Record the win rule's hash (at init or run start) and register tier budgets."""
        rule, digest = load_win_rule(self.win_rule_path)
        self.ledger.set_meta(META_WIN_RULE, digest)
        self.register_tiers(rule)
        return digest

    def register_tiers(self, rule: WinRule) -> None:
        for tier, version in tiers.built_tiers(self.vault).items():
            self.ledger.add_tier_version(tier, version, rule.budgets.get(tier, 0))  # type: ignore[call-overload]

    def set_best(self, model_path: Path, kind: str, reason: str, *, own: bool = False) -> str:
        """Copy a checked model into the vault and make it the global best. ``own``: a model this
        process built itself (init's baseline), checked in process (``intake.inspect_own_model``)."""
        checked = inspect_own_model(model_path) if own else inspect_model(model_path)
        target = self.vault / BEST_DIR / f"{checked.sha256}.onnx"
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.write_bytes(checked.data)
        self.ledger.set_best(checked.sha256, str(target), kind, reason)
        self.ledger.queue_event("gate.best", {"model_sha256": checked.sha256, "kind": kind, "reason": reason})
        return checked.sha256

    def rule(self) -> WinRule:
        pinned = self.ledger.get_meta(META_WIN_RULE)
        if pinned is None:
            raise PolicyError("no win rule pinned in the ledger; run `segfactory init`")
        return check_pinned(self.win_rule_path, pinned)

    # -- submission ---------------------------------------------------------------------------
    @staticmethod
    def ticket_id_for(ticket_id: str | None) -> str:
        """The id a submission is recorded under: a malformed id becomes ``bad-ticket-<hash>``."""
        if TICKET_ID.match(ticket_id or ""):
            return str(ticket_id)
        return f"bad-ticket-{hashlib.sha256((ticket_id or '').encode()).hexdigest()[:16]}"

    def submit(
        self,
        model_bytes: bytes,
        ticket_id: str,
        replicate_of: str | None = None,
        train_data: str | None = None,
        run_id: str | None = None,
        deadline: Deadline | None = None,
    ) -> Outcome:
        ticket_id = self.ticket_id_for(ticket_id)
        known = self.ledger.find_query(ticket_id)
        if known is not None and known.verdict != PENDING:
            return self._answer(
                ticket_id, known.tier, known.version, Verdict(known.verdict), known.reason, replay=True
            )
        model_sha = hashlib.sha256(model_bytes).hexdigest()
        if known is not None:  # PENDING: a crash or a lost answer left it open; its query is spent
            return self._resume(known, model_bytes, model_sha, train_data, run_id, deadline)
        tier = Tier.CONFIRM_B.value if replicate_of else Tier.CONFIRM_A.value
        version = tiers.current_version(self.vault, tier)
        if version is None:
            return self._answer(
                ticket_id, tier, 0, Verdict.INVALID, f"tier {tier} is not built in {self.vault}"
            )
        try:  # a tier version pinned to a provider this machine lacks: refused before a query is spent
            self.scoring(tier, version, pin_it=False)
        except ProviderError as exc:
            self.ledger.queue_event(
                "gate.provider_unavailable", {"tier": tier, "tier_version": version, "reason": str(exc)}
            )
            return self._answer(ticket_id, tier, version, Verdict.INVALID, str(exc))
        if not self.ledger.reserve_query(ticket_id, tier, version, model_sha, replicate_of, run_id):
            reason = f"budget of {tier} v{version} is spent"
            self.ledger.record_refusal(
                ticket_id, tier, version, model_sha, Verdict.BUDGET_EXHAUSTED.value, reason
            )
            return self._answer(ticket_id, tier, version, Verdict.BUDGET_EXHAUSTED, reason)
        return self._finish(ticket_id, tier, version, model_bytes, replicate_of, train_data, run_id, deadline)

    def _resume(
        self,
        known: QueryRow,
        model_bytes: bytes,
        model_sha: str,
        train_data: str | None,
        run_id: str | None,
        deadline: Deadline | None,
    ) -> Outcome:
        """Judge a PENDING ticket again, but only with the bytes it spent its query on."""
        if known.model_sha256 != model_sha:
            # Otherwise one spent query would buy a verdict for any number of models, and the
            # verdict would be filed under the first model's hash, the one promotion installs.
            reason = (
                f"ticket {known.ticket_id} is bound to the model first submitted under it (sha256 "
                f"{known.model_sha256[:12]}…); other bytes ({model_sha[:12]}…) are refused "
                "and the ticket is closed"
            )
            self.ledger.finish_query(
                known.ticket_id, Verdict.INVALID.value, reason, cache=False, best_sha256=self._best_sha()
            )
            self.ledger.queue_event(
                "gate.rebind_refused",
                {"ticket_id": known.ticket_id, "bound": known.model_sha256, "got": model_sha},
            )
            return self._answer(known.ticket_id, known.tier, known.version, Verdict.INVALID, reason)
        return self._finish(
            known.ticket_id,
            known.tier,
            known.version,
            model_bytes,
            known.replicate_of,
            train_data,
            run_id,
            deadline,
        )

    def _finish(
        self,
        ticket_id: str,
        tier: str,
        version: int,
        model_bytes: bytes,
        replicate_of: str | None,
        train_data: str | None,
        run_id: str | None,
        deadline: Deadline | None,
    ) -> Outcome:
        """Judge a reserved query and record its verdict, or the overrun when the answer already left."""
        best_sha, started = self._best_sha(), time.monotonic()
        try:
            verdict, reason, cacheable = self._judge(
                model_bytes, ticket_id, tier, version, replicate_of, train_data, run_id, deadline
            )
        except Exception as exc:  # an unforeseen failure is one more INVALID, never a distinguishable error
            log.exception("gate: internal error judging %s", ticket_id)
            verdict, reason, cacheable = (
                Verdict.INVALID,
                f"internal error: {type(exc).__name__}: {exc}",
                False,
            )
            self.ledger.queue_event("gate.internal_error", {"ticket_id": ticket_id, "reason": reason})
        if deadline is not None and not deadline.claim("verdict"):
            took = time.monotonic() - started
            reason = (
                f"overrun: the verdict took {took:.1f} s, past the fixed answer time, so the agent was "
                f"answered INVALID; the late verdict was {verdict.value} ({reason})"
            )
            self.ledger.queue_event(
                "gate.overrun",
                {
                    "ticket_id": ticket_id,
                    "tier": tier,
                    "tier_version": version,
                    "took_s": round(took, 3),
                    "late_verdict": verdict.value,
                },
            )
            verdict, cacheable = Verdict.INVALID, False
        self.ledger.finish_query(ticket_id, verdict.value, reason, cache=cacheable, best_sha256=best_sha)
        return self._answer(ticket_id, tier, version, verdict, reason)

    def _judge(
        self,
        model_bytes: bytes,
        ticket_id: str,
        tier: str,
        version: int,
        replicate_of: str | None,
        train_data: str | None,
        run_id: str | None,
        deadline: Deadline | None = None,
    ) -> tuple[Verdict, str, bool]:
        """(verdict, reason for people, whether the verdict may be cached for this model). Once the
        candidate has passed intake, ``deadline`` gets the answer time its scoring cost calls for."""
        try:
            rule = self.rule()
            if self.integrity_check is not None:
                self.integrity_check()
            self._check_preconditions(
                ticket_id, replicate_of, run_id, hashlib.sha256(model_bytes).hexdigest()
            )
            checked = inspect_bytes(model_bytes)
            if deadline is not None and self.answer_time is not None:
                deadline.extend(self.answer_time.for_costs(checked.cost, self._best_cost()))
            self._keep(checked)
            if train_data is not None:
                self._check_leakage(train_data, ticket_id, run_id)
        except (IntakeError, PolicyError, GateError) as exc:
            # a rule's refusal is a property of the bytes; a child that could not answer is not
            deterministic = isinstance(exc, IntakeError) and not isinstance(exc, IntakeUnavailable)
            return Verdict.INVALID, str(exc), deterministic
        cached = self.ledger.cached_verdict(checked.sha256, tier, version, self._best_sha())
        if cached is not None:
            return Verdict(cached[0]), f"cached: {cached[1]}", False
        try:
            decision = self.compare(checked, tier, version, rule)
        except ScoringError as exc:
            if exc.resource:  # the machine failed, not the model: answered, never cached
                return Verdict.INVALID, f"scoring failed for lack of resources (not cached): {exc}", False
            return Verdict.INVALID, f"scoring failed: {exc}", True
        except (IntakeError, DataError) as exc:
            return Verdict.INVALID, f"scoring failed: {exc}", True
        return (Verdict.WIN if decision.win else Verdict.NO_WIN), decision.reason, True

    def _best_sha(self) -> str:
        best = self.ledger.current_best()
        return "" if best is None else str(best["model_sha256"])

    def _best_cost(self) -> int | None:
        """The current best's scoring cost (counted at its intake once per model; None: none)."""
        best = self.ledger.current_best()
        if best is None:
            return None
        sha = str(best["model_sha256"])
        if sha not in self._cost_cache:
            try:
                self._cost_cache[sha] = inspect_model(Path(best["model_path"])).cost
            except IntakeError:  # counted as the reference pair (AnswerTime.for_costs); scoring will say
                self._cost_cache[sha] = None
        return self._cost_cache[sha]

    def _keep(self, checked: CheckedModel) -> None:
        target = self.vault / MODELS_DIR / f"{checked.sha256}.onnx"
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(target, checked.data)

    def promote(self, ticket_id: str) -> str:
        """Make ticket's model the best: only after its confirm-a WIN and a confirm-b replicate WIN,
        both reached against the current best, the replicate with other (retrained) model bytes."""
        query = self.ledger.find_query(ticket_id)
        if query is None or query.tier != Tier.CONFIRM_A.value or query.verdict != Verdict.WIN.value:
            raise GateError(f"ticket {ticket_id!r} has no recorded WIN on confirm-a; promotion refused")
        best_sha = self._best_sha()
        if best_sha == query.model_sha256:
            return query.model_sha256  # already the best: a repeated promotion answers the same
        if query.best_sha256 != best_sha:
            raise GateError(
                f"ticket {ticket_id!r} won confirm-a against the best {str(query.best_sha256)[:12]}…, but "
                f"the best is now {best_sha[:12]}…; promotion refused (submit it again against the "
                "current best)"
            )
        replicates = [
            q
            for q in self.ledger.queries()
            if q.replicate_of == ticket_id
            and q.tier == Tier.CONFIRM_B.value
            and q.verdict == Verdict.WIN.value
        ]
        retrained = [q for q in replicates if q.model_sha256 != query.model_sha256]
        if not retrained:
            raise GateError(
                f"ticket {ticket_id!r} has no replicate WIN on confirm-b with retrained model bytes "
                f"({len(replicates)} replicate WIN(s) of identical bytes); promotion refused"
            )
        current = [q for q in retrained if q.best_sha256 == best_sha]
        if not current:
            raise GateError(
                f"the replicate WINs of {ticket_id!r} were against an earlier best, not "
                f"{best_sha[:12]}…; promotion refused"
            )
        reason = f"{ticket_id} won confirm-a; replicate {current[0].ticket_id} won confirm-b"
        return self.set_best(self.vault / MODELS_DIR / f"{query.model_sha256}.onnx", "promotion", reason)

    def set_reference(self, model_bytes: bytes, reason: str) -> str:
        """Make a model the best as an A/A reference: a move of its own kind, never a promotion."""
        checked = inspect_bytes(model_bytes)
        self._keep(checked)
        return self.set_best(self.vault / MODELS_DIR / f"{checked.sha256}.onnx", "reference", reason)

    def _check_preconditions(
        self, ticket_id: str, replicate_of: str | None, run_id: str | None, model_sha: str
    ) -> None:
        if ticket_id.startswith("bad-ticket-"):
            raise GateError("ticket id does not match the ticket id pattern")
        if run_id is not None and any(q.run_id == run_id for q in self.ledger.quarantines()):
            raise GateError(f"run {run_id} is quarantined for a person")
        if replicate_of is not None:
            original = self.ledger.find_query(replicate_of)
            if (
                original is None
                or original.tier != Tier.CONFIRM_A.value
                or original.verdict != Verdict.WIN.value
            ):
                raise GateError(f"replicate_of {replicate_of!r} is not a recorded WIN on confirm-a")
            if original.model_sha256 == model_sha:
                raise GateError(
                    f"the replicate of {replicate_of!r} has the original's model bytes; a replicate is "
                    "retrained with a new host-chosen seed"
                )

    def _check_leakage(self, train_data: str, ticket_id: str, run_id: str | None) -> None:
        try:
            check_training_data(self.home_root, self.vault, train_data)
        except LeakError as exc:
            self.ledger.quarantine(run_id, ticket_id, str(exc))
            self.ledger.queue_event(
                "gate.quarantine", {"run_id": run_id, "ticket_id": ticket_id, "reason": str(exc)}
            )
            raise GateError(f"leak: {exc}; run quarantined, a person must review and rotate") from None

    def scoring(self, tier: str, version: int, *, pin_it: bool = True) -> Scoring:
        """The provider a tier version is scored with, pinned at its first score (``gate._provider``)."""
        return pinned_scoring(tiers.tier_dir(self.vault, tier, version), pin_it=pin_it)

    def compare(
        self, checked: CheckedModel, tier: str, version: int, rule: WinRule, best: CheckedModel | None = None
    ) -> Any:
        """Score the current best and the candidate confined on a tier version and apply the rule.
        ``best``: score that model as the best, afresh (the start's reference verdict,
        ``gate.calibrate``), instead of the current best, whose probabilities are cached."""
        current = self.ledger.current_best()
        if best is None and current is None:
            raise ScoringError("no current best is registered; `segfactory init` registers the baseline")
        _, split = tiers.read_tier(self.vault, tier, version)
        images, masks = np.asarray(split.images), np.asarray(split.masks)
        views = perturbed_views(images, masks, rule)
        stacked = np.concatenate([images, *(v[0] for v in views)])  # one confined pass: clean, then each view
        scoring = self.scoring(tier, version)
        if best is not None:
            best_prob = score_checked(best, stacked, scoring=scoring)[:, 0]
        else:
            assert current is not None
            best_prob = self._best_prob(current, tier, version, stacked, scoring)
        cand_prob = score_checked(checked, stacked, scoring=scoring)[:, 0]
        n = len(images)
        perturbed = [
            (best_prob[(i + 1) * n : (i + 2) * n], cand_prob[(i + 1) * n : (i + 2) * n], view_masks)
            for i, (_, view_masks) in enumerate(views)
        ]
        return decide(best_prob[:n], cand_prob[:n], masks, rule, perturbed)

    def _best_prob(
        self, best: BestRow, tier: str, version: int, images: np.ndarray, scoring: Scoring
    ) -> np.ndarray:
        """The best's probabilities on a tier version's clean and perturbed images (cached: the rule
        and the version's provider are pinned)."""
        key = (str(best["model_sha256"]), tier, version)
        if key not in self._prob_cache:
            checked = inspect_model(Path(best["model_path"]))
            self._prob_cache[key] = score_checked(checked, images, scoring=scoring)[:, 0]
        return self._prob_cache[key]

    def _answer(
        self, ticket_id: str, tier: str, version: int, verdict: Verdict, reason: str, replay: bool = False
    ) -> Outcome:
        try:
            left = self.ledger.budget_left(tier, version)
        except LedgerError:  # a tier version the ledger never registered has no budget
            left = 0
        answer = CoarseVerdict(ticket_id=ticket_id, tier=tier, verdict=verdict, queries_left=left)
        self.ledger.queue_event(
            "gate.verdict",
            {
                "ticket_id": ticket_id,
                "tier": tier,
                "tier_version": version,
                "verdict": verdict.value,
                "reason": reason,
                "replay": replay,
                "queries_left": left,
            },
        )
        log.info("gate verdict %s %s %s", ticket_id, tier, verdict.value)
        return Outcome(answer, reason)

    # -- status -------------------------------------------------------------------------------
    def status(self) -> GateStatus:
        """What people and the orchestrator may know: hashes, versions, budgets, quarantines."""
        pinned = self.ledger.get_meta(META_WIN_RULE)
        try:
            self.rule()
            rule_ok = True
        except PolicyError:
            rule_ok = False
        return GateStatus(
            win_rule_sha256=pinned,
            win_rule_ok=rule_ok,
            pinned_code_sha256=self.ledger.get_meta("pinned_code_sha256"),
            pinned_code_ok=self._pinned_ok(),
            tiers=self.ledger.tier_versions(),
            quarantine=self.ledger.quarantines(),
            current_best=None if (best := self.ledger.current_best()) is None else best["model_sha256"],
            answer_time=self.answer_time,
        )

    def _pinned_ok(self) -> bool | None:
        if self.integrity_check is None:
            return None
        try:
            self.integrity_check()
        except GateError:
            return False
        return True

    def rotate(self, tier: str, build: Any) -> int:
        """Build a fresh version with ``build(vault, tier)`` (secret seeds) and give it a budget."""
        version = int(build(self.vault, tier))
        rule, _ = load_win_rule(self.win_rule_path)
        self.ledger.add_tier_version(tier, version, rule.budgets.get(tier, 0))  # type: ignore[call-overload]
        self.ledger.queue_event("gate.rotate", {"tier": tier, "version": version})
        self.pin_providers()
        return version
