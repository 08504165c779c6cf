"""Host-side realisation: each recommendation as a concrete change of the incumbent, or a reason.

The catalogue (``agents.actions``) says what each rule does; this module does the parts that
need the home: a curation plan applied as a new dataset version, a reviewed label version found,
a top-up spec carried over. A ticket that names a dataset version (``change["dataset"]``) trains
on it; :func:`named_dataset` checks that it is approved and that its dev split is the
incumbent's, so its dev score compares like with like.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from agents.actions import Catalogue, NotExecutable, Realised, realise_config, rule_of
from agents.approvals import APPROVED_REQUEST_KEY, Grant, data_ticket_id, grant_keys, read_grant
from agents.incumbent import Incumbent
from agents.run_setup import RunSetup
from analysis.curation import Plan, applied_plans, apply_plan, curate_images
from analysis.effects import parse_slice
from analysis.errortypes import ErrorType
from analysis.units import defect_units
from segfactory.errors import DataError, UsageError
from segfactory.files import write_atomic
from segfactory.records import Recommendation, Ticket, TicketKind, canonical_json
from synthetic.extend import append_images
from synthetic.splits import Split, read_split
from synthetic.versions import DatasetVersion, approved, create_version, resolve

REQUEST_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")  # a request id: one plain path component
REVIEWED_VERSIONS_NOTE = (
    "a reviewed version: same train images and dev split as its parent, other train masks"
)


def realise_all(
    setup: RunSetup,
    catalogue: Catalogue,
    recs: tuple[Recommendation, ...],
    incumbent: Incumbent,
    tried: set[str],
) -> tuple[list[Recommendation], list[NotExecutable]]:
    """Concrete recommendations (change, kind and epochs from the catalogue) and the refused ones."""
    realised, refused = [], []
    for rec in recs:
        got = realise(setup, catalogue, rec, incumbent, tried)
        if isinstance(got, NotExecutable):
            refused.append(got)
            continue
        change = dict(got.change)
        evidence = {**rec.evidence, "catalogue_action": got.rule, "catalogue_option": got.option}
        if got.epochs is not None:
            evidence["epochs"] = got.epochs
        entry = catalogue.actions[got.rule]
        continues = "incumbent" if entry.continues and incumbent.checkpoint is not None else None
        if continues:  # a fine-tune of the incumbent's weights: a share of a fresh training's budget
            evidence["budget_share"] = entry.budget_share
        update = {"kind": got.kind, "change": change, "evidence": evidence, "action": describe(got)}
        realised.append(rec.model_copy(update={**update, "continues": continues}))
    return realised, refused


MAX_DESCRIBED_CHARS = 160  # the change as a ticket's hypothesis names it; past this: cut with "..."


def describe(got: Realised) -> str:
    """``robustness (config: augment.noise_std={'low': 0.0, 'high': 0.04}, augment.p=0.7)``."""
    parts = ", ".join(f"{k}={v}" for k, v in got.change.items() if k != "synthetic")
    spec = got.change.get("synthetic")
    if isinstance(spec, dict):  # a top-up's change: {"synthetic": {"slice": ..., "n": ...}}
        parts = f"+{spec.get('n')} synthetic images of {spec.get('slice')}"
    text = f"{got.rule} ({got.do}: {parts})" if parts else f"{got.rule} ({got.do})"
    return text if len(text) <= MAX_DESCRIBED_CHARS else text[: MAX_DESCRIBED_CHARS - 3] + "..."


def realise(
    setup: RunSetup, catalogue: Catalogue, rec: Recommendation, incumbent: Incumbent, tried: set[str]
) -> Realised | NotExecutable:
    rule = rule_of(rec)
    entry = catalogue.actions.get(rule)
    if entry is None:
        return NotExecutable(
            rule=rule, recommendation_id=rec.id, reason=f"no catalogue action for rule {rule!r}"
        )
    if entry.do == "config":
        return realise_config(rule, entry, rec, incumbent.config, tried, max_epochs=setup.max_epochs)
    if entry.do == "topup":
        spec = rec.change.get("synthetic")
        if not isinstance(spec, dict) or not spec.get("slice"):
            return NotExecutable(
                rule=rule, recommendation_id=rec.id, reason="the recommendation names no slice"
            )
        return _unless_tried(
            Realised(
                rule=rule,
                recommendation_id=rec.id,
                do="topup",
                kind=TicketKind.DATA,
                change={"synthetic": dict(spec)},
            ),
            tried,
        )
    if entry.do == "data_request":
        change = {k: v for k, v in rec.change.items() if k != "action"}
        return Realised(
            rule=rule,
            recommendation_id=rec.id,
            do="data_request",
            kind=TicketKind.DATA_REQUEST,
            change=change,
        )
    if entry.do == "curation":
        return _curation(setup, rule, rec, incumbent, tried)
    if entry.do == "label_review":
        return _label_review(setup, rule, rec, incumbent, tried)
    return NotExecutable(
        rule=rule,
        recommendation_id=rec.id,
        reason="the analysis found nothing to change (leave it): no ticket",
    )


def _unless_tried(got: Realised, tried: set[str]) -> Realised | NotExecutable:
    if canonical_json(got.change).decode() in tried:
        return NotExecutable(
            rule=got.rule,
            recommendation_id=got.recommendation_id,
            reason=f"{got.change} was already tried on this incumbent",
        )
    return got


def _curation(
    setup: RunSetup, rule: str, rec: Recommendation, incumbent: Incumbent, tried: set[str]
) -> Realised | NotExecutable:
    """The version ``curate apply`` makes from the incumbent data's image plan (train items only:
    dev stays the incumbent's, so the dev score compares like with like)."""

    home_root = setup.home.root
    base = resolve(home_root, incumbent.dataset)
    _, plan = curate_images(
        read_split(base.train, mmap=True),
        read_split(base.dev, mmap=True),
        dataset=base.ref,
        content_hash=base.content_hash,
    )
    items = [it for it in plan.items if it.split == "train"]
    if not items:
        return NotExecutable(
            rule=rule,
            recommendation_id=rec.id,
            reason=f"the curation plan for {base.ref} is empty (no duplicate, overlapping or "
            "unusable train image): nothing to curate",
        )
    plan = Plan(kind=plan.kind, dataset=plan.dataset, content_hash=plan.content_hash, items=items)
    made = applied_plans(home_root, base.name).get(plan.plan_hash)
    version = resolve(home_root, made) if made else apply_plan(home_root, plan)[0]
    if not version.approved:
        return NotExecutable(
            rule=rule,
            recommendation_id=rec.id,
            reason=f"the curated version {version.ref} changes labels and waits for approval "
            "(`segfactory approvals`)",
        )
    return _unless_tried(
        Realised(
            rule=rule,
            recommendation_id=rec.id,
            do="curation",
            kind=TicketKind.CURATION,
            change={
                "dataset": version.ref,
                "curation_plan": plan.plan_hash,
                "removed_or_oversampled": len(items),
            },
        ),
        tried,
    )


def _label_review(
    setup: RunSetup, rule: str, rec: Recommendation, incumbent: Incumbent, tried: set[str]
) -> Realised | NotExecutable:
    """Train on the reviewed labels once a person has made them; until then, say that it waits."""
    reviewed = reviewed_versions(setup.home.root, incumbent.dataset)
    if not reviewed:
        setup.audit_event("label_review_waiting", {"recommendation": rec.id, "dataset": incumbent.dataset})
        return NotExecutable(
            rule=rule,
            recommendation_id=rec.id,
            reason=f"waits for a reviewed version of {incumbent.dataset}'s train labels "
            "(review them with `segfactory curate defects` and the console, then apply "
            "and approve the plan); the loop goes on meanwhile",
        )
    return _unless_tried(
        Realised(
            rule=rule,
            recommendation_id=rec.id,
            do="label_review",
            kind=TicketKind.CURATION,
            change={"dataset": reviewed[-1], "label_review": True},
        ),
        tried,
    )


def reviewed_versions(home_root: Path, parent_ref: str) -> list[str]:
    """Approved versions whose parent is ``parent_ref``, with its train images and dev split, other masks."""

    parent = resolve(home_root, parent_ref)
    out = []
    for version in approved(home_root):
        if version.parent != parent.content_hash or version.name != parent.name:
            continue
        if version.split_hashes.get("dev") != parent.split_hashes.get("dev"):
            continue
        if _image_hashes(version.train) == _image_hashes(parent.train) and version.split_hashes.get(
            "train"
        ) != parent.split_hashes.get("train"):
            out.append(version.ref)
    return out


def _image_hashes(split: Path) -> list[str]:
    rows = (split / "images.jsonl").read_text().splitlines()
    return [json.loads(r).get("sha256", "") for r in rows if r.strip()]


def named_dataset(
    setup: RunSetup, ticket: Ticket, base: DatasetVersion, base_images: int | None = None
) -> DatasetVersion | None:
    """The version a ticket names in ``change["dataset"]`` (curation, reviewed labels, approved
    data), checked: approved, and with the incumbent's dev split. None when it names none.
    ``base_images``: how many of the base's train images the parent trains on (None: all)."""

    ref = ticket.change.get("dataset")
    if grant_keys(ticket.change):  # refused by validation unless the approvals queue made the ticket
        return approved_data_version(setup, ticket, base, base_images)
    if not ref:
        return None
    version = resolve(setup.home.root, str(ref))
    if not version.approved:
        raise DataError(f"ticket {ticket.id} names dataset version {version.ref}, which is not approved")
    if version.split_hashes.get("dev") != base.split_hashes.get("dev"):
        raise DataError(
            f"ticket {ticket.id} names {version.ref}, whose dev split differs from the incumbent's "
            f"{base.ref}; a dev comparison needs the same dev images"
        )
    return version


def approved_data_version(
    setup: RunSetup, ticket: Ticket, base: DatasetVersion, base_images: int | None = None
) -> DatasetVersion:
    """The incumbent's train split (the first ``base_images``, those a capped config trains on;
    all when None) plus the approved images: at most the approved count, only those in the
    approved scope (a slice of the images' voids). Dev stays the incumbent's.

    What was approved comes from the approvals record (``agents.approvals.read_grant``), never
    from the ticket: its change only names the request, and the request must have been approved
    by a person and taken up by this run. Every path built from the request stays inside the
    home, or the ticket is refused before anything is written.
    """

    grant = _grant(setup, ticket)
    if not grant.data:
        raise UsageError(
            f"approved request {grant.request_id} names no dataset version to train on; import the "
            "data (`segfactory data import`) and approve the request with `--data NAME/vK`"
        )
    folder = _approved_folder(setup, grant.request_id)
    record = folder / "dataset.json"
    if record.is_file():
        return resolve(setup.home.root, json.loads(record.read_text())["dataset"])
    extra = read_split(resolve(setup.home.root, grant.data).train)
    train = read_split(base.train)
    if extra.images.shape[1:] != train.images.shape[1:]:
        raise DataError(
            f"approved data {grant.data} has images of {extra.images.shape[1:]}, the "
            f"incumbent's {base.ref} of {train.images.shape[1:]}; import it at that size"
        )
    keep = _granted_images(extra, grant)
    position = {str(extra.image_meta[k]["id"]): n for n, k in enumerate(keep)}
    metas = [
        {**extra.image_meta[k], "source_id": extra.image_meta[k]["id"], "source": grant.data} for k in keep
    ]
    defects = [
        {**d, "image_id": position[str(d["image_id"])]}
        for d in extra.defects
        if str(d["image_id"]) in position
    ]
    split = append_images(
        train,
        np.asarray(extra.images)[keep],
        np.asarray(extra.masks)[keep],
        metas,
        defects,
        {
            "approved_request": grant.request_id,
            "approved_data": grant.data,
            "approved_count": len(keep),
            "approved_scope": grant.scope,
            "parent": base.content_hash,
        },
        folder / "train",
        base_images,
    )
    version = create_version(
        setup.home.root, base.name, {"train": split, "dev": None}, parent=base.ref, approve_it=True
    )
    write_atomic(record, json.dumps({"dataset": version.ref, "images_added": len(keep)}) + "\n")
    setup.audit_event(
        "approved_data_version",
        {
            "ticket_id": ticket.id,
            "request": grant.request_id,
            "dataset": version.ref,
            "images_added": len(keep),
            "scope": grant.scope,
        },
    )
    return version


def _granted_images(extra: Split, grant: Grant) -> list[int]:
    """Indices of the approved version's train images the grant lets in: those in its scope, at
    most its count."""
    keep = list(range(len(extra.image_meta)))
    if grant.scope:
        predicate = parse_slice(grant.scope)
        if predicate is None:
            raise UsageError(
                f"approved scope {grant.scope!r} of request {grant.request_id} is not a slice the "
                "factory can apply (e.g. shape=shrinkage, size<12); approve it again with such a "
                "scope, or none"
            )
        units = defect_units(extra.image_meta, extra.defects, [ErrorType.MISSED.value] * len(extra.defects))
        inside = {int(units.image[k]) for k in np.flatnonzero(predicate(units))}
        keep = [k for k in keep if k in inside]
    keep = keep[: grant.count or len(keep)]
    if not keep:
        raise DataError(f"approved data {grant.data} holds no image in scope {grant.scope!r}")
    return keep


def _grant(setup: RunSetup, ticket: Ticket) -> Grant:
    """The approvals record's grant for the request a data ticket names; DataError when no person
    approved it, when this is not that request's own data ticket, or another run took it up."""
    named = ticket.change.get(APPROVED_REQUEST_KEY)
    request = named if isinstance(named, str) else ""
    own = bool(request) and data_ticket_id(request) in (ticket.id, ticket.replicate_of)
    if ticket.kind is not TicketKind.DATA or grant_keys(ticket.change) != [APPROVED_REQUEST_KEY] or not own:
        raise DataError(
            f"ticket {ticket.id} carries {grant_keys(ticket.change)} naming request {named!r}, but it "
            "is not the data ticket the approvals queue made from that request; what an approval "
            "grants is read from the approvals record, never from a ticket"
        )
    grant = read_grant(setup.home.state_db, request)
    if grant is None or grant.status != "approved":
        state = "no such request" if grant is None else f"it is {grant.status}"
        raise DataError(
            f"ticket {ticket.id} names approved request {request!r}, but the approvals record in "
            f"{setup.home.state_db} holds no approval of it ({state}); a data ticket trains only "
            "on what a person approved (`segfactory approvals approve`)"
        )
    if grant.taken_by != setup.run_id:
        raise DataError(
            f"approved request {request} was taken up by run {grant.taken_by or '(none yet)'}, not by "
            f"run {setup.run_id}; its data ticket runs only in the run that took it"
        )
    return grant


def _approved_folder(setup: RunSetup, request: str) -> Path:
    """``runs/<run>/approved/<request>/``, refused unless it lies inside the home's runs folder."""
    runs = Path(os.path.realpath(setup.home.runs))
    folder = Path(os.path.realpath(setup.layout.approved_dir(request)))
    if not REQUEST_ID.match(request) or not folder.is_relative_to(runs):
        raise DataError(
            f"approved request id {request!r} would place its data at {folder}, outside the home's "
            f"runs folder {runs}; refused"
        )
    return folder


__all__ = [
    "approved_data_version",
    "named_dataset",
    "realise",
    "realise_all",
    "reviewed_versions",
]
