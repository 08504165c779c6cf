"""Audit-log review for people: filters, the chain banner, protected reads, blobs made inert.

Reads ``<home>/audit`` directly (the console is host-side and for people only; agents never
reach it). Filters are those of ``audit show``; the findings are those of ``audit check``; the
banner is ``audit verify`` against the anchor the console was given (none: said so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from audit import BlobStore, VerifyJson, check_records, iter_records, load_policy, select, verify_log
from audit.reader import LOG_NAME
from audit.show import parse_time
from console._safe import inert, pretty
from segfactory.errors import DataError
from segfactory.home import Home
from segfactory.records import Anchor, AuditRecord

MAX_ROWS = 500  # records shown per page; past this the page says how many matched in all
MAX_BLOB_BYTES = 256 * 1024  # bytes of a blob shown; past this the page says how many were left out


@dataclass
class AuditFilters:
    run: str | None = None
    actor: str | None = None
    event: str | None = None
    since: str | None = None
    until: str | None = None

    @classmethod
    def from_query(cls, query: dict[str, str]) -> AuditFilters:
        return cls(
            **{k: (query.get(k) or "").strip() or None for k in ("run", "actor", "event", "since", "until")}
        )


@dataclass
class Row:
    record: AuditRecord
    when: str
    payload: str
    protected: list[str] = field(default_factory=list)  # protected paths found in this record


@dataclass
class AuditPage:
    rows: list[Row]
    matched: int
    banner: VerifyJson
    findings: int
    actors: list[str]
    events: list[str]
    runs: list[str]


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def chain_banner(home: Home, anchor: Anchor | None, anchor_checked: bool) -> VerifyJson:
    """``audit verify`` as a banner: ok, records, problems, warnings."""
    report = verify_log(home.audit, anchor, anchor_checked=anchor_checked)
    return report.to_json()


def audit_page(home: Home, filters: AuditFilters, banner: VerifyJson) -> AuditPage:
    """The filtered records (newest first), each with its protected-read findings."""
    records = list(iter_records(home.audit / LOG_NAME))
    since = parse_time(filters.since) if filters.since else None
    until = parse_time(filters.until) if filters.until else None
    chosen = list(
        select(records, run=filters.run, actor=filters.actor, event=filters.event, since=since, until=until)
    )
    found: dict[int, list[str]] = {}
    for finding in check_records(chosen, load_policy(), home.root):
        found.setdefault(finding.seq, []).append(finding.path)
    rows = [Row(r, _when(r.ts), pretty(r.payload), found.get(r.seq, [])) for r in reversed(chosen)][:MAX_ROWS]
    return AuditPage(
        rows=rows,
        matched=len(chosen),
        banner=banner,
        findings=len(found),
        actors=sorted({r.actor.value for r in records}),
        events=sorted({r.event for r in records}),
        runs=sorted({r.run_id for r in records if r.run_id}),
    )


def blob_text(home: Home, ref: str) -> tuple[str, int, str | None]:
    """A blob as inert text: (text of its first MAX_BLOB_BYTES, bytes left out, problem or None)."""
    store = BlobStore(home.audit / "blobs")
    try:
        data = store.get(ref)
    except DataError as exc:
        return "", 0, str(exc)
    return (
        inert(data[:MAX_BLOB_BYTES].decode("utf-8", errors="replace")),
        max(0, len(data) - MAX_BLOB_BYTES),
        None,
    )
