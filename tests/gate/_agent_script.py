"""A fixed agent script over real components, for the two-vaults test.

``run_script(home, dataset, fake_url, responses)`` drives one home the way a run does, with every
decision fixed in advance so that two homes can be compared: an LLM proposer (the official
OpenAI SDK against a fake server on loopback) proposes from the allowlisted context; the real
runner executes each ticket (workspace, manifest, copy-out, host dev metrics, ``outcome.json``);
the host submits the copied model with its dataset version to the real gate service over its
socket, as ``agents.services.HostServices.submit`` does; and the next proposal carries the
coarse verdict history. Only training is stood in for: ``FixedTrainer`` writes a fixed ONNX
model where the sandboxed worker would, so the artefacts do not depend on training noise."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx

from agents.context import DevAnalysis, VerdictEntry, build_context
from agents.llm import LLMUsage
from agents.proposer import get_proposer, to_ticket
from audit import AuditLog, MemoryAnchorStore
from gate.client import running_gate
from runner import LaunchRequest, LaunchResult, execute_ticket, ticket_caps
from segfactory.home import Home
from segfactory.records import Budget, CoarseVerdict, Ticket
from synthetic.splits import write_split
from synthetic.versions import DatasetVersion, create_version
from tests.agents.conftest import recommendation
from tests.gate import models
from tests.runner.conftest import BASE_CONFIG, PROFILED
from tests.vision._data import draw

RUN_ID = "run-1"
CANDIDATE = models.threshold_model(bias=-0.45)  # what every ticket "trains": better on faint voids
DRAFT = {
    "kind": "config",
    "hypothesis": "a lower learning rate helps faint voids",
    "change": {"optim.lr": 0.001},
    "budget": {"device_seconds": 60, "epochs": 1},
    "expected_effect": {"metric": "object_f1", "slice": "faint voids", "direction": "up", "size": 0.02},
    "evidence": ["recommendation:r1"],
}
SECOND = {
    **DRAFT,
    "hypothesis": "a slightly higher learning rate helps faint voids",
    "change": {"optim.lr": 0.002},
}
LLM_SCRIPT = [{"tickets": [DRAFT]}, {"tickets": [SECOND]}]  # one propose_tickets tool call per request


RETRAINED = models.threshold_model(bias=-0.46)  # the replicate's "new seed": other bytes, the same behaviour


class FixedTrainer:
    """A launcher standing in for the sandboxed worker: writes ``out/model.onnx`` (CANDIDATE; RETRAINED
    for the replicate's seed 2, since the gate refuses a replicate with the original's bytes)."""

    name = "fixed"

    def launch(self, request: LaunchRequest) -> LaunchResult:
        import yaml

        out = request.workspace / "out"
        out.mkdir()
        (out / "learning_curve.jsonl").write_text('{"epoch": 1, "loss": 0.5}\n')
        (out / "result.json").write_text('{"usable": true}\n')
        seed = yaml.safe_load((request.workspace / "config.yaml").read_text()).get("seed")
        (out / "model.onnx").write_bytes((RETRAINED if seed == 2 else CANDIDATE).SerializeToString())
        return LaunchResult(exit_code=0, duration_s=0.5)


def add_dataset(home: Path, src: Path) -> DatasetVersion:
    """The approved training data (``discs/v1``), identical in every home."""
    for name, n, seed in (("train", 24, 0), ("dev", 40, 1)):
        images, masks, meta, defects = draw(n, 32, seed)
        write_split(src / name, images, masks, meta, defects, {"generator": "tests.discs"})
    return create_version(home, "discs", {s: src / s for s in ("train", "dev")}, approve_it=True)


def _history(entries: list[tuple[Ticket, CoarseVerdict]]) -> list[VerdictEntry]:
    return [VerdictEntry.from_verdict(ticket, verdict) for ticket, verdict in entries]


def run_script(home_root: Path, dataset: DatasetVersion, fake_url: str, responses: list[bytes]) -> None:
    """Drive one home through the fixed script; raw gate response bodies are appended to ``responses``."""
    from runner.scheduler import Admission, MemoryEstimator, Scheduler, SchedulerSettings

    home = Home(home_root)
    settings = SchedulerSettings(reserve_bytes=0)
    scheduler = Scheduler(
        MemoryEstimator(home, PROFILED), Admission("cpu", PROFILED.total_bytes, settings), settings
    )
    analysis = DevAnalysis(
        summary="dev object F1 0.41; faint voids missed",
        recommendations=(recommendation("r1", "optim.lr", 0.001),),
    )
    with (
        AuditLog(home, MemoryAnchorStore()) as audit,
        running_gate(home_root) as client,
    ):
        client._http.event_hooks["response"].append(lambda r: responses.append(r.read()))
        proposer = get_proposer(
            "openai:gpt-4o-mini",
            sink=audit,
            usage=LLMUsage(),
            run_id=RUN_ID,
            default_budget=Budget(device_seconds=60, epochs=1),
            caps=Budget(device_seconds=120, epochs=3),
            base_url=fake_url,
            timeout_s=10,
        )

        def execute(ticket: Ticket) -> CoarseVerdict:
            outcome = execute_ticket(
                ticket,
                home=home,
                dataset_version=dataset,
                backend=FixedTrainer(),
                base_config=dict(BASE_CONFIG),
                audit=audit,
                run_id=RUN_ID,
                scheduler=scheduler,
                budget_policy=ticket_caps("demo"),
            )
            assert outcome.evidence is not None, outcome.reason
            model = home.tickets_dir(RUN_ID) / ticket.id / "model.onnx"  # as HostServices.submit does
            return client.submit(
                model, dataset.ref, ticket.id, replicate_of=ticket.replicate_of, run_id=RUN_ID
            )

        history: list[tuple[Ticket, CoarseVerdict]] = []
        first = to_ticket(proposer.propose(build_context(analysis, []), 1)[0], f"{RUN_ID}-t001", seed=1)
        history.append((first, execute(first)))
        replicate = first.model_copy(update={"id": f"{first.id}-rep", "replicate_of": first.id, "seed": 2})
        history.append((replicate, execute(replicate)))  # the script replicates whatever the verdict was
        second = to_ticket(
            proposer.propose(build_context(analysis, _history(history)), 1)[0], f"{RUN_ID}-t002", seed=3
        )
        history.append((second, execute(second)))  # the same model: answered from the verdict cache
        _raw_submissions(client._http, client._credential())


def _raw_submissions(http: httpx.Client, auth: dict[str, str]) -> None:
    """What an agent could also send by hand: a replay, a non-ONNX file, malformed JSON."""
    bad = base64.b64encode(b"not a model").decode()
    good = base64.b64encode(CANDIDATE.SerializeToString()).decode()
    http.post(
        "/submit", json={"ticket_id": f"{RUN_ID}-t001", "model_b64": good, "replicate_of": None}, headers=auth
    )
    http.post(
        "/submit", json={"ticket_id": f"{RUN_ID}-t003", "model_b64": bad, "replicate_of": None}, headers=auth
    )
    http.post("/submit", content=b"{oops", headers=auth)


def llm_request_blobs(home_root: Path) -> list[bytes]:
    """Every LLM request body, byte for byte, from the audit log's blobs, in order."""
    from audit import iter_records

    home = Home(home_root)
    with AuditLog(home, MemoryAnchorStore()) as audit:
        records = list(iter_records(audit.path))
        return [audit.blobs.get(r.payload["body"]) for r in records if r.event == "llm_http_request"]


__all__ = ["LLM_SCRIPT", "RUN_ID", "add_dataset", "llm_request_blobs", "run_script"]
