"""Finding what a challenge re-derives: the ticket's folder, outcome, config, dataset and claim."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import JsonValue

from agents._config_values import as_float, as_int
from agents.challenge._records import Claim, ClaimKind
from agents.workspace import TreeRefused, Workspace, walk_files
from runner import HOST_CONFIG_FILE, TicketOutcome, TicketStatus, code_files
from segfactory.errors import DataError, UsageError
from segfactory.home import Home
from segfactory.records import Arm, Budget, Direction, ExpectedEffect, Ticket, TicketKind
from synthetic.versions import approved

TICKET_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
CLAIMS_DIR = "claims"  # runs/<run>/people/claims/<ticket>.json: claimed findings (Claim records)
PROMOTIONS_FILE = "promotions.jsonl"  # runs/: agents.services writes one line per promotion
DEV_COMPARISONS = "dev_comparisons.jsonl"  # people/: agents.services writes one line per ticket
TICKETS_FILE = "tickets.jsonl"  # people/: every ticket as it started
VISION_DIR = Path(__file__).resolve().parents[2] / "vision"
MAX_CODE_FILE_BYTES = 4 * 1024**2  # one training-code file hashed; past this: DataError, no hash


@dataclass(frozen=True)
class Located:
    """Everything the host recorded about the challenged ticket."""

    run_id: str
    ticket: Ticket
    folder: Path
    outcome: Any  # runner.TicketOutcome
    config: dict[str, JsonValue]  # the config the ticket trained with (the host's copy, not work/config.yaml)
    dataset: Any  # synthetic.versions.DatasetVersion
    claim: Claim


def locate(home: Home, ticket_id: str, run_id: str | None = None) -> Located:
    """The challenged ticket's records; a UsageError names what is missing and what to do."""
    if not TICKET_ID.match(ticket_id):
        raise UsageError(f"{ticket_id!r} is not a ticket id (letters, digits, '.', '_', '-'; at most 64)")
    if run_id is not None and not TICKET_ID.match(run_id):
        raise UsageError(f"{run_id!r} is not a run id (letters, digits, '.', '_', '-'; at most 64)")
    run_id, folder = _ticket_folder(home, ticket_id, run_id)
    outcome = _outcome(folder)
    people = home.people_dir(run_id)
    config = host_config(folder)
    ticket = _ticket(people, ticket_id, outcome, config)
    dataset = _dataset(home, outcome)
    claim = find_claim(home, run_id, ticket_id, outcome)
    return Located(run_id, ticket, folder, outcome, config, dataset, claim)


def _ticket_folder(home: Home, ticket_id: str, run_id: str | None) -> tuple[str, Path]:
    runs = (
        [run_id]
        if run_id
        else sorted(p.name for p in home.runs.iterdir() if p.is_dir())
        if home.runs.is_dir()
        else []
    )
    found = [(r, home.tickets_dir(r) / ticket_id) for r in runs if (home.tickets_dir(r) / ticket_id).is_dir()]
    if not found:
        where = f"run {run_id}" if run_id else "any run"
        raise UsageError(
            f"unknown ticket {ticket_id!r}: no folder for it in {where} under {home.runs}; "
            "see `segfactory report RUN` for the run's ticket ids"
        )
    if len(found) > 1:
        raise UsageError(
            f"ticket {ticket_id!r} exists in runs {', '.join(r for r, _ in found)}; pass --run R"
        )
    return found[0]


def _outcome(folder: Path) -> Any:
    path = folder / "outcome.json"
    if not path.is_file():
        raise UsageError(f"ticket {folder.name} has no outcome.json: it never finished, so it claims nothing")
    outcome = TicketOutcome.model_validate_json(path.read_text())
    if outcome.status is not TicketStatus.DONE or outcome.evidence is None:
        raise UsageError(
            f"ticket {folder.name} ended {outcome.status.value} ({outcome.reason}); there is no "
            "result to challenge"
        )
    return outcome


def host_config(folder: Path) -> dict[str, JsonValue]:
    """The config the ticket trained with, from the host's own copy (``runner.HOST_CONFIG_FILE``).

    Never ``work/config.yaml``: the sandboxed code that trained could rewrite it or swap it for a
    symlink, and its threshold or augmentation would then feed the host's re-derivation.
    """

    path = folder / HOST_CONFIG_FILE
    if path.is_symlink() or not path.is_file():
        raise DataError(
            f"{path} is missing: the host kept no copy of the config ticket {folder.name} trained "
            "with (it predates host copies, or was removed); it cannot be re-derived"
        )
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise DataError(f"{path} is not a mapping; cannot re-derive the ticket")
    return data


def _ticket(people: Path, ticket_id: str, outcome: Any, config: dict[str, JsonValue]) -> Ticket:
    """The ticket as recorded at start (people/tickets.jsonl), else rebuilt from its outcome."""
    for row in _jsonl(people / TICKETS_FILE):
        if row.get("id") == ticket_id:
            return Ticket.model_validate(row)
    device_s = max(float(outcome.device_seconds) * 2, 60.0)
    return Ticket(
        id=ticket_id,
        arm=Arm.AGENT,
        kind=TicketKind.CONFIG,
        hypothesis="(not recorded)",
        budget=Budget(device_seconds=device_s, epochs=as_int(config["epochs"])),
        expected_effect=ExpectedEffect(metric="object_f1", direction=Direction.UP, size=0.0),
        seed=as_int(config.get("seed", 0)),
    )


def _jsonl(path: Path) -> list[dict[str, JsonValue]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _dataset(home: Home, outcome: Any) -> Any:
    """The approved dataset version whose split hashes match the host-computed manifest."""

    manifest = outcome.evidence.manifest
    want = {s: manifest[s]["content_hash"] for s in ("train", "dev")}
    for version in approved(home.root):
        if all(version.split_hashes.get(s) == h for s, h in want.items()):
            return version
    raise DataError(
        f"no approved dataset version has the ticket's split hashes (train {want['train'][:12]}…); "
        "the data it trained on is gone or unapproved; approve or restore that version"
    )


def find_claim(home: Home, run_id: str, ticket_id: str, outcome: Any) -> Claim:
    """A recorded finding (people/claims/), else a promoted win, else a dev win."""
    people = home.people_dir(run_id)
    finding = people / CLAIMS_DIR / f"{ticket_id}.json"
    if finding.is_file():
        return Claim.model_validate_json(finding.read_text())
    rows = [r for r in _jsonl(people / DEV_COMPARISONS) if r.get("ticket_id") == ticket_id]
    promoted = [
        r
        for r in _jsonl(home.runs / PROMOTIONS_FILE)
        if r.get("ticket_id") == ticket_id and r.get("run_id") == run_id
    ]
    if not rows or not (promoted or rows[-1].get("dev_win")):
        raise UsageError(
            f"ticket {ticket_id} claims nothing: no finding under {people / CLAIMS_DIR}, no "
            "promotion and no dev win; only a claimed result can be challenged"
        )
    row = rows[-1]
    return Claim(
        kind=ClaimKind.WIN,
        ticket_id=ticket_id,
        run_id=run_id,
        source=PROMOTIONS_FILE if promoted else DEV_COMPARISONS,
        claimed=as_float(row["object_f1"]),
        reference=as_float(row["best_object_f1"]),
        promoted=bool(promoted),
        model_sha256=outcome.evidence.model_sha256,
    )


def write_claim(home: Home, claim: Claim) -> Path:
    """Record a claimed finding for a ticket (what a report writer or analysis does for a collapse)."""
    folder = home.people_dir(claim.run_id) / CLAIMS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{claim.ticket_id}.json"
    path.write_text(claim.model_dump_json(indent=2))
    return path


def code_sha256(ticket: Ticket) -> str:
    """sha256 over the training code the host put before the ticket's worker: its own ``vision/``
    package with the ticket's file edits (``change["files"]``, code tickets) laid over it.

    Nothing the sandbox left is read: its ``work/code`` is the ticket code's to rewrite, or to fill
    with a link to ``/dev/zero`` or a FIFO. The host's tree is read like a workspace (no link
    followed, regular files only, bounded depth and entries) and each file within
    MAX_CODE_FILE_BYTES; past a bound it is refused with a DataError.
    """
    tree = Workspace(VISION_DIR.parent, writable="")
    try:
        names = walk_files(tree, VISION_DIR.name, skip=("__pycache__",), skip_suffixes=(".pyc",))
    except TreeRefused as exc:
        raise DataError(f"the host's training code cannot be hashed: {exc}") from None
    files = {name: _source_bytes(tree, name) for name in names if name.endswith(".py")}
    files.update({name: text.encode() for name, text in code_files(ticket).items() if name.endswith(".py")})
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name])
    return digest.hexdigest()


def _source_bytes(tree: Workspace, name: str) -> bytes:
    data, truncated, size = tree.read_bytes(name, MAX_CODE_FILE_BYTES)
    if truncated:
        raise DataError(
            f"{tree.root / name} holds {size} bytes, over MAX_CODE_FILE_BYTES={MAX_CODE_FILE_BYTES}; "
            "the training code cannot be hashed"
        )
    return data
