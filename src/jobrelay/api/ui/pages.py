"""The console's pages under /ui: HTML rendered on the server from the same services the
JSON routes use (overview, health, jobs, batches), never SQL. Admin pages (overview, jobs,
health) need the admin role like their JSON routes; batch pages need membership of the
batch's organization, checked by the API's own `owned_by_caller` (another organization's
batch is the same 404 page as a missing one). Every POST checks the session's CSRF token."""

from __future__ import annotations

import datetime as dt
import uuid
from functools import partial
from typing import Annotated, Any
from urllib.parse import parse_qs, quote, urlencode

import httpx
from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from jobrelay.api.deps import ServicesDep, owned_by_caller
from jobrelay.api.ui.hosted_ui import HostedUi, LoginFailed
from jobrelay.api.ui.render import codec, render
from jobrelay.api.ui.session import Session, check_csrf
from jobrelay.auth.tokens import Caller
from jobrelay.bootstrap import Services
from jobrelay.children.views import Code2WfView
from jobrelay.domain.errors import FieldError, Forbidden, InvalidInput, NotFound, Unauthenticated
from jobrelay.domain.jobs import JobStatus
from jobrelay.jobs.models import JobFilter
from jobrelay.protocol.outcomes import ChildKind

router = APIRouter()

JOBS_PAGE = 50
BATCHES_PAGE = 25
ITEMS_PAGE = 100
MAX_PAGE_NUMBER = 10_000
MAX_SUBJECT = 128


class LoginRequired(Exception):
    """No valid session: the error handler redirects to the login page."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


async def ui_caller(request: Request, services: ServicesDep) -> Caller:
    """The caller of the session's JWT, verified like the API's bearer tokens."""
    session = codec(request).load(request)
    if session is None or session.token is None:
        raise LoginRequired(request.url.path)
    try:
        return await services.tokens.verify(session.token)
    except Unauthenticated:
        raise LoginRequired(request.url.path) from None


UiCallerDep = Annotated[Caller, Depends(ui_caller)]


async def ui_admin(caller: UiCallerDep) -> Caller:
    """The caller when it holds the admin role; else the 403 page."""
    if not caller.is_admin:
        raise Forbidden("this page needs the admin role")
    return caller


UiAdminDep = Annotated[Caller, Depends(ui_admin)]


async def form_of(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (the last value of each)."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}


async def checked_form(request: Request) -> tuple[Session, dict[str, str]]:
    """The session and the form of a POST whose CSRF token matches (else 403)."""
    form = await form_of(request)
    session = codec(request).load(request)
    check_csrf(session, form.get("csrf"))
    assert session is not None
    return session, form


def _see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


# -- login -------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
async def home(caller: UiCallerDep) -> Response:
    return _see_other("/ui/overview" if caller.is_admin else "/ui/batches")


def hosted_ui(request: Request) -> HostedUi | None:
    """The Cognito Hosted UI client, when the console logs in through it."""
    found: HostedUi | None = request.app.state.hosted_ui
    return found


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, services: ServicesDep, next: str = "/ui/") -> Response:
    hosted = hosted_ui(request)
    if hosted is not None:
        url, state = await hosted.start(request, _safe_next(next))
        response = _see_other(url)
        hosted.save_state(response, state)
        return response
    if services.local_issuer is None:
        return render(request, "not_configured.html", {}, status_code=501)
    return render(request, "login.html", {"next": _safe_next(next)})


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request, services: ServicesDep) -> Response:
    _, form = await checked_form(request)
    if services.local_issuer is None:
        return render(request, "not_configured.html", {}, status_code=501)
    subject = form.get("subject", "").strip()
    if not subject or len(subject) > MAX_SUBJECT:
        raise InvalidInput(
            "invalid login", [FieldError("subject", f"give 1 to {MAX_SUBJECT} characters")]
        )
    token = services.local_issuer.mint(
        subject, admin=form.get("admin") == "on", ttl_s=codec(request).ttl_s
    )
    response = _see_other(_safe_next(form.get("next", "/ui/")))
    codec(request).save(response, Session.new(token))  # a new CSRF token per login
    return response


CallbackParam = Annotated[str | None, Query(max_length=4096)]


@router.get("/auth/callback", response_class=HTMLResponse, name="auth_callback")
async def auth_callback(
    request: Request,
    services: ServicesDep,
    code: CallbackParam = None,
    state: CallbackParam = None,
    error: CallbackParam = None,
    error_description: CallbackParam = None,
) -> Response:
    """The Hosted UI's redirect back: state, code exchange with PKCE, token checks, session."""
    hosted = hosted_ui(request)
    if hosted is None:
        raise NotFound("the console does not log in through the Cognito Hosted UI")
    try:
        login = hosted.load_state(request, state)
        if error:
            because = f": {error_description}" if error_description else ""
            raise LoginFailed(401, f"Cognito did not log you in ({error}{because})")
        if not code:
            raise LoginFailed(400, "the Hosted UI's answer has no authorization code")
        tokens = await hosted.exchange(request, code, login)
        try:
            caller = await services.tokens.verify(tokens.access_token)
            sub = await services.tokens.verify_id_token(
                tokens.id_token, client_id=hosted.client_id, nonce=login.nonce
            )
        except Unauthenticated as exc:
            raise LoginFailed(401, f"Cognito's tokens were refused: {exc}") from None
        except httpx.HTTPError as exc:
            raise LoginFailed(
                502, f"the user pool's signing keys could not be fetched ({type(exc).__name__})"
            ) from None
        if sub != caller.sub:
            raise LoginFailed(401, "the ID token and the access token name different users")
    except LoginFailed as exc:
        context = {"status": exc.status, "title": "Login failed", "detail": exc.detail}
        page = render(request, "error.html", {**context, "errors": []}, status_code=exc.status)
        hosted.clear_state(page)
        return page
    response = _see_other(_safe_next(login.next_path))
    codec(request).save(response, Session.new(tokens.access_token))  # a new CSRF token
    hosted.clear_state(response)
    return response


@router.post("/logout", response_class=HTMLResponse)
async def logout(request: Request) -> Response:
    """Clears the session; with the Hosted UI, also its session (Cognito's /logout)."""
    await checked_form(request)
    hosted = hosted_ui(request)
    response = _see_other(hosted.logout_url(request) if hosted else "/ui/login")
    codec(request).save(response, Session.new())
    return response


@router.get("/logged-out", response_class=HTMLResponse)
async def logged_out(request: Request) -> Response:
    """Where Cognito's /logout sends the browser back."""
    return render(request, "logged_out.html", {})


def _safe_next(target: str) -> str:
    """Only paths of the console: never an absolute or scheme-relative URL."""
    if target.startswith("/ui/") and not target.startswith("/ui//") and "\\" not in target:
        return target
    return "/ui/"


# -- overview and health (admins) --------------------------------------------------------


@router.get("/overview", response_class=HTMLResponse)
async def overview(request: Request, caller: UiAdminDep, services: ServicesDep) -> Response:
    data = await services.console.overview()
    return render(request, "overview.html", {"caller": caller, "o": data})


@router.get("/overview/live", response_class=HTMLResponse)
async def overview_live(request: Request, _: UiAdminDep, services: ServicesDep) -> Response:
    """The overview's body alone, fetched by the page every few seconds."""
    data = await services.console.overview()
    return render(request, "_overview_live.html", {"o": data})


@router.get("/health", response_class=HTMLResponse)
async def health(request: Request, caller: UiAdminDep, services: ServicesDep) -> Response:
    data = await services.console.health()
    return render(request, "health.html", {"caller": caller, "h": data})


# -- jobs (admins) -----------------------------------------------------------------------


_FILTER_TEXT = ("type", "status", "class", "sourceKey", "dedupeKey")
_FILTER_TIMES = ("createdFrom", "createdTo", "finishedFrom", "finishedTo")


def _parse_time(path: str, value: str, errors: list[FieldError]) -> dt.datetime | None:
    """A time of the filter form (`datetime-local` gives `2026-12-01T15:04`; naive = UTC)."""
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value)
    except ValueError:
        errors.append(FieldError(path, f"not a time: {value[:40]!r} (use 2026-12-01T15:04)"))
        return None


def _job_filter(values: dict[str, str]) -> JobFilter:
    """The filter of the jobs page's form; raises `InvalidInput` naming every bad field
    (times here, the rest in `check_filter`)."""
    errors: list[FieldError] = []
    times = {name: _parse_time(name, values[name], errors) for name in _FILTER_TIMES}
    if errors:
        raise InvalidInput("invalid job filter", errors)
    return JobFilter(
        type=values["type"] or None,
        status=values["status"] or None,
        concurrency_class=values["class"] or None,
        source_key=values["sourceKey"] or None,
        dedupe_key=values["dedupeKey"] or None,
        created_from=times["createdFrom"],
        created_to=times["createdTo"],
        finished_from=times["finishedFrom"],
        finished_to=times["finishedTo"],
    )


@router.get("/jobs", response_class=HTMLResponse)
async def jobs(
    request: Request,
    caller: UiAdminDep,
    services: ServicesDep,
    before: uuid.UUID | None = None,
) -> Response:
    values = {
        name: request.query_params.get(name, "").strip() for name in (*_FILTER_TEXT, *_FILTER_TIMES)
    }
    page = await services.jobs.list_jobs(filter=_job_filter(values), limit=JOBS_PAGE, before=before)
    query = urlencode({k: v for k, v in values.items() if v})
    context = {
        "caller": caller,
        "jobs": page.jobs,
        "next_before": page.next_before,
        "filters": values,
        "query": query,
        "statuses": [s.value for s in JobStatus],
    }
    return render(request, "jobs.html", context)


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
async def job(
    request: Request, job_id: uuid.UUID, caller: UiAdminDep, services: ServicesDep
) -> Response:
    found = await services.jobs.get(job_id)
    context = {
        "caller": caller,
        "job": found,
        "attempts": await services.jobs.attempts(job_id),
        "diagnosis": await services.jobs.diagnose(job_id),
        "children": await services.jobs.children(job_id),
    }
    return render(request, "job.html", context)


@router.post("/jobs/{job_id}/retry", response_class=HTMLResponse)
async def retry_job(
    request: Request, job_id: uuid.UUID, _: UiAdminDep, services: ServicesDep
) -> Response:
    await checked_form(request)
    await services.jobs.retry(job_id)
    return _see_other(f"/ui/jobs/{job_id}")


@router.post("/jobs/{job_id}/cancel", response_class=HTMLResponse)
async def cancel_job(
    request: Request, job_id: uuid.UUID, _: UiAdminDep, services: ServicesDep
) -> Response:
    await checked_form(request)
    await services.jobs.cancel(job_id)
    return _see_other(f"/ui/jobs/{job_id}")


# -- batches (members of the organization) -----------------------------------------------


@router.get("/batches", response_class=HTMLResponse)
async def projects(request: Request, caller: UiCallerDep, services: ServicesDep) -> Response:
    organizations = await services.tenancy.organizations_of(caller.sub)
    return render(request, "projects.html", {"caller": caller, "organizations": organizations})


@router.get("/projects/{project_id}/batches", response_class=HTMLResponse)
async def project_batches(
    request: Request,
    caller: UiCallerDep,
    services: ServicesDep,
    project_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
    page: Annotated[int, Query(ge=1, le=MAX_PAGE_NUMBER)] = 1,
) -> Response:
    scope = await services.tenancy.project_scope(caller.sub, project_id)
    batches, more = await services.batches.list_for_project(
        scope.project_id, limit=BATCHES_PAGE, offset=(page - 1) * BATCHES_PAGE
    )
    context = {
        "caller": caller,
        "project_id": scope.project_id,
        "batches": batches,
        "page": page,
        "more": more,
    }
    return render(request, "batches.html", context)


async def _visible_batch(caller: Caller, services: Services, batch_id: str) -> str:
    await owned_by_caller(caller, services, "batch", services.batches.owner, batch_id)
    return batch_id


BatchPath = Annotated[str, Path(min_length=1, max_length=255)]


@router.get("/batches/{batch_id}", response_class=HTMLResponse)
async def batch(
    request: Request,
    batch_id: BatchPath,
    caller: UiCallerDep,
    services: ServicesDep,
    after: Annotated[int, Query(ge=-1, le=2**31 - 1)] = -1,
) -> Response:
    await _visible_batch(caller, services, batch_id)
    context: dict[str, Any] = {
        "caller": caller,
        "batch": await services.batches.get(batch_id),
        "items": await services.batches.items(batch_id, after=after, limit=ITEMS_PAGE),
        "after": after,
    }
    return render(request, "batch.html", context)


@router.get("/batches/{batch_id}/live", response_class=HTMLResponse)
async def batch_live(
    request: Request, batch_id: BatchPath, caller: UiCallerDep, services: ServicesDep
) -> Response:
    """The batch's status and progress bar alone, fetched by the page every few seconds."""
    await _visible_batch(caller, services, batch_id)
    return render(request, "_batch_live.html", {"batch": await services.batches.get(batch_id)})


@router.post("/batches/{batch_id}/cancel", response_class=HTMLResponse)
async def cancel_batch(
    request: Request, batch_id: BatchPath, caller: UiCallerDep, services: ServicesDep
) -> Response:
    await checked_form(request)
    await _visible_batch(caller, services, batch_id)
    await services.batches.cancel(batch_id, actor=caller.sub)
    return _see_other(f"/ui/batches/{quote(batch_id, safe='')}")


# -- children of batches, Code2WF generations (members of the organization) --------------

CHILD_STATUS = {"0": "processing", "1": "completed", "2": "failed", "3": "cancelled"}
GENERATIONS_SHOWN = 50
CODE2WF_PAGE = 50
ChildPath = Annotated[str, Path(min_length=1, max_length=255)]


async def _child_page(
    request: Request, caller: Caller, services: Services, kind: ChildKind, child_id: str
) -> Response:
    """A Page Import or Code2Des row: status, request, outputs, error, and the dispatch
    state of the batch item that carries it; a Page Import lists its Code2WF generations."""
    owner = partial(services.children.owner, kind)
    await owned_by_caller(caller, services, kind, owner, child_id)
    child = await services.children.get(kind, child_id)
    batch_id = child.batch_id
    item = None if batch_id is None else await services.batches.item_of_child(batch_id, child_id)
    generations = (
        await services.code2wf.of_page_import(child_id, limit=GENERATIONS_SHOWN)
        if kind == "page_import"
        else []
    )
    context = {
        "caller": caller,
        "kind": kind,
        "title": "Page Import" if kind == "page_import" else "Code2Des",
        "child": child,
        "status_name": CHILD_STATUS[child.status],
        "item": item,
        "generations": generations,
        "generations_shown": GENERATIONS_SHOWN,
        "statuses": CHILD_STATUS,
    }
    return render(request, "child.html", context)


@router.get("/page-imports/{child_id}", response_class=HTMLResponse)
async def page_import(
    request: Request, child_id: ChildPath, caller: UiCallerDep, services: ServicesDep
) -> Response:
    return await _child_page(request, caller, services, "page_import", child_id)


@router.get("/code2des/{child_id}", response_class=HTMLResponse)
async def code2des(
    request: Request, child_id: ChildPath, caller: UiCallerDep, services: ServicesDep
) -> Response:
    return await _child_page(request, caller, services, "code2des", child_id)


@router.get("/code2wf/{code2wf_id}", response_class=HTMLResponse)
async def code2wf(
    request: Request, code2wf_id: ChildPath, caller: UiCallerDep, services: ServicesDep
) -> Response:
    await owned_by_caller(caller, services, "code2wf", services.code2wf.owner, code2wf_id)
    generation = await services.code2wf.get(code2wf_id)
    context = {
        "caller": caller,
        "g": generation,
        "status_name": CHILD_STATUS[generation.status],
    }
    return render(request, "code2wf.html", context)


@router.get("/projects/{project_id}/code2wf", response_class=HTMLResponse)
async def discover_code2wf(
    request: Request,
    caller: UiCallerDep,
    services: ServicesDep,
    project_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
    figma_file_key: Annotated[str, Query(alias="figmaFileKey", max_length=255)] = "",
    status: Annotated[str, Query(max_length=40)] = "",
    after: Annotated[str, Query(max_length=255)] = "",
) -> Response:
    """Code2WF discovery by Figma file key (the plugin's view, `GET
    /v1/projects/{projectId}/code2wf`): a form, then the file's generations by pages."""
    scope = await services.tenancy.project_scope(caller.sub, project_id)
    figma_file_key, status = figma_file_key.strip(), status.strip()
    if status and status not in ("0", "1", "2"):
        raise InvalidInput(
            "invalid discovery filter",
            [FieldError("status", f"unknown status {status[:40]!r} (0, 1 or 2)")],
        )
    generations: list[Code2WfView] = []
    next_after = None
    if figma_file_key:
        generations, next_after = await services.code2wf.discover(
            scope,
            figma_file_key=figma_file_key,
            status=status or None,
            limit=CODE2WF_PAGE,
            after=after or None,
        )
    context = {
        "caller": caller,
        "project_id": scope.project_id,
        "figma_file_key": figma_file_key,
        "status": status,
        "generations": generations,
        "next_after": next_after,
        "searched": bool(figma_file_key),
        "statuses": {k: v for k, v in CHILD_STATUS.items() if k in ("0", "1", "2")},
    }
    return render(request, "code2wf_discover.html", context)
