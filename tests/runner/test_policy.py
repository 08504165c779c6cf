"""Tickets that ask for too much, or point outside their workspace, are refused before they start."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner import TicketCaps, refusal_reason, ticket_caps
from segfactory.budgets import BUDGETS_POLICY
from segfactory.errors import PolicyError
from segfactory.records import Ticket

POLICY = TicketCaps(max_device_seconds=120, max_epochs=10)


def ticket(
    change: dict[str, object] | None = None, kind: str = "config", seconds: float = 60, epochs: int = 2
) -> Ticket:
    return Ticket(
        id="t1",
        arm="agent",
        kind=kind,
        hypothesis="h",
        change=change or {},
        budget={"device_seconds": seconds, "epochs": epochs},
        expected_effect={"metric": "object_f1", "direction": "up", "size": 0.01},
        seed=7,
    )


def test_a_plain_config_ticket_may_start() -> None:
    assert refusal_reason(ticket({"optim.lr": 0.01, "model": {"name": "unet-resnet10t"}}), POLICY) is None


def test_budget_beyond_policy_is_refused() -> None:
    assert "exceeds the policy limit of 120" in str(refusal_reason(ticket(seconds=121), POLICY))
    assert "11 epochs exceeds" in str(refusal_reason(ticket(epochs=11), POLICY))


@pytest.mark.parametrize(
    "value",
    [
        "/etc/passwd",
        "../../vault/confirm-a",
        "/work/../root",
        "~/.ssh/id_rsa",
        "/data/train/images.npy",
        "..\\..\\x",
    ],
)
def test_paths_outside_the_workspace_are_refused(value: str) -> None:
    reason = refusal_reason(ticket({"model": {"encoder_weights": value}}), POLICY)
    assert reason is not None and "outside the ticket's workspace" in reason


@pytest.mark.parametrize("value", ["/work/weights.safetensors", "weights/enc.safetensors"])
def test_paths_inside_the_workspace_are_accepted(value: str) -> None:
    assert refusal_reason(ticket({"model": {"encoder_weights": value}}), POLICY) is None


def test_code_files_must_stay_in_the_code_copy() -> None:
    inside = ticket({"files": {"vision/losses.py": "x = '/etc/passwd'\n"}}, kind="code")
    assert refusal_reason(inside, POLICY) is None  # file text is code, not a path
    outside = ticket({"files": {"../config.yaml": "epochs: 999\n"}}, kind="code")
    assert "outside the ticket's code copy" in str(refusal_reason(outside, POLICY))


def test_data_requests_do_not_run() -> None:
    assert "approvals queue" in str(refusal_reason(ticket(kind="data_request"), POLICY))


def test_budgets_come_from_the_policy_file_per_profile(tmp_path: Path) -> None:
    assert ticket_caps("demo").max_device_seconds == 120  # policies/budgets.yaml
    assert ticket_caps("demo") == TicketCaps(max_device_seconds=120, max_epochs=40)
    with pytest.raises(PolicyError, match="invalid budget policy"):  # the runner has no fallback caps
        ticket_caps("default", tmp_path / "absent.yaml")
    bad = _write(
        tmp_path / "budgets.yaml", BUDGETS_POLICY.read_text().replace("max_epochs: 40", "max_epochs: -1")
    )
    with pytest.raises(PolicyError, match="invalid budget policy"):
        ticket_caps("demo", bad)
    with pytest.raises(PolicyError, match="no profile 'nightly'"):
        ticket_caps("nightly")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
