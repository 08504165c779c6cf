"""The outcome's first lines: the best's sealed score and interval, against the classical detector
and against the best the run started from (``RunReport.headline``), or why there is none."""

from __future__ import annotations

from agents._report_records import RunReport, SealedScore
from agents._report_text import sha_text, text, ticket_text


def _who(r: RunReport, score: SealedScore) -> str:
    if score.ticket_id:
        return f"the model of ticket {ticket_text(r.run_id, score.ticket_id)} ({sha_text(score.sha256)})"
    return f"the classical detector ({sha_text(score.sha256)})"


def _interval(score: SealedScore) -> str:
    level = f"{1 - score.alpha:.0%} " if score.alpha is not None else ""
    return f"[{score.low:.3f}, {score.high:.3f}] ({level}interval)"


def _against(label: str, best: SealedScore, other: SealedScore) -> str:
    overlap = other.low <= best.high and best.low <= other.high
    return (
        f"- against {label}: {other.estimate:.3f} {_interval(other)}; difference "
        f"{best.estimate - other.estimate:+.3f}, the intervals {'overlap' if overlap else 'do not overlap'}"
    )


def headline_lines(r: RunReport) -> list[str]:
    h = r.headline
    if h.best is None:
        return [f"**The best has no sealed score in this report:** {text(h.missing or 'not scored')}."]
    b = h.best
    moved = (
        f"promoted in this run ({', '.join(ticket_text(r.run_id, t) for t in h.promoted)})"
        if h.promoted
        else "unchanged: nothing was promoted in this run"
    )
    images = f" on {b.n_images} images" if b.n_images else ""
    version = f" v{h.tier_version}" if h.tier_version is not None else ""
    lines = [
        f"**The best after this run is {_who(r, b)}, {moved}.** Its object F1 on the sealed tier{version} "
        f"is **{b.estimate:.3f}** {_interval(b)}{images}.",
        "",
    ]
    if h.classical is None:
        lines.append("- against the classical detector: not scored in this run's milestone")
    elif h.classical.sha256 != b.sha256:
        lines.append(_against(f"the classical detector ({sha_text(h.classical.sha256)})", b, h.classical))
    lines.append(_against_start(r, b))
    return lines


def _against_start(r: RunReport, b: SealedScore) -> str:
    h, label = r.headline, "the best when the run started"
    if h.start_sha256 is None:
        return f"- against {label}: not known (the run's first promotion names no parent)"
    if h.start_sha256 == b.sha256:
        return f"- against {label}: the same model"
    if h.start is None:
        return f"- against {label} ({sha_text(h.start_sha256)}): not scored on the sealed tier"
    if h.classical is not None and h.start.sha256 == h.classical.sha256:
        return f"- {label} was the classical detector"
    return _against(f"{label}, {_who(r, h.start)}", b, h.start)


__all__ = ["headline_lines"]
