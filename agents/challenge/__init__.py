"""Challenges: re-derive a claimed result with new host-chosen seeds, then uphold or retract it.

Host-side policy code, not the judge (docs/labelling.md, policies/challenge.yaml)::

    from agents.challenge import ChallengeSetup, challenge_ticket, retractions, auto_challenge_needed
    record = challenge_ticket(ChallengeSetup(home, audit_log, backend="bwrap"), "t0007", seeds=3)
    record.verdict            # Verdict.UPHELD | Verdict.RETRACTED, with record.reasons
    retractions(home)         # every retracted claim: for every later report and the console
    auto_challenge_needed(effect, low, high).needed   # the loop opens a challenge when True

A claim is a ticket's promoted win, its dev win, or a recorded finding
(``runs/<run>/people/claims/<ticket>.json``, see :func:`write_claim` and :func:`collapse_claim`).
"""

from agents.challenge._challenge import CHALLENGES_DIR, ChallengeSetup, challenge_ticket, retractions
from agents.challenge._demote import demote_if_best
from agents.challenge._locate import CLAIMS_DIR, find_claim, locate, write_claim
from agents.challenge._policy import ChallengePolicy, Trip, auto_challenge_needed, load_policy
from agents.challenge._records import (
    ChallengeRecord,
    Claim,
    ClaimKind,
    Condition,
    RangeCheck,
    Verdict,
    collapse_claim,
)
from agents.challenge._verdict import collapse_verdict, diff_conditions, range_check, win_verdict

__all__ = [
    "CHALLENGES_DIR",
    "CLAIMS_DIR",
    "ChallengePolicy",
    "ChallengeRecord",
    "ChallengeSetup",
    "Claim",
    "ClaimKind",
    "Condition",
    "RangeCheck",
    "Trip",
    "Verdict",
    "auto_challenge_needed",
    "challenge_ticket",
    "collapse_claim",
    "collapse_verdict",
    "demote_if_best",
    "diff_conditions",
    "find_claim",
    "load_policy",
    "locate",
    "range_check",
    "retractions",
    "win_verdict",
    "write_claim",
]
