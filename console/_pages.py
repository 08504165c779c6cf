"""The console's routes: runs, approvals chat, audit review, label review."""

from __future__ import annotations

import base64
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response

from console import _audit_view, _runs
from console._auth import Auth
from console._labels import image_png, latest_version, loop_summary, queue_datasets
from console._services import Services, page
from segfactory.errors import UsageError

router = APIRouter()
DATA_URL_PNG = "data:image/png;base64,"


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


async def _form(request: Request) -> dict[str, str]:
    """The POSTed form, after its CSRF token was checked against the session."""
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    Auth.check_csrf(request.state.session, fields.get("csrf") or request.headers.get("x-csrf-token"))
    return fields


# --- runs -------------------------------------------------------------------------------------


@router.get("/")
def runs_page(request: Request) -> Response:
    s = _services(request)
    runs = [{"id": r, **_runs.progress(s.home, r)} for r in _runs.list_runs(s.home)]
    return page(
        request,
        "runs.html",
        {"runs": runs, "pending": len([r for r in s.approvals.requests() if r.status == "pending"])},
    )


@router.get("/runs/{run_id}")
def run_page(request: Request, run_id: str) -> Response:
    s = _services(request)
    _runs.check_run_id(run_id)
    return page(
        request,
        "run.html",
        {
            "run": _runs.progress(s.home, run_id),
            "plots": _runs.plots(s.home, run_id),
            "queued": s.approvals.queued(run_id),
            "events": _runs.run_events(s.home, run_id)[-_runs.MAX_EVENTS :][::-1],
        },
    )


@router.get("/api/runs")
def runs_api(request: Request) -> JSONResponse:
    s = _services(request)
    return JSONResponse({"runs": [_runs.progress(s.home, r) for r in _runs.list_runs(s.home)]})


@router.get("/api/runs/{run_id}")
def run_api(request: Request, run_id: str) -> JSONResponse:
    s = _services(request)
    data = _runs.progress(s.home, _runs.check_run_id(run_id))
    tickets = [{"id": q["ticket"].id, "taken": q["taken"]} for q in s.approvals.queued(run_id)]
    return JSONResponse({**data, "approved_data_tickets": tickets})


@router.get("/runs/{run_id}/plots/{name:path}")
def plot(request: Request, run_id: str, name: str) -> FileResponse:
    return FileResponse(_runs.plot_path(_services(request).home, run_id, name), media_type="image/png")


# --- approvals --------------------------------------------------------------------------------


@router.get("/approvals")
def approvals_page(request: Request) -> Response:
    return page(request, "approvals.html", {"requests": _services(request).approvals.requests()[::-1]})


@router.get("/api/approvals")
def approvals_api(request: Request) -> JSONResponse:
    queue = _services(request).approvals.queue
    return JSONResponse(
        {
            "requests": [r.model_dump(mode="json") for r in queue.requests()],
            "escalations": [e.model_dump(mode="json") for e in queue.escalations()],
        }
    )


@router.get("/approvals/{request_id}")
def chat_page(request: Request, request_id: str) -> Response:
    s = _services(request)
    approval = s.approvals.request(request_id)
    return page(
        request,
        "chat.html",
        {
            "req": approval,
            "messages": s.approvals.thread(request_id),
            "queued": s.approvals.queued(approval.run_id),
            "ended": _runs.run_ended(s.home, approval.run_id),
        },
    )


@router.post("/approvals/{request_id}/reply")
async def chat_reply(request: Request, request_id: str) -> Response:
    form = await _form(request)
    s = _services(request)
    answer = s.approvals.reply(request_id, form.get("text", ""), s.person)
    return _after_chat(request, request_id, answer)


@router.post("/approvals/{request_id}/confirm")
async def chat_confirm(request: Request, request_id: str) -> Response:
    form = await _form(request)
    s = _services(request)
    answer = s.approvals.confirm(request_id, _int(form, "message_id"), s.person)
    return _after_chat(request, request_id, answer)


@router.post("/approvals/{request_id}/cancel")
async def chat_cancel(request: Request, request_id: str) -> Response:
    form = await _form(request)
    answer = _services(request).approvals.cancel(request_id, _int(form, "message_id"))
    return _after_chat(request, request_id, answer)


def _after_chat(request: Request, request_id: str, answer: Any) -> Response:
    if request.state.session.via_bearer:
        return JSONResponse(answer.model_dump(mode="json"))
    return RedirectResponse(f"/approvals/{request_id}#m{answer.id}", status_code=303)


def _int(form: dict[str, str], key: str) -> int:
    try:
        return int(form.get(key, ""))
    except ValueError as exc:
        raise UsageError(f"form field {key!r} must be a whole number") from exc


# --- audit ------------------------------------------------------------------------------------


@router.get("/audit")
def audit_page(request: Request) -> Response:
    s = _services(request)
    filters = _audit_view.AuditFilters.from_query(dict(request.query_params))
    anchor, checked = s.anchor()
    banner = _audit_view.chain_banner(s.home, anchor, checked)
    view = _audit_view.audit_page(s.home, filters, banner)
    return page(request, "audit.html", {"view": view, "filters": filters, "max_rows": _audit_view.MAX_ROWS})


@router.get("/audit/blob/{ref}")
def blob_page(request: Request, ref: str) -> Response:
    text, cut, problem = _audit_view.blob_text(
        _services(request).home, ref if ref.startswith("blob:") else f"blob:{ref}"
    )
    return page(request, "blob.html", {"ref": ref, "text": text, "cut": cut, "problem": problem})


# --- labels -----------------------------------------------------------------------------------


@router.get("/labels")
def labels_index(request: Request) -> Response:
    s = _services(request)

    sets = [{"ref": d, **s.labels.stats(d)} for d in queue_datasets(s.home)]
    return page(request, "labels.html", {"datasets": sets, **loop_summary(s.home)})


@router.get("/labels/{name}/{version}")
def label_queue(request: Request, name: str, version: str) -> Response:
    s = _services(request)

    ref = f"{name}/{version}"
    return page(
        request,
        "label_queue.html",
        {
            "ref": ref,
            "items": s.labels.queue(ref),
            "stats": s.labels.stats(ref),
            "newest": latest_version(s.home, name),
        },
    )


@router.get("/labels/{name}/{version}/{split}/{image_id}")
def label_editor(request: Request, name: str, version: str, split: str, image_id: int) -> Response:
    s = _services(request)
    ref = f"{name}/{version}"
    items = s.labels.queue(ref)
    item = next((i for i in items if i.split == split and i.image_id == image_id), None)
    if item is None:
        raise UsageError(f"image {image_id} of {ref}/{split} is not in the review queue")
    later = [i for i in items if i.action is None and i != item]
    return page(request, "label_edit.html", {"item": item, "next": later[0] if later else None})


@router.get("/labels/{name}/{version}/{split}/{image_id}/{kind}.png")
def label_png(request: Request, name: str, version: str, split: str, image_id: int, kind: str) -> Response:
    if kind not in ("image", "mask"):
        raise UsageError(f"no {kind}.png; use image.png or mask.png")
    png = image_png(_services(request).home, f"{name}/{version}", split, image_id, mask=kind == "mask")
    return Response(png, media_type="image/png")


@router.post("/labels/{name}/{version}/{split}/{image_id}/decide")
async def label_decide(request: Request, name: str, version: str, split: str, image_id: int) -> Response:
    form = await _form(request)
    s = _services(request)
    action = form.get("action", "")
    if action not in ("keep", "fix", "drop"):
        raise UsageError(f"action must be keep, fix or drop, got {action!r}")
    item = s.labels.decide(
        f"{name}/{version}",
        split,
        image_id,
        action,
        by=s.person,
        seconds=max(0.0, float(form.get("seconds") or 0)),
        rev_seen=_int(form, "rev"),
        mask_png=_mask(form.get("mask", "")) if action == "fix" else None,
    )
    if request.state.session.via_bearer:
        return JSONResponse(item.model_dump(mode="json"))
    after = form.get("next", "")
    return RedirectResponse(
        after if after.startswith("/labels/") else f"/labels/{name}/{version}", status_code=303
    )


@router.post("/labels/{name}/{version}/apply")
async def label_apply(request: Request, name: str, version: str) -> Response:
    await _form(request)
    s = _services(request)
    summary = s.labels.apply(f"{name}/{version}", by=s.person)
    if request.state.session.via_bearer:
        return JSONResponse(summary)
    return page(request, "applied.html", {"summary": summary})


def _mask(data_url: str) -> bytes:
    if not data_url.startswith(DATA_URL_PNG):
        raise UsageError("the fixed mask must come as a PNG data URL")
    try:
        return base64.b64decode(data_url[len(DATA_URL_PNG) :], validate=True)
    except ValueError as exc:
        raise UsageError("the fixed mask is not valid base64") from exc
