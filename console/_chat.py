"""Reading a person's chat reply to a data request, by rules.

The rules take only clear replies: a reply that starts with an approving word ("approve",
"yes", "ok", "go ahead"), optionally with a count and a scope ("approve 200, thin voids only"),
or with a denying word ("deny", "reject", "no"), optionally with a reason ("deny: too
expensive"). A question gets the request's facts and a prompt to decide. Anything else, or a
reply that mixes approving and denying words, is *unclear*: the console asks again and never
guesses. Whatever is read is confirmed back before anything is decided.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

MAX_REPLY_CHARS = 2000  # past this a reply is refused (413) and nothing is read from it

_APPROVE = r"approve[ds]?|yes|ok|okay|accept(?:ed)?|go ahead|lgtm"
_DENY = r"den(?:y|ied)|reject(?:ed)?|no|decline[ds]?|refuse[ds]?"
_FLAGS = re.S | re.I
_LEAD_APPROVE = re.compile(rf"^(?:{_APPROVE})\b[\s,:;.!-]*(?P<rest>.*)$", _FLAGS)
_LEAD_DENY = re.compile(rf"^(?:{_DENY})\b[\s,:;.!-]*(?P<rest>.*)$", _FLAGS)
_ANY_APPROVE = re.compile(rf"\b(?:{_APPROVE})\b", _FLAGS)
_ANY_DENY = re.compile(rf"\b(?:{_DENY}|not|don'?t|never|cancel|wait|maybe|unsure)\b", _FLAGS)
_COUNT = re.compile(r"^(?P<n>\d{1,7})\s*(?:images?|samples?|pictures?)?\b[\s,:;.-]*(?P<rest>.*)$", _FLAGS)
_QUESTION = re.compile(
    r"^(?:what|why|how|which|who|when|where|is|are|does|do|can|could|will|would)\b", _FLAGS
)


class Reading(BaseModel):
    """What the console understood; ``kind`` approve/deny needs the person's confirmation."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["approve", "deny", "question", "unclear"]
    count: int | None = None  # images approved, when the person named a number
    scope: str = ""  # the person's restriction ("thin voids only")
    reason: str = ""  # why a request was denied
    why_unclear: str = ""
    by: Literal["rules", "llm"] = "rules"  # which interpreter read it

    def summary(self) -> str:
        """The reading in words, as the console confirms it back."""
        if self.kind == "approve":
            parts = ["APPROVE"]
            if self.count is not None:
                parts.append(f"for {self.count} images")
            if self.scope:
                parts.append(f"limited to: {self.scope}")
            return ", ".join(parts)
        if self.kind == "deny":
            return f"DENY, reason: {self.reason}" if self.reason else "DENY (no reason given)"
        return self.kind.upper()

    def decision_reason(self) -> str:
        """The reason stored with the decision (count and scope included, so nothing is lost)."""
        if self.kind == "deny":
            return self.reason
        bits = ([f"count={self.count}"] if self.count is not None else []) + (
            [f"scope={self.scope}"] if self.scope else []
        )
        return "; ".join(bits)


def _clean(text: str) -> str:
    return text.strip().strip(".!").strip()


def interpret(text: str) -> Reading:
    """The rule-based reading of one reply (the text is already within MAX_REPLY_CHARS)."""
    said = " ".join(text.split())
    if not said:
        return Reading(kind="unclear", why_unclear="the reply was empty")
    approve, deny = _LEAD_APPROVE.match(said), _LEAD_DENY.match(said)
    if approve and not _ANY_DENY.search(approve.group("rest")) and "?" not in said:
        return _approval(_clean(approve.group("rest")))
    if deny and not _ANY_APPROVE.search(deny.group("rest")) and "?" not in said:
        return Reading(kind="deny", reason=_clean(deny.group("rest")))
    if (said.endswith("?") or _QUESTION.match(said)) and not (
        _ANY_APPROVE.search(said) or _LEAD_DENY.match(said)
    ):
        return Reading(kind="question")
    return Reading(kind="unclear", why_unclear=_why(said, bool(approve or _ANY_APPROVE.search(said))))


def _approval(rest: str) -> Reading:
    if not rest:
        return Reading(kind="approve")
    counted = _COUNT.match(rest)
    if counted:
        n, scope = int(counted.group("n")), _clean(counted.group("rest"))
        if n == 0:
            return Reading(kind="unclear", why_unclear="approving 0 images is not an approval")
        if re.search(r"\d|\bor\b", scope, re.I):
            return Reading(kind="unclear", why_unclear=f"I could not tell how many images {rest!r} approves")
        return Reading(kind="approve", count=n, scope=scope)
    if re.search(r"\d", rest):
        return Reading(kind="unclear", why_unclear=f"I could not tell which number in {rest!r} is the count")
    return Reading(kind="approve", scope=rest)


def _why(said: str, mentions_approve: bool) -> str:
    if mentions_approve and _ANY_DENY.search(said):
        return "the reply has both approving and denying or hedging words"
    if "?" in said:
        return "the reply is a question that also reads like a decision"
    return "the reply does not start with approve or deny"
