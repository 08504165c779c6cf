"""A small typed client for the gate service (orchestrator, runner, audit writer, CLI).

``GateClient(socket_path=...)`` talks over the Unix socket with the credential the served gate
left beside it for the client's ``role``: ``host`` (the default: orchestrator, audit writer, a
person's CLI; every endpoint) or ``agent`` (``/submit`` and ``/status`` only).
``GateClient(url=..., token=...)`` talks over TCP with a bearer token. ``running_gate(home)``
starts ``segfactory gate serve`` on a fresh socket, waits until it answers, yields a client and
stops the service on exit; ``home_gate(home)`` reaches the home's served gate, else starts one.
"""

from __future__ import annotations

import base64
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from gate import users
from gate.replies import GateStatus
from gate.roles import HOST, ROLES, token_file
from segfactory.errors import GateError
from segfactory.handover import PARENT_ENV, handed
from segfactory.privilege import SAFE_CWD, SOURCE_TREE, isolated_python
from segfactory.records import Anchor, CoarseVerdict

if TYPE_CHECKING:
    from gate.milestone_report import MilestoneReport

R = TypeVar("R", bound=BaseModel)

CLIENT_TIMEOUT_S = 900.0  # one request (a submission scores two models); past it: GateError
# Time for a spawned gate to answer /status; past it: GateError. A gate times a reference verdict
# before it listens (at most gate.calibrate.CALIBRATION_WALL_S, 900 s), then starts in seconds; one
# that exits on the way is reported at once.
START_TIMEOUT_S = 960.0


class GateClient:
    """Typed calls to the gate. Every failure is a GateError naming the endpoint."""

    def __init__(
        self,
        socket_path: Path | str | None = None,
        url: str | None = None,
        token: str | None = None,
        role: str = HOST,
    ):
        if role not in ROLES:
            raise GateError(f"gate role {role!r} is unknown; known: {', '.join(ROLES)}")
        self.server_pid: int | None = None  # set by running_gate: the service's process id
        self.role = role
        self._token = token
        # the served gate writes its credentials at start, so a client made before that reads them late
        self._token_path = (
            token_file(Path(socket_path).parent, role) if socket_path is not None and not token else None
        )
        headers = {"authorization": f"Bearer {token}"} if token else {}
        if socket_path is not None:
            transport = httpx.HTTPTransport(uds=str(socket_path))
            self._http = httpx.Client(
                transport=transport, base_url="http://gate", headers=headers, timeout=CLIENT_TIMEOUT_S
            )
        elif url is not None:
            self._http = httpx.Client(base_url=url, headers=headers, timeout=CLIENT_TIMEOUT_S)
        else:
            raise GateError("GateClient needs a socket_path or a url")

    def close(self) -> None:
        self._http.close()

    def _credential(self) -> dict[str, str]:
        if self._token_path is None:
            return {}
        try:
            token = self._token_path.read_text().strip()
        except FileNotFoundError:
            return {}  # not written yet (the gate is starting): the gate answers 401
        except PermissionError:
            given = handed(_handed_name(self._token_path.parent)) if self.role == HOST else None
            if given is None:
                raise GateError(
                    f"cannot read the gate's {self.role} credential {self._token_path}: permission denied; "
                    + (
                        "the host credential is the gate user's alone: start the command as root, which "
                        "hands it to the command it continues as segfactory"
                        if self.role == HOST
                        else "run as a member of group segfactory"
                    )
                ) from None
            token = given
        return {"authorization": f"Bearer {token}"}

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, headers=self._credential(), **kwargs)
        except httpx.HTTPError as exc:
            raise GateError(f"gate unreachable at {path}: {exc}") from None

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._call(method, path, **kwargs)
        if response.status_code >= 400:
            raise GateError(f"gate {method} {path} answered {response.status_code}: {response.text[:300]}")
        return response.json()

    def submit(
        self,
        model_path: Path | str,
        train_data: str | None,
        ticket_id: str,
        replicate_of: str | None = None,
        run_id: str | None = None,
    ) -> CoarseVerdict:
        body = {
            "ticket_id": ticket_id,
            "model_b64": base64.b64encode(Path(model_path).read_bytes()).decode(),
            "train_data": train_data,
            "replicate_of": replicate_of,
            "run_id": run_id,
        }
        return CoarseVerdict.model_validate(self._json("POST", "/submit", json=body))

    def promote(self, ticket_id: str) -> str:
        """Move the global best to the ticket's model (the gate checks WIN + replicate WIN)."""
        return str(self._json("POST", "/promote", json={"ticket_id": ticket_id})["model_sha256"])

    def retract(self, model_sha256: str, reason: str) -> str | None:
        """A challenge retracted this model's win: the sha256 the best moved back to, None if it was not
        the best."""
        moved = self._json("POST", "/retract", json={"model_sha256": model_sha256, "reason": reason})[
            "moved_to"
        ]
        return None if moved is None else str(moved)

    def status(self) -> GateStatus:
        """Hashes, tier versions and budgets, quarantines, the current best; a malformed reply is refused."""
        return _reply(GateStatus, self._json("GET", "/status"), "status")

    def put_anchor(self, seq: int, digest: str, run_id: str | None = None) -> None:
        self._json("PUT", "/anchor", json={"seq": seq, "hash": digest, "run_id": run_id})

    def get_anchor(self) -> Anchor | None:
        """The latest anchor the gate keeps (None before the first); a malformed reply is refused."""
        response = self._call("GET", "/anchor")
        if response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise GateError(f"gate GET /anchor answered {response.status_code}")
        return _anchor(response.json())

    def get_anchor_history(self) -> list[Anchor]:
        """Every anchor the gate keeps, oldest first."""
        return [_anchor(item) for item in self._json("GET", "/anchor/history")["anchors"]]

    def pull_events(self, after: int = 0) -> list[dict[str, object]]:
        """The gate's queued audit events after ``after``, as it sent them (``audit.gate_events``
        validates each before it appends it to the log)."""
        reply = self._json("GET", "/audit/events", params={"after": after})
        events: list[dict[str, object]] = reply["events"]
        return events

    def ack_events(self, up_to: int) -> int:
        return int(self._json("POST", "/audit/ack", json={"up_to": up_to})["dropped"])

    def set_reference(self, model_path: Path | str, reason: str) -> str:
        """An A/A run's reference model becomes the best (kind ``reference``, never a promotion)."""
        body = {"model_b64": base64.b64encode(Path(model_path).read_bytes()).decode(), "reason": reason}
        return str(self._json("POST", "/reference", json=body)["model_sha256"])

    def rotate(self, tier: str) -> int:
        """Draw a fresh secret-seeded version of ``tier``; returns its version number."""
        return int(self._json("POST", "/rotate", json={"tier": tier})["version"])

    def milestone(
        self, name: str, run_id: str, model_paths: list[Path] | None = None, tiers: list[str] | None = None
    ) -> MilestoneReport:
        """Score ``model_paths`` (default: the current best) once on ``tiers`` (people only)."""
        body: dict[str, str | list[str]] = {
            "name": name,
            "run_id": run_id,
            "models_b64": [base64.b64encode(Path(p).read_bytes()).decode() for p in model_paths or []],
        }
        if tiers:
            body["tiers"] = tiers
        from gate.milestone_report import MilestoneReport  # deferred: loads numpy and the generator's package

        return _reply(MilestoneReport, self._json("POST", "/milestone", json=body), "milestone report")


def _handed_name(socket_dir: Path) -> str:
    return f"gate-host-token:{os.path.realpath(socket_dir)}"


def host_credential(socket_dir: Path) -> dict[str, str]:
    """As root: the served gate's host credential in ``socket_dir``, named for ``hand_over``
    (the file is the gate user's alone; the command root restarts as segfactory gets it this way)."""
    return {_handed_name(socket_dir): token_file(Path(socket_dir), HOST).read_text().strip()}


def _reply(record: type[R], reply: Any, what: str) -> R:
    try:
        return record.model_validate(reply)
    except ValidationError as exc:
        raise GateError(f"the gate answered a malformed {what}: {exc.errors()[0]['msg']}") from exc


def _anchor(reply: Any) -> Anchor:
    return _reply(Anchor, reply, "anchor")


def wait_ready(client: GateClient, proc: subprocess.Popen[bytes], timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")[-500:] if proc.stderr else ""
            raise GateError(f"gate exited during start (code {proc.returncode}): {err}")
        try:
            client.status()
            return
        except GateError:
            time.sleep(0.1)
    raise GateError(f"gate did not answer within START_TIMEOUT_S={timeout}")


def _prepare_for_gate_user(home: Path, socket_dir: Path) -> None:
    """When the gate runs as its own user, its socket directory must belong to it."""
    if users.is_root() and users.vault_is_separated(Path(home) / "vault"):
        os.chmod(socket_dir.parent, 0o755)
        users.prepare_socket_dir(socket_dir)


@contextmanager
def running_gate(
    home: Path, extra_args: list[str] | None = None, env: dict[str, str] | None = None, role: str = HOST
) -> Iterator[GateClient]:
    """Start ``gate serve`` for ``home`` on a private socket; stop it on exit."""
    with tempfile.TemporaryDirectory(prefix="segfactory-gate-") as tmp:
        sock = Path(tmp) / "run" / "gate.sock"
        _prepare_for_gate_user(home, sock.parent)
        # isolated, from "/": started as root, nothing is imported from the caller's directory
        cmd = isolated_python(
            SOURCE_TREE, "segfactory", "gate", "serve", "--home", str(home), "--socket", str(sock)
        )
        proc = subprocess.Popen(
            cmd + (extra_args or []),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**(env or os.environ), PARENT_ENV: str(os.getpid())},  # it dies with this process
            cwd=SAFE_CWD,
        )
        client = GateClient(socket_path=sock, role=role)
        client.server_pid = proc.pid
        try:
            wait_ready(client, proc)
            yield client
        finally:
            client.close()
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


SERVED_SOCKET = Path("gate-run") / "gate.sock"  # `segfactory gate serve` without --socket


@contextmanager
def home_gate(home: Path, role: str = HOST) -> Iterator[GateClient]:
    """The home's served gate (``<home>/gate-run/gate.sock``) when it answers, else one started for the
    duration."""
    sock = Path(home) / SERVED_SOCKET
    if sock.exists():
        client = GateClient(socket_path=sock, role=role)
        try:
            client.status()
        except GateError:
            client.close()
        else:
            try:
                yield client
            finally:
                client.close()
            return
    with running_gate(Path(home), role=role) as started:
        yield started
