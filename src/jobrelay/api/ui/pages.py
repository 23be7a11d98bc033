"""The console's pages under /ui: HTML rendered on the server from the same services the
JSON routes use (overview, health, jobs, batches), never SQL. Admin pages (overview, jobs,
health) need the admin role like their JSON routes; batch pages need membership of the
batch's organization, checked by the API's own `owned_by_caller` (another organization's
batch is the same 404 page as a missing one). Who the caller is, and every POST's CSRF check,
come from `login.py`."""

from __future__ import annotations

import datetime as dt
import uuid
from functools import partial
from typing import Annotated, Any, get_args
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import HTMLResponse, Response

from jobrelay.api.deps import ServicesDep, owned_by_caller
from jobrelay.api.schemas import GenerationStatus
from jobrelay.api.ui.login import UiCallerDep, checked_form, see_other
from jobrelay.api.ui.render import render
from jobrelay.auth.tokens import Caller
from jobrelay.bootstrap import Services
from jobrelay.children.views import Code2WfView
from jobrelay.domain.batch_status import CHILD_STATUS_NAMES
from jobrelay.domain.errors import FieldError, Forbidden, InvalidInput
from jobrelay.domain.jobs import JobStatus
from jobrelay.jobs.models import JobFilter
from jobrelay.protocol.outcomes import ChildKind

router = APIRouter()

JOBS_PAGE = 50
BATCHES_PAGE = 25
ITEMS_PAGE = 100
MAX_PAGE_NUMBER = 10_000


async def ui_admin(caller: UiCallerDep) -> Caller:
    """The caller when it holds the admin role; else the 403 page."""
    if not caller.is_admin:
        raise Forbidden("this page needs the admin role")
    return caller


UiAdminDep = Annotated[Caller, Depends(ui_admin)]


# -- home --------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
async def home(caller: UiCallerDep) -> Response:
    return see_other("/ui/overview" if caller.is_admin else "/ui/batches")


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
    return see_other(f"/ui/jobs/{job_id}")


@router.post("/jobs/{job_id}/cancel", response_class=HTMLResponse)
async def cancel_job(
    request: Request, job_id: uuid.UUID, _: UiAdminDep, services: ServicesDep
) -> Response:
    await checked_form(request)
    await services.jobs.cancel(job_id)
    return see_other(f"/ui/jobs/{job_id}")


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
    return see_other(f"/ui/batches/{quote(batch_id, safe='')}")


# -- children of batches, Code2WF generations (members of the organization) --------------

# A Code2WF generation is never cancelled: discovery filters by the codes the API accepts.
GENERATION_STATUSES: tuple[str, ...] = get_args(GenerationStatus)
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
        "status_name": CHILD_STATUS_NAMES[child.status],
        "item": item,
        "generations": generations,
        "generations_shown": GENERATIONS_SHOWN,
        "statuses": CHILD_STATUS_NAMES,
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
        "status_name": CHILD_STATUS_NAMES[generation.status],
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
    if status and status not in GENERATION_STATUSES:
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
        "statuses": {code: CHILD_STATUS_NAMES[code] for code in GENERATION_STATUSES},
    }
    return render(request, "code2wf_discover.html", context)
