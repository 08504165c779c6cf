"""Pure decision code: the condition diff, the range checks and the verdict with its reasons."""

from __future__ import annotations

from typing import Any

from agents.challenge._policy import ChallengePolicy
from agents.challenge._records import Claim, Condition, RangeCheck, Verdict
from vision.config import AugmentConfig
from vision.perturb import PERTURBATIONS, within_training_range

DIFF_FIELDS = ("seed", "dataset", "dataset_hash", "code_sha256", "config_sha256")


def diff_conditions(conditions: list[Condition]) -> dict[str, list[Any]]:
    """Each recorded field (and each augmentation range) that took more than one value, with its values."""
    out: dict[str, list[Any]] = {}
    for name in DIFF_FIELDS:
        values = list(dict.fromkeys(getattr(c, name) for c in conditions))
        if len(values) > 1:
            out[name] = values
    for key in sorted({k for c in conditions for k in c.augment}):
        values = list(dict.fromkeys(_key(c.augment.get(key)) for c in conditions))
        if len(values) > 1:
            out[f"augment.{key}"] = values
    return out


def _key(value: Any) -> Any:
    return tuple(sorted(value.items())) if isinstance(value, dict) else value


def range_check(claim: Claim, condition: Condition) -> RangeCheck:
    """Whether the claimed perturbation value lies inside the condition's trained augmentation range."""

    if claim.perturbation not in PERTURBATIONS or claim.severity is None:
        raise ValueError(
            f"claim names unknown perturbation {claim.perturbation!r}; known: {', '.join(PERTURBATIONS)}"
        )
    p = PERTURBATIONS[claim.perturbation]
    value = p.values[claim.severity - 1]
    augment = AugmentConfig.model_validate(condition.augment)
    trained = getattr(augment, p.augment_field) if p.augment_field else None
    return RangeCheck(
        perturbation=p.name,
        severity=claim.severity,
        value=value,
        augment_field=p.augment_field,
        trained_low=trained.low if trained else None,
        trained_high=trained.high if trained else None,
        within_training_range=within_training_range(p, value, augment),
    )


def win_verdict(
    claim: Claim, rederived: list[Condition], policy: ChallengePolicy
) -> tuple[Verdict, list[str]]:
    """Upheld when enough re-derived seeds beat the claim's reference by more than the margin."""
    f1s = [c.dev_object_f1 for c in rederived if c.dev_object_f1 is not None]
    beat = sum(f - claim.reference > policy.win_margin for f in f1s)
    share = beat / len(f1s) if f1s else 0.0
    seen = ", ".join(f"{f:.3f}" for f in f1s) or "none (every re-run failed)"
    line = (
        f"{beat}/{len(f1s)} re-derived seeds beat the reference dev object F1 {claim.reference:.3f} by more "
        f"than {policy.win_margin:g} (re-derived: {seen}; claimed {claim.claimed:.3f})"
    )
    if f1s and share >= policy.win_uphold_fraction:
        return Verdict.UPHELD, [line]
    return Verdict.RETRACTED, [line + f"; the policy needs a share of {policy.win_uphold_fraction:g}"]


def collapse_verdict(
    claim: Claim,
    original: Condition,
    rederived: list[Condition],
    control: Condition | None,
    checks: list[RangeCheck],
    policy: ChallengePolicy,
) -> tuple[Verdict, list[str]]:
    """Uphold a collapse that reproduces and is not an extrapolation; retract it otherwise.

    Inside the trained range, reproduction decides. Outside it, the full-range control decides
    first: a small drop there makes the collapse an artefact of the evaluation, whether or not
    the narrow seeds reproduce it; a control that collapses too leaves reproduction to decide."""
    drops = [d for c in rederived if (d := _drop(c)) is not None]
    collapsed = sum(d >= policy.collapse_drop for d in drops)
    reproduced = bool(drops) and collapsed / len(drops) >= policy.collapse_uphold_fraction
    reasons = [
        f"{collapsed}/{len(drops)} re-derived seeds collapse again (object-F1 drop ≥ {policy.collapse_drop:g}"
        f" under {claim.perturbation} severity {claim.severity}; drops: "
        + (", ".join(f"{d:.3f}" for d in drops) or "none")
        + ")"
    ]
    own = checks[0]
    if own.within_training_range:
        if reproduced:
            return Verdict.UPHELD, [
                *reasons,
                f"the evaluation ({own.perturbation} = {own.value:g}) lies inside "
                f"the trained range of {own.augment_field}: a real vulnerability",
            ]
        return Verdict.RETRACTED, [*reasons, "the claimed collapse does not reproduce"]
    reasons.append(_outside(own))
    control_drop = _drop(control)
    if control_drop is None:
        return Verdict.RETRACTED, [
            *reasons,
            "no model trained over the full range could be measured; the claim "
            "rests on an extrapolation and is withdrawn",
        ]
    if control_drop < policy.collapse_drop:
        return Verdict.RETRACTED, [
            *reasons,
            f"trained over the full range ({_trained(checks[-1])}) the drop is "
            f"{control_drop:.3f} < {policy.collapse_drop:g}: the collapse is an "
            "artefact of evaluating outside the training range",
        ]
    if reproduced:
        return Verdict.UPHELD, [
            *reasons,
            f"it collapses even when trained over the full range (drop "
            f"{control_drop:.3f}): a real vulnerability",
        ]
    return Verdict.RETRACTED, [*reasons, "the claimed collapse does not reproduce"]


def _drop(c: Condition | None) -> float | None:
    if c is None or c.dev_object_f1 is None or c.perturbed_object_f1 is None:
        return None
    return c.dev_object_f1 - c.perturbed_object_f1


def _trained(check: RangeCheck) -> str:
    if check.augment_field is None:
        return "no augmentation covers it"
    return f"{check.augment_field} [{check.trained_low:g}, {check.trained_high:g}]"


def _outside(check: RangeCheck) -> str:
    return (
        f"out-of-range evaluation: {check.perturbation} severity {check.severity} needs "
        f"{check.augment_field or 'an augmentation'} = {check.value:g}, but training covered "
        f"{_trained(check)}"
    )
