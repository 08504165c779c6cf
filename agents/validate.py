"""Ticket validation: budgets, config keys, code paths.

:func:`ticket_problems` lists every reason a ticket may not run (empty: it may). The caps come
from ``policies/budgets.yaml`` for the run's profile; config changes are checked against the
training config model (``vision.config.TrainConfig``) when it can be imported, else against the
fallback allowlist in the same policy file; code changes must stay under the ticket's copy of
the training code and name no protected path. The ``approved_*`` keys of a change are the
host's: only the data ticket the approvals queue makes from an approved request carries one
(``approved_request``, naming that request), so a proposer that writes any is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath

from pydantic import BaseModel, JsonValue, ValidationError

from agents._data_tickets import topup_spec
from agents._paths import is_protected
from agents.approvals import APPROVED_REQUEST_KEY, data_ticket_id, grant_keys
from segfactory.budgets import BudgetPolicy, TicketCaps
from segfactory.errors import UsageError
from segfactory.records import Ticket, TicketKind
from synthetic.slices import generator_constraint

# Config fields the host owns: a ticket never sets them (the seed is the ticket's own, host-chosen).
HOST_OWNED_CONFIG_KEYS = frozenset(
    {"version", "seed", "device", "threads", "max_train_images", "validation"}  # validation: the carve
)
# The config a change is applied to when the caller gives none (TrainConfig requires these two).
BASE_CONFIG_FOR_CHECKS: dict[str, JsonValue] = {"epochs": 1, "batch_size": 8}


def ticket_problems(
    ticket: Ticket,
    policy: BudgetPolicy,
    profile: str,
    *,
    device_seconds_left: float | None = None,
    base_config: Mapping[str, JsonValue] | None = None,
) -> list[str]:
    """Every reason ``ticket`` may not run, in words an operator (and a proposer) can act on.

    ``base_config`` is the training config the change applies to (the current best's); without
    it a minimal valid config is used.
    """
    caps = policy.for_profile(profile).ticket
    problems = grant_problems(ticket) + _budget_problems(ticket, caps, device_seconds_left)
    problems += host_ticket_problems(ticket)
    if ticket.kind is TicketKind.CONFIG and not (
        ticket.change == {} and ticket.evidence == [BASE_CONFIG_EVIDENCE]
    ):
        problems += config_problems(ticket.change, policy, base_config)
    elif ticket.kind is TicketKind.CODE:
        problems += code_problems(ticket.change, policy.code_root)
    elif ticket.kind is TicketKind.DATA:
        problems += data_problems(ticket)
    return problems


def host_ticket_problems(ticket: Ticket) -> list[str]:
    """What only the host may ask of a ticket: packaging (its members are the budget plan's), and
    continuing a particular ticket's weights (a rung or final of the plan). A proposer may ask to
    continue the incumbent's weights, nothing else."""
    problems = []
    if ticket.kind is TicketKind.PACKAGE:
        problems.append(
            "a packaging ticket is the budget plan's (its members are chosen by the host from dev "
            "scores); propose a training ticket instead"
        )
    if ticket.continues not in (None, "incumbent"):
        problems.append(
            f"continues={ticket.continues!r}: a proposal may continue only the incumbent's weights "
            "(continues: incumbent) or start fresh (null); which ticket's weights a rung continues is "
            "the budget plan's"
        )
    return problems


def grant_problems(ticket: Ticket) -> list[str]:
    """``approved_*`` keys that no approval put there: what a person granted is read from the
    approvals record, never from a change, so a proposer may not write them (a data request
    included: it asks, a person grants)."""
    keys = grant_keys(ticket.change)
    if not keys:
        return []
    request = ticket.change.get(APPROVED_REQUEST_KEY)
    made_by_queue = (
        ticket.kind is TicketKind.DATA
        and keys == [APPROVED_REQUEST_KEY]
        and isinstance(request, str)
        and data_ticket_id(request) in (ticket.id, ticket.replicate_of)
    )
    if made_by_queue:
        return []
    return [
        f"change keys {keys} are the host's: what an approval grants (its data, count and scope) "
        "comes from the approvals record, never from a ticket. Remove them; to ask for data, propose "
        "a data_request ticket, and a person grants it with `segfactory approvals approve`"
    ]


def data_problems(ticket: Ticket) -> list[str]:
    """A targeted-synthetic slice the generator cannot draw: refused here, before the ticket is
    queued, rather than failing in the runner after its place in the run was spent."""

    spec = topup_spec(ticket)
    if spec is None:
        return []
    try:
        generator_constraint(str(spec["slice"]))
    except UsageError as exc:
        return [str(exc)]
    return []


def _budget_problems(ticket: Ticket, caps: TicketCaps, left: float | None) -> list[str]:
    problems = []
    if ticket.budget.device_seconds > caps.max_device_seconds:
        problems.append(
            f"budget.device_seconds {ticket.budget.device_seconds:g} exceeds the per-ticket cap "
            f"{caps.max_device_seconds:g}; ask for at most that"
        )
    if ticket.budget.epochs > caps.max_epochs:
        problems.append(f"budget.epochs {ticket.budget.epochs} exceeds the per-ticket cap {caps.max_epochs}")
    if left is not None and ticket.budget.device_seconds > left:
        problems.append(
            f"budget.device_seconds {ticket.budget.device_seconds:g} exceeds the "
            f"{left:g} device-seconds left in this run"
        )
    return problems


def _train_config_model() -> type[BaseModel] | None:
    try:
        from vision.config import TrainConfig  # deferred: else the policy's allowlist
    except ImportError:
        return None
    model: type[BaseModel] = TrainConfig
    return model


def _merge(base: Mapping[str, JsonValue], patch: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    merged = dict(base)
    for key, value in patch.items():
        current = merged.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            merged[key] = _merge(current, value)
        else:
            merged[key] = value
    return merged


def _nest(change: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    """``{"optim.lr": 1e-3}`` → ``{"optim": {"lr": 1e-3}}``; nested dicts pass through."""
    nested: dict[str, JsonValue] = {}
    for key, value in change.items():
        head, *rest = key.split(".")
        nested = _merge(nested, {head: _nest({".".join(rest): value}) if rest else value})
    return nested


BASE_CONFIG_EVIDENCE = (
    "base-config"  # the one config ticket allowed an empty change: the base config as it is
)


def config_problems(
    change: Mapping[str, JsonValue], policy: BudgetPolicy, base_config: Mapping[str, JsonValue] | None = None
) -> list[str]:
    """Keys outside the allowlist, or a change the training config model refuses."""
    if not change:
        return ["a config ticket must change at least one key"]
    patch = _nest(change)
    model = _train_config_model()
    fields = set(model.model_fields) if model is not None else set(policy.config_keys_fallback)
    allowed = fields - HOST_OWNED_CONFIG_KEYS
    unknown = sorted(set(patch) - allowed)
    if unknown:
        return [
            f"config keys {unknown} are not changeable training-config fields; allowed: {sorted(allowed)} "
            "(nested fields as 'optim.lr' or {'optim': {'lr': ...}})"
        ]
    if model is None:
        return []
    try:
        model.model_validate(_merge(base_config or BASE_CONFIG_FOR_CHECKS, patch))
    except ValidationError as exc:
        return [f"the changed training config is invalid: {exc.errors(include_url=False)}"]
    return []


def code_problems(change: Mapping[str, JsonValue], code_root: str) -> list[str]:
    """Paths a code ticket names (``change["files"]``) must lie under ``code_root``, unprotected."""
    files = change.get("files")
    if not isinstance(files, list | dict) or not files:
        return ["a code ticket must name the files it changes in change['files']"]
    return [p for name in files if (p := _code_path_problem(str(name), code_root))]


def _code_path_problem(name: str, code_root: str) -> str:
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        return f"code path {name!r} must be relative, without '..'"
    if pure.parts[0] != code_root or len(pure.parts) < 2:
        return f"code path {name!r} is outside the ticket's training-code copy {code_root}/"
    if is_protected(name):
        return f"code path {name!r} is protected"
    return ""
