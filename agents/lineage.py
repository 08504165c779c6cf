"""The first room of a ticket's route: what it builds on and what it would train.

``Lineage`` here is the planner: the gate's current best and its host copy, the incumbent (the
best's config, dataset version and code), a ticket's parent (the incumbent, or for a replicate
what its original built on), the dataset version it trains on (a named version, or a targeted
top-up built here) and the lineage row with its fingerprint. A ticket whose fingerprint equals
its parent's is refused before it trains (``agents.incumbent.same_as_parent``).

Everything is computed on the host from the home's own records (``segfactory.layout``); the
ticket's change is the only thing the proposer wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from pydantic import JsonValue

from agents import _realise
from agents._data_tickets import materialise, topup_spec
from agents.incumbent import Incumbent, fingerprint, repeat_kind, same_as_parent
from agents.run_setup import RunSetup
from runner import TicketOutcome, TicketStatus, code_files, ticket_config
from segfactory.errors import DataError, GateError, SegfactoryError, UsageError
from segfactory.layout import Lineage, Promotion
from segfactory.records import INCUMBENT, InitFrom, MemberModel, Ticket, TicketKind
from synthetic.splits import appended_images
from synthetic.versions import DatasetVersion, resolve
from vision.config import parse_config


class LineagePlanner:
    """Plans tickets against the current best. Reads the home's ledgers; writes the lineage row
    (``start``) and a data ticket's top-up version (``dataset_for``)."""

    def __init__(self, setup: RunSetup) -> None:
        self.setup = setup

    # -- the best and the incumbent -----------------------------------------------------------
    def best_model(self) -> tuple[str, Path]:
        """The gate's current best (its sha256) and the host's copy of it."""
        sha = self.setup.gate.status().current_best
        if not sha:
            raise GateError("the gate has no current best; `segfactory init` registers the baseline")
        copy = self.setup.runs.host_copy(sha)
        if copy is None:
            raise DataError(
                f"the current best {sha[:12]}… has no host copy (baseline or promotions.jsonl); "
                "re-run `segfactory init` on a fresh home or restore runs/"
            )
        return sha, copy

    def incumbent(self) -> Incumbent:
        """What the next ticket patches: the current best's config, data and code.

        The classical baseline (or a best promoted before lineage was recorded) has no training
        config of its own: tickets then patch the run's base config on the run's dataset.
        """
        sha, path = self.best_model()
        for row in reversed(self.setup.runs.promotions()):
            if row.sha256 == sha and row.config:
                return _incumbent_of(row, str(path))
        return Incumbent(
            sha256=sha,
            model=str(path),
            config=self.base_config(),
            dataset=self.setup.dataset.ref,
            dataset_hash=self.setup.dataset.content_hash,
        )

    def base_config(self) -> dict[str, JsonValue]:
        """The run's base training config, validated and with every default filled in (as a
        ticket's patched config is), so that the two compare key by key."""
        data = yaml.safe_load(Path(self.setup.base_config).read_text())
        return parse_config(data, str(self.setup.base_config)).model_dump(mode="json")

    def lineage(self) -> dict[str, Lineage]:
        return self.setup.layout.lineage()

    def parent_of(self, ticket: Ticket) -> Incumbent:
        """What a ticket builds on: the ticket of this run it continues (a budget plan's rung, and
        that rung's replicate), else for a replicate what its original built on, else the incumbent."""
        if ticket.continues not in (None, INCUMBENT):
            return self.ticket_as_parent(str(ticket.continues))
        if ticket.replicate_of is not None:
            original = self.lineage().get(ticket.replicate_of)
            if original is not None:
                return self.incumbent_at(original)
        return self.incumbent()

    def incumbent_at(self, row: Lineage) -> Incumbent:
        """The incumbent a started ticket built on (the current one, or an earlier promotion)."""
        current = self.incumbent()
        if current.sha256 == row.parent_sha256:
            return current
        for promo in self.setup.runs.promotions():
            if promo.sha256 == row.parent_sha256 and promo.config:
                return _incumbent_of(promo, promo.model)
        return current

    def ticket_as_parent(self, ticket_id: str) -> Incumbent:
        """A DONE ticket of this run as what another builds on: its recipe, data, code and weights."""
        row = self.lineage().get(ticket_id)
        files = self.setup.layout.ticket(ticket_id)
        if row is None or not files.outcome.is_file():
            raise UsageError(
                f"ticket {ticket_id} did not run in run {self.setup.run_id}: nothing to continue"
            )
        outcome = TicketOutcome.model_validate_json(files.outcome.read_text())
        if outcome.status is not TicketStatus.DONE or outcome.evidence is None:
            raise UsageError(
                f"ticket {ticket_id} did not train ({outcome.status.value}): nothing to continue"
            )
        checkpoint = outcome.continuation() if outcome.evidence.checkpoint_sha256 else None
        return Incumbent(
            sha256=outcome.evidence.model_sha256,
            model=str(files.model),
            config=row.config,
            dataset=row.dataset,
            dataset_hash=row.dataset_hash,
            code=row.code,
            fingerprint=row.fingerprint,
            ticket_id=ticket_id,
            run_id=self.setup.run_id,
            checkpoint=checkpoint,
        )

    # -- what a ticket trains -----------------------------------------------------------------
    def plan(self, ticket: Ticket) -> Lineage:
        """What ``ticket`` would train: its patched config, data version, code, the weights it
        starts from, and the fingerprint of all four."""
        parent = self.parent_of(ticket)
        dataset = self.dataset_for(ticket, parent)
        members = self.members(ticket) if ticket.kind is TicketKind.PACKAGE else []
        config: dict[str, object]  # the config after patching (JSON), as the lineage row keeps it
        if members:  # trains nothing: its inputs are the members, the packaging spec and the data
            config = {**parent.config, "package": dict(ticket.change)}
        else:
            config = ticket_config(base_config_for(parent, dataset), runnable(ticket, parent))
        code = {**parent.code, **_code_files(ticket)}
        init_from = parent.weights() if ticket.continues is not None else None
        return Lineage(
            ticket_id=ticket.id,
            run_id=self.setup.run_id,
            parent_sha256=parent.sha256,
            parent_fingerprint=parent.fingerprint,
            config=config,
            dataset=dataset.ref,
            dataset_hash=dataset.content_hash,
            code=code,
            fingerprint=fingerprint(config, dataset.content_hash, code, init_from, members),
            repeat=repeat_kind(ticket),
            init_from=init_from,
            members=members,
        )

    def members(self, ticket: Ticket) -> list[MemberModel]:
        """A packaging ticket's members, as the budget plan's ledger names them (host-written; a
        proposer cannot name them): each a DONE ticket of this run, by its model's hash."""
        key = ticket.replicate_of or ticket.id
        rows = [r for r in self.setup.layout.plan_rows() if r.ticket_id == key and r.phase == "package"]
        if not rows or not rows[0].members:
            raise UsageError(f"packaging ticket {ticket.id} has no members in this run's budget plan ledger")
        out = []
        for member in rows[0].members:
            path = self.setup.layout.ticket(member).outcome
            if not path.is_file():
                raise UsageError(f"packaging ticket {ticket.id}: member {member} did not run in this run")
            out.append(TicketOutcome.model_validate_json(path.read_text()).member())
        return out

    def check(self, ticket: Ticket) -> list[str]:
        """Host-side refusals before a ticket is queued: one that would train its parent again."""
        if not self.setup.refuse_repeats or ticket.kind is TicketKind.DATA_REQUEST:
            return []
        try:
            reason = same_as_parent(self.plan(ticket))
        except SegfactoryError as exc:
            return [str(exc)]
        return [reason] if reason else []

    def start(self, ticket: Ticket) -> Lineage:
        """Plan the ticket, refuse a repeat of its parent, and record its lineage before it trains."""
        row = self.plan(ticket)
        reason = same_as_parent(row) if self.setup.refuse_repeats else None
        if reason:
            self.setup.audit_event(
                "ticket_refused_repeat",
                {"ticket_id": ticket.id, "fingerprint": row.fingerprint, "parent_sha256": row.parent_sha256},
            )
            raise UsageError(reason)
        existing = self.lineage().get(ticket.id)
        if existing is None:
            self.setup.layout.append_lineage(row)
        return existing or row

    def dataset_for(self, ticket: Ticket, parent: Incumbent | None = None) -> DatasetVersion:
        """The dataset version a ticket trains on: the incumbent's, a version the ticket names
        (curation, reviewed labels, approved data), or a targeted top-up of the incumbent's.

        The choice is recorded beside the run, so a replicate or a resumed run reuses it.
        """
        home = self.setup.home
        work = self.setup.layout.topup_dir(ticket.replicate_of or ticket.id)
        record = work / "dataset.json"
        if record.is_file():
            return resolve(home.root, json.loads(record.read_text())["dataset"])
        parent = parent or self.parent_of(ticket)
        base = resolve(home.root, parent.dataset)
        cap = parent.config.get("max_train_images")  # the parent's first N images; None: all of them
        trained = cap if isinstance(cap, int) else None  # a validated config's cap is an int or None
        named = _realise.named_dataset(self.setup, ticket, base, trained)
        if named is not None:
            return named
        if topup_spec(ticket) is None:
            return base
        version = materialise(home.root, base, ticket, work, trained)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"dataset": version.ref, "parent": base.ref}) + "\n")
        self.setup.audit_event(
            "topup_dataset_built",
            {"ticket_id": ticket.id, "dataset": version.ref, "parent": base.ref, "change": ticket.change},
        )
        self.setup.progress(
            f"  {ticket.id}: trains on {version.ref} (targeted synthetic top-up of {base.ref})"
        )
        return version


def runnable(ticket: Ticket, parent: Incumbent) -> Ticket:
    """The ticket as the runner executes it: on a code incumbent, its code overlay comes along
    (a packaging ticket trains nothing: no code to carry)."""
    if ticket.kind is TicketKind.PACKAGE:
        return ticket
    if ticket.kind is TicketKind.CODE:
        if not parent.code:
            return ticket
        files = {**parent.code, **_code_files(ticket)}
        return ticket.model_copy(update={"change": {**ticket.change, "files": files}})
    if not parent.code:
        return ticket
    patch = dict(ticket.change) if ticket.kind is TicketKind.CONFIG else dict(ticket.change.get("config", {}))
    return ticket.model_copy(
        update={"kind": TicketKind.CODE, "change": {"files": dict(parent.code), "config": patch}}
    )


def base_config_for(parent: Incumbent, dataset: DatasetVersion) -> dict[str, JsonValue]:
    """The config a ticket patches: its parent's, with the training cap lifted on a version that
    adds images to those the parent trained on (a top-up, approved data). Such a version holds
    the parent's first ``max_train_images`` images and then the added ones, which the cap would
    cut: the ticket would silently train its parent's images again (the runner refuses that)."""
    added, _ = appended_images(dataset.train)
    if added and parent.config.get("max_train_images") is not None:
        return {**parent.config, "max_train_images": None}
    return parent.config


def _incumbent_of(row: Promotion, model: str) -> Incumbent:
    checkpoint = (
        InitFrom(run_id=row.run_id, ticket_id=row.ticket_id, sha256=row.checkpoint_sha256)
        if row.checkpoint_sha256
        else None
    )
    return Incumbent(
        sha256=row.sha256,
        model=model,
        config=row.config or {},
        dataset=row.dataset or "",
        dataset_hash=row.dataset_hash,
        code=row.code,
        fingerprint=row.fingerprint,
        ticket_id=row.ticket_id,
        run_id=row.run_id,
        checkpoint=checkpoint,
    )


def _code_files(ticket: Ticket) -> dict[str, str]:
    return dict(code_files(ticket)) if ticket.kind is TicketKind.CODE else {}


__all__ = ["LineagePlanner", "base_config_for", "runnable"]
