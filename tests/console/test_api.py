"""The console's HTTP surface through a real app (TestClient): auth, audit review, approvals chat."""

from __future__ import annotations

import json
import re
import typing
from typing import Any

from audit import iter_records
from audit.reader import LOG_NAME
from console import MAX_BODY_BYTES, MAX_REPLY_CHARS
from segfactory.records import AuditRecord
from tests.console.conftest import REQUEST, RUN, ConsoleHome, csrf_of


def _records(ch: ConsoleHome, event: str) -> list[AuditRecord]:
    return [r for r in iter_records(ch.home.audit / LOG_NAME) if r.event == event]


# --- auth -------------------------------------------------------------------------------------


STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}
EXEMPT = {"/login"}  # the one path without a session: it exchanges the printed token for one


def _routes(app: Any) -> list[tuple[str, str]]:
    """Every (method, concrete path) the app serves, read from ``app.routes`` (included routers
    flattened): each path parameter filled with a value of its type, a mount with a file under it."""
    from fastapi.routing import APIRoute, iter_route_contexts
    from starlette.routing import Mount

    out = []
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        if isinstance(route, Mount):
            out.append(("GET", f"{route.path}/console.css"))
            continue
        assert isinstance(route, APIRoute), f"a route of a kind this test does not know: {route!r}"
        path, hints = context.path_format, typing.get_type_hints(route.endpoint)
        for name in route.param_convertors:
            sample = "0" if hints.get(name) is int else "x"  # a valid value: refused for CSRF, not type
            path = re.sub(r"\{" + name + r"(:[a-z]+)?\}", sample, path)
        out += [(method, path) for method in sorted(set(context.methods or ()) - {"HEAD"})]
    return out


def test_the_route_list_covers_the_whole_app(app: Any) -> None:
    routes = _routes(app)
    assert ("POST", "/approvals/x/reply") in routes and ("GET", "/static/console.css") in routes
    assert len([r for r in routes if r[0] in STATE_CHANGING]) >= 9  # approvals, labels, blind
    assert {m for m, _ in routes} <= {"GET", *STATE_CHANGING}


def test_every_route_needs_the_token(app: Any) -> None:
    from fastapi.testclient import TestClient

    with TestClient(app, base_url="http://127.0.0.1") as anon:
        for method, path in _routes(app):
            if path in EXEMPT:
                continue
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                answer = anon.request(method, path, headers=headers, content=b"")
                assert answer.status_code == 401, (method, path, headers, answer.status_code)
        assert anon.get("/login", params={"token": "wrong"}).status_code == 401
        assert anon.get("/api/runs", headers={"Authorization": "Bearer wrong"}).json()["status"] == 401
        assert anon.get("/api/runs", headers={"Authorization": "Bearer test-token"}).status_code == 200
        login = anon.get("/login", params={"token": "test-token"}, follow_redirects=False)
        cookie = login.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert login.headers["location"] == "/"  # the token leaves the address bar


def test_every_state_changing_route_needs_its_csrf_token(
    app: Any, client: Any, console_home: ConsoleHome
) -> None:
    """With the session cookie a browser sends by itself, and no token or a forged one: refused
    before anything is read or changed, on every route that changes state."""
    log = console_home.home.audit / "log.jsonl"
    for method, path in _routes(app):
        if method not in STATE_CHANGING:
            continue
        before = log.read_bytes()
        for form in ({"text": "approve", "message_id": "1"}, {"text": "approve", "csrf": "forged"}):
            answer = client.request(method, path, data=form)
            assert answer.status_code == 403, (method, path, form, answer.status_code, answer.text[:300])
            assert "CSRF" in answer.text
        answer = client.request(method, path, json={"guess": "real"}, headers={"x-csrf-token": "forged"})
        assert answer.status_code == 403, (method, path, "json", answer.status_code)
        assert log.read_bytes() == before, (method, path)  # no reply, decision or guess recorded


def test_an_expired_session_is_refused(app: Any, client: Any) -> None:
    assert client.get("/").status_code == 200
    app.state.services.auth.expire_all()
    page = client.get("/")
    assert page.status_code == 401 and "segfactory console" in page.text


def test_pages_carry_a_strict_content_security_policy(client: Any) -> None:
    headers = client.get("/audit").headers
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"


def test_a_huge_body_is_refused_before_it_is_read(client: Any) -> None:
    big = "x" * (MAX_BODY_BYTES + 1)
    assert (
        client.post(
            f"/approvals/{REQUEST}/reply", content=big, headers={"content-type": "text/plain"}
        ).status_code
        == 413
    )


# --- audit review -----------------------------------------------------------------------------


def test_filters_and_a_highlighted_protected_read(client: Any) -> None:
    page = client.get("/audit", params={"actor": "sandbox", "run": RUN}).text
    assert "Chain: intact" in page
    rows = re.findall(r'<tr class="rec( protected)?"', page)
    assert rows == [" protected"]
    assert "protected read: /vault/confirm-a/labels.npy" in page
    assert (
        "run_start" not in client.get("/audit", params={"event": "llm_attempt"}).text.split('id="records"')[1]
    )


def test_hostile_payloads_render_inert(client: Any, console_home: ConsoleHome) -> None:
    for page in (client.get(f"/audit/blob/{console_home.blob}").text, client.get("/audit").text):
        assert "<script>" not in page and "\x1b" not in page
        assert "&lt;script&gt;" in page
        assert "ignore previous instructions" in page
    assert "\\x1b[31mRED" in client.get(f"/audit/blob/{console_home.blob}").text


def test_agent_text_in_chat_and_lists_renders_inert(client: Any, console_home: ConsoleHome) -> None:
    from agents.approvals import ApprovalQueue
    from tests.console.conftest import HOSTILE, data_request

    hostile = data_request("r1-dr2").model_copy(update={"hypothesis": HOSTILE})
    ApprovalQueue(console_home.home.state_db, console_home.log).request(hostile, RUN)
    for page in (client.get("/approvals/r1-dr2").text, client.get("/approvals").text):
        assert "<script>" not in page and "\x1b" not in page and "&lt;script&gt;" in page


def test_a_value_a_template_prints_without_the_filter_is_inert_too(
    client: Any, console_home: ConsoleHome
) -> None:
    """The stop reason can quote a model's error text, and the run pages print it with no filter:
    the environment's ``finalize`` writes its controls out all the same."""
    reason = "proposer failed: \x1b[31mRED\x1b]0;pwned\x07 \u202eevil"
    console_home.log.append("system", "run_end", {"stop_reason": reason}, run_id=RUN)
    for page in (client.get(f"/runs/{RUN}").text, client.get("/").text):
        assert not any(c in page for c in "\x1b\x07\u202e"), page
        assert "\\x1b[31mRED\\x1b]0;pwned\\x07 \\u202eevil" in page


def test_a_tampered_log_shows_a_broken_chain(client: Any, console_home: ConsoleHome) -> None:
    log = console_home.home.audit / "log.jsonl"
    log.write_text(log.read_text().replace("ticket_started", "ticket_startex"))
    assert "Chain: BROKEN" in client.get("/audit").text


# --- approvals chat ---------------------------------------------------------------------------


def _say(client: Any, text: str) -> str:
    csrf = csrf_of(client.get(f"/approvals/{REQUEST}").text)
    client.post(f"/approvals/{REQUEST}/reply", data={"text": text, "csrf": csrf})
    return client.get(f"/approvals/{REQUEST}").text


def _confirm(client: Any, page: str) -> str:
    message = re.findall(r'name="message_id" value="(\d+)"', page)[-1]
    client.post(f"/approvals/{REQUEST}/confirm", data={"message_id": message, "csrf": csrf_of(page)})
    return client.get(f"/approvals/{REQUEST}").text


def test_approve_in_own_words_then_confirm_queues_the_data_ticket(
    client: Any, console_home: ConsoleHome
) -> None:
    page = _say(client, "approve 200, thin voids only")
    assert "I read this as: APPROVE, for 200 images, limited to: thin voids only" in page
    assert client.get("/api/approvals").json()["requests"][0]["status"] == "pending"  # nothing decided yet
    page = _confirm(client, page)
    assert "Data ticket r1-dr1-data is queued for run r1" in page
    approved = client.get(f"/api/runs/{RUN}").json()["approved_data_tickets"]
    assert approved == [{"id": "r1-dr1-data", "taken": False}]
    decided = _records(console_home, "approval_decided")
    assert decided[0].actor == "human" and decided[0].payload["reason"] == "count=200; scope=thin voids only"


def test_double_approval_changes_nothing_and_says_so(client: Any, console_home: ConsoleHome) -> None:
    first = _say(client, "approve")
    _confirm(client, first)
    again = _confirm(client, first)  # the same confirmation, e.g. a double click or a resent form
    assert "already confirmed or replaced" in again
    assert "already approved" in _say(client, "approve")
    assert len(_records(console_home, "approval_decided")) == 1


def test_an_ambiguous_reply_gets_a_question_not_a_guess(client: Any) -> None:
    page = _say(client, "yes but not now")
    assert "Do you approve or deny request r1-dr1?" in page
    assert 'name="message_id"' not in page  # nothing to confirm
    assert client.get("/api/approvals").json()["requests"][0]["status"] == "pending"


def test_a_question_is_answered_and_nothing_decided(client: Any) -> None:
    page = _say(client, "what does it cost?")
    assert "I can only tell you what the request says" in page
    assert client.get("/api/approvals").json()["requests"][0]["status"] == "pending"


def test_deny_with_a_reason(client: Any, console_home: ConsoleHome) -> None:
    page = _confirm(client, _say(client, "deny: too expensive"))
    assert "Denied: too expensive" in page
    assert client.get("/api/approvals").json()["requests"][0]["reason"] == "too expensive"
    assert client.get(f"/api/runs/{RUN}").json()["approved_data_tickets"] == []


def test_approval_for_an_ended_run_is_recorded_and_says_it_will_not_run(
    client: Any, console_home: ConsoleHome
) -> None:
    console_home.log.append("system", "run_end", {"stop_reason": "budget: wall"}, run_id=RUN)
    page = _say(client, "approve")
    assert "has ended (budget: wall), so its queue takes no new tickets" in page  # warned before confirming
    page = _confirm(client, page)
    assert "has ended (budget: wall)" in page and "will not run in it" in page
    assert client.get("/api/approvals").json()["requests"][0]["status"] == "approved"  # the decision is kept
    assert _records(console_home, "approval_decided")[0].payload["status"] == "approved"


def test_a_huge_reply_is_refused_and_nothing_read(client: Any, console_home: ConsoleHome) -> None:
    csrf = csrf_of(client.get(f"/approvals/{REQUEST}").text)
    reply = client.post(
        f"/approvals/{REQUEST}/reply", data={"text": "approve " * MAX_REPLY_CHARS, "csrf": csrf}
    )
    assert reply.status_code == 413 and "at most 2000 characters" in reply.text
    assert not _records(console_home, "approval_reply")


def test_bearer_callers_get_json_and_need_no_csrf(client: Any) -> None:
    auth = {"Authorization": "Bearer test-token"}
    from fastapi.testclient import TestClient

    with TestClient(client.app, base_url="http://127.0.0.1") as script:
        answer = script.post(f"/approvals/{REQUEST}/reply", data={"text": "approve"}, headers=auth).json()
        assert answer["pending"] is True
        done = script.post(
            f"/approvals/{REQUEST}/confirm", data={"message_id": answer["id"]}, headers=auth
        ).json()
        assert "queued for run r1" in done["text"]


# --- runs -------------------------------------------------------------------------------------


def test_run_page_shows_verdicts_and_plots(client: Any, console_home: ConsoleHome) -> None:
    from PIL import Image

    people = console_home.home.people_dir(RUN)
    people.mkdir(parents=True)
    Image.new("L", (8, 8)).save(people / "dice.png")
    page = client.get(f"/runs/{RUN}").text
    assert "r1-t001" in page and "NO_WIN" in page and f"/runs/{RUN}/plots/dice.png" in page
    assert "lower lr helps thin voids" in page and "no WIN on confirm-a" in page
    assert client.get(f"/runs/{RUN}/plots/dice.png").headers["content-type"] == "image/png"
    assert client.get(f"/runs/{RUN}/plots/../../../home.json").status_code in (400, 404)
    assert [r["run_id"] for r in client.get("/api/runs").json()["runs"]] == [RUN]  # approval threads left out
    assert client.get(f"/api/runs/{RUN}").json()["tickets_run"] == 1


def test_a_ticket_training_now_shows_its_latest_epoch_as_numbers_marked_not_evidence(
    client: Any, console_home: ConsoleHome
) -> None:
    from runner._progress import PROGRESS_FILE, CurveWatcher
    from tests.console.conftest import HOSTILE

    tickets = console_home.home.tickets_dir(RUN)
    work = tickets / "r1-t009" / "work"
    (work / "out").mkdir(parents=True)
    (work / "out" / "learning_curve.jsonl").write_text(
        json.dumps({"epoch": 1, "train_loss": 0.4321, "note": HOSTILE}) + "\n"
    )
    CurveWatcher(work, "r1-t009", 4, 12.0, 120.0, None, record=tickets / "r1-t009" / PROGRESS_FILE).poll()
    (tickets / "r1-t008").mkdir()  # finished: an outcome beside its last progress is not training
    (tickets / "r1-t008" / PROGRESS_FILE).write_text(json.dumps({"epoch": 4, "epochs": 4}))
    (tickets / "r1-t008" / "outcome.json").write_text("{}")

    training = client.get(f"/api/runs/{RUN}").json()["training"]
    assert [t["ticket_id"] for t in training] == ["r1-t009"]
    row = training[0]
    assert (row["epoch"], row["epochs"], row["train_loss"]) == (2, 4, 0.4321) and "not evidence" in row[
        "note"
    ]
    assert row["device_seconds_spent"] >= 12.0 and row["device_seconds_left"] <= 108.0
    assert "script" not in json.dumps(training)  # the sandbox's text never reaches the page
    page = client.get(f"/runs/{RUN}").text
    assert "r1-t009</code> epoch 2/4, train loss 0.4321" in page


def test_a_huge_blob_is_cut_and_says_so(client: Any, console_home: ConsoleHome) -> None:
    from console._audit_view import MAX_BLOB_BYTES

    ref = console_home.log.put_blob(b"A" * (MAX_BLOB_BYTES + 1000))
    page = client.get(f"/audit/blob/{ref}").text
    assert "1000 more bytes not shown" in page
    assert "is missing" in client.get(f"/audit/blob/blob:{'0' * 64}").text
