"""The action catalogue: every recommendation becomes a concrete change of the incumbent, or a reason.

``policies/actions.yaml`` maps each rule of ``policies/recommend.yaml`` to what it does (see the
file's header). :func:`load_catalogue` validates it, names the file and line of any fault, and
refuses a catalogue that leaves a recommendation rule without an entry. :func:`realise_config`
turns a config-kind recommendation into a patch of the incumbent's training config that really
changes it; the host (``agents.services``) realises the data kinds, which need the home.

A recommendation that cannot become a change is a :class:`NotExecutable` with one clear reason;
it is reported, never run as something else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from agents._config_values import as_int
from agents._paths import POLICY_DIR
from segfactory.errors import PolicyError
from segfactory.records import Recommendation, TicketKind, canonical_json
from vision.perturb import PERTURBATIONS
from vision.recipes import RECIPES, recipe_patch

ACTIONS_POLICY = POLICY_DIR / "actions.yaml"
RECOMMEND_POLICY = POLICY_DIR / "recommend.yaml"
PERTURBATION_KEY = "{perturbation}"
RECIPE_KEY = "recipe"  # an option key naming a whole recipe of vision.recipes
Do = Literal["config", "topup", "curation", "label_review", "data_request", "none"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ActionEntry(_Strict):
    do: Do
    # config only, tried in order: dotted key -> the value to set, or an operation on the current
    # one ({scale: x}, {add: x, max: y}, {next: [...]}, {widen: x}); see policies/actions.yaml
    options: list[dict[str, JsonValue]] = Field(default_factory=list)
    epochs_with_budget: bool = False
    # Start from the incumbent's trained weights when it has them (a fine-tune), for this share of
    # the ticket's device budget; from fresh weights, at the whole budget, when it has none.
    continues: bool = False
    budget_share: float = Field(default=1.0, gt=0, le=1)


class Catalogue(_Strict):
    schema_version: Literal[1]
    actions: dict[str, ActionEntry]


class Realised(_Strict):
    """A recommendation as a concrete change: the ticket kind, its ``change`` and its epoch budget."""

    rule: str
    recommendation_id: str
    do: Do
    kind: TicketKind
    change: dict[str, JsonValue]  # a config patch (dotted keys), or a data kind's change
    option: int | None = None  # which config option of the catalogue entry
    epochs: int | None = None  # the ticket's epoch budget, when the change raises it


class NotExecutable(_Strict):
    """A recommendation that cannot become a change, and why (recorded; no ticket)."""

    rule: str
    recommendation_id: str
    reason: str


def rule_of(rec: Recommendation) -> str:
    """``model-capacity-0`` -> ``model-capacity`` (the analysis numbers recommendations per rule)."""
    head, _, tail = rec.id.rpartition("-")
    return head if tail.isdigit() and head else rec.id


# -- loading -----------------------------------------------------------------------------------


def _line_of(path: Path, text: str, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of the YAML node at ``loc`` (the deepest one that exists)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = node.start_mark.line + 1 if node is not None else None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            found = [v for k, v in node.value if k.value == str(key)]
            if not found:
                break
            node = found[0]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            break
        line = node.start_mark.line + 1
    return line


def load_yaml_policy(path: Path, model: type[BaseModel]) -> Any:
    """Parse and validate a policy file; any fault is a PolicyError naming the file and line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise PolicyError(f"cannot read {path}: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise PolicyError(f"{where}: not valid YAML ({getattr(exc, 'problem', exc)}); fix the file") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = tuple(err["loc"])
        line = _line_of(path, text, loc)
        where = f"{path}:{line}" if line else str(path)
        raise PolicyError(
            f"{where}: {'.'.join(str(p) for p in loc) or '(top level)'}: {err['msg']}; fix the file"
        ) from None


def load_catalogue(path: Path = ACTIONS_POLICY, rules_path: Path = RECOMMEND_POLICY) -> Catalogue:
    """The validated catalogue; a recommendation rule with no entry is a PolicyError."""
    catalogue: Catalogue = load_yaml_policy(path, Catalogue)
    rules = yaml.safe_load(rules_path.read_text()).get("rules", [])
    missing = [r["id"] for r in rules if r.get("id") not in catalogue.actions]
    if missing:
        raise PolicyError(
            f"{path}: no action for the recommendation rule(s) {missing} of {rules_path}; "
            "add an entry (do: none, if it is not executable)"
        )
    for name, entry in catalogue.actions.items():
        if entry.do == "config" and not entry.options:
            raise PolicyError(
                f"{path}:{_line_of(path, path.read_text(), ('actions', name))}: "
                f"action {name!r} changes the config but lists no options"
            )
        for option in entry.options:
            if RECIPE_KEY in option and str(option[RECIPE_KEY]) not in RECIPES:
                raise PolicyError(
                    f"{path}:{_line_of(path, path.read_text(), ('actions', name))}: action {name!r} "
                    f"names the recipe {option[RECIPE_KEY]!r}; known: {', '.join(sorted(RECIPES))}"
                )
    return catalogue


# -- config changes ----------------------------------------------------------------------------


def dotted_get(config: dict[str, JsonValue], dotted: str) -> JsonValue:
    """``config['optim']['lr']`` for ``optim.lr``; None when any part is missing."""
    node: JsonValue = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


class _Skip(Exception):
    """This option cannot be applied to this incumbent (the reason says why)."""


def _identity(field: str) -> float:
    return 1.0 if field in ("gain", "scale", "gamma") else 0.0


def _widen(current: Any, factor: float, field: str, perturbation: str | None) -> dict[str, float]:
    ident = _identity(field)
    low, high = (
        (float(current["low"]), float(current["high"])) if isinstance(current, dict) else (ident, ident)
    )
    if low == high == ident:  # nothing yet: start from the perturbation's value at a matching severity
        if perturbation is None or perturbation not in PERTURBATIONS:
            raise _Skip(f"augment.{field} is not augmented yet and no perturbation says how far to widen it")
        values = PERTURBATIONS[perturbation].values
        value = float(
            values[min(int(factor) + 1, len(values)) - 1]
        )  # widen 2: severity 3, widen 4: severity 5
        return {"low": min(ident, value), "high": max(ident, value)}
    return {
        "low": round(ident - factor * (ident - low), 6),
        "high": round(ident + factor * (high - ident), 6),
    }


def _apply(op: Any, current: Any, key: str, perturbation: str | None) -> Any:
    if not isinstance(op, dict):
        return op
    if "scale" in op:
        if not isinstance(current, int | float):
            raise _Skip(f"{key} has no numeric value to scale")
        value = current * float(op["scale"])
        return int(round(value)) if isinstance(current, int) and not isinstance(current, bool) else value
    if "add" in op:
        base = float(current) if isinstance(current, int | float) else 0.0
        return min(base + float(op["add"]), float(op.get("max", math.inf)))
    if "next" in op:
        choices = list(op["next"])
        later = [c for c in choices if current is None or (isinstance(c, int | float) and c > current)]
        if current in choices:
            later = choices[choices.index(current) + 1 :]
        if not later:
            raise _Skip(f"{key} is already {current}, the last of {choices}")
        return later[0]
    if "widen" in op:
        return _widen(current, float(op["widen"]), key.rsplit(".", 1)[-1], perturbation)
    raise _Skip(f"unknown operation {op} for {key}")


def _perturbation(rec: Recommendation) -> str | None:
    """The failing perturbation an augmentation can cover: the worst one, else the worst covered one
    among the drops the analysis measured (the worst, say dead pixels, may have no augmentation)."""
    worst = rec.evidence.get("perturbation")
    if worst and _augment_field(str(worst)) is not None:
        return str(worst)
    drops = rec.evidence.get("drops") or {}
    covered = sorted((d, name) for name, d in drops.items() if _augment_field(name) is not None and d > 0)
    return covered[-1][1] if covered else (str(worst) if worst else None)


def _augment_field(perturbation: str | None) -> str | None:
    if perturbation is None or perturbation not in PERTURBATIONS:
        return None
    return PERTURBATIONS[perturbation].augment_field


def patch_for(
    option: Mapping[str, JsonValue], config: dict[str, JsonValue], rec: Recommendation
) -> dict[str, JsonValue]:
    """One catalogue option as a patch of ``config`` (dotted keys); only keys whose value changes."""
    perturbation = _perturbation(rec)
    patch: dict[str, JsonValue] = {}
    for raw_key, op in option.items():
        if raw_key == RECIPE_KEY:  # a whole recipe: each of its keys set, where it changes the config
            patch.update({k: v for k, v in recipe_patch(str(op)).items() if v != dotted_get(config, k)})
            continue
        key = raw_key
        if PERTURBATION_KEY in key:
            field = _augment_field(perturbation)
            if field is None:
                raise _Skip(f"no training augmentation covers the perturbation {perturbation!r}")
            key = key.replace(PERTURBATION_KEY, field)
        current = dotted_get(config, key)
        value = _apply(op, current, key, perturbation)
        if value != current:
            patch[key] = value
    return patch


def realise_config(
    rule: str,
    entry: ActionEntry,
    rec: Recommendation,
    config: dict[str, JsonValue],
    tried: set[str],
    *,
    max_epochs: int,
) -> Realised | NotExecutable:
    """The first option that changes ``config`` and whose patch is not in ``tried`` (canonical JSON)."""

    reasons = []
    for index, option in enumerate(entry.options):
        try:
            patch = patch_for(option, config, rec)
        except _Skip as exc:
            reasons.append(f"option {index + 1}: {exc}")
            continue
        if not patch:
            reasons.append(f"option {index + 1}: the incumbent already has {option}")
            continue
        if canonical_json(patch).decode() in tried:
            reasons.append(f"option {index + 1}: {patch} was already tried on this incumbent")
            continue
        epochs = None
        if entry.epochs_with_budget and "epochs" in patch:
            epochs = min(as_int(patch["epochs"]), max_epochs)
            patch["epochs"] = epochs
            if epochs == dotted_get(config, "epochs"):
                reasons.append(f"option {index + 1}: epochs are already at the ticket cap {max_epochs}")
                continue
        return Realised(
            rule=rule,
            recommendation_id=rec.id,
            do="config",
            kind=TicketKind.CONFIG,
            change=patch,
            option=index,
            epochs=epochs,
        )
    return NotExecutable(
        rule=rule,
        recommendation_id=rec.id,
        reason="no catalogue option changes the incumbent: " + "; ".join(reasons),
    )


__all__ = [
    "ACTIONS_POLICY",
    "ActionEntry",
    "Catalogue",
    "NotExecutable",
    "Realised",
    "load_catalogue",
    "dotted_get",
    "load_yaml_policy",
    "patch_for",
    "realise_config",
    "rule_of",
]
