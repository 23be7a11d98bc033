"""Each API operation as a `Call` (method, path, body, how to read the answer, whether it
may be repeated), built once here for both clients, and the retry rule they share."""

from __future__ import annotations

import email.utils
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter

from jobrelay.client import models
from jobrelay.client.errors import error_of

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

IDEMPOTENCY_HEADER = "Idempotency-Key"
RETRIED_STATUSES = frozenset({502, 503, 504})


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and the reading of its answer.

    `idempotent`: sending it twice has the effect of sending it once (reads, deletes,
    cancels, and creations with an idempotency key), so a 503 or a connection lost after
    sending may be retried."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    json: Any = None
    params: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    idempotent: bool = True

    def request(self, client: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        params = {k: _wire(v) for k, v in self.params.items() if v is not None}
        return client.build_request(
            self.method, self.path, json=self.json, params=params, headers=dict(self.headers)
        )


@dataclass(frozen=True)
class Retries:
    """When and how long to wait before sending a call again.

    A call is sent at most `attempts` times. A connection that could not be made is retried
    for every call (nothing was sent); a 502/503/504 or a connection lost after sending only
    for idempotent calls. The wait is exponential with full jitter (`base_s`, doubling, at
    most `cap_s`), and at least the answer's `Retry-After` (at most `max_retry_after_s`)."""

    attempts: int = 5
    base_s: float = 0.25
    cap_s: float = 8.0
    max_retry_after_s: float = 30.0

    def delay_s(self, attempt: int, retry_after_s: float | None) -> float:
        """The wait after failed attempt number `attempt` (1 = the first)."""
        backoff = random.uniform(0, min(self.cap_s, self.base_s * 2 ** (attempt - 1)))
        if retry_after_s is None:
            return backoff
        return max(backoff, min(retry_after_s, self.max_retry_after_s))

    def retries_error(self, call: Call[Any], exc: httpx.TransportError) -> bool:
        """Whether `exc`, raised while sending `call`, is worth another attempt."""
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
            return True  # the request never left
        return call.idempotent

    def retries_answer(self, call: Call[Any], response: httpx.Response) -> bool:
        return call.idempotent and response.status_code in RETRIED_STATUSES


def retry_after_s(response: httpx.Response) -> float | None:
    """The answer's `Retry-After` in seconds (delta-seconds or an HTTP date), if any."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def raise_for_problem(response: httpx.Response) -> None:
    """Raise the `ApiError` of an error answer; nothing for a success."""
    if response.is_success:
        return
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    raise error_of(response.status_code, body, retry_after_s(response))


def _model(model: type[M]) -> Callable[[httpx.Response], M]:
    def read(response: httpx.Response) -> M:
        raise_for_problem(response)
        return model.model_validate(response.json())

    return read


def _nothing(response: httpx.Response) -> None:
    raise_for_problem(response)


def _raw(response: httpx.Response) -> bytes:
    raise_for_problem(response)
    return response.content


_ATTEMPTS = TypeAdapter(list[models.Attempt])


def _attempts(response: httpx.Response) -> list[models.Attempt]:
    raise_for_problem(response)
    return _ATTEMPTS.validate_python(response.json()["items"])


def _wire(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


def _segment(value: object) -> str:
    return quote(str(value), safe="")


def _creating(key: str | None) -> dict[str, str]:
    # Every creation carries a key, so that a retry after a lost answer cannot create twice.
    return {IDEMPOTENCY_HEADER: key or str(uuid.uuid4())}


def _body(**fields: Any) -> dict[str, Any]:
    """A JSON body without the fields left at None (the server's defaults apply)."""
    return {name: value for name, value in fields.items() if value is not None}


# --- the operations, named by their operation ids --------------------------------------------


def get_me() -> Call[models.Me]:
    return Call("GET", "/v1/me", _model(models.Me))


def enqueue_job(
    type: str,
    payload: Mapping[str, Any],
    *,
    priority: int | None,
    delay_s: float | None,
    run_at: Any,
    max_attempts: int | None,
    idempotency_key: str | None,
) -> Call[models.Enqueued]:
    body = _body(
        type=type,
        payload=dict(payload),
        priority=priority,
        delay=delay_s,
        runAt=_wire(run_at) if run_at is not None else None,
        maxAttempts=max_attempts,
    )
    return Call(
        "POST", "/v1/jobs", _model(models.Enqueued), json=body, headers=_creating(idempotency_key)
    )


def get_job(job_id: uuid.UUID | str) -> Call[models.Job]:
    return Call("GET", f"/v1/jobs/{_segment(job_id)}", _model(models.Job))


def list_jobs(
    *, type: str | None, status: str | None, limit: int, cursor: uuid.UUID | str | None
) -> Call[models.JobPage]:
    params = {"type": type, "status": status, "limit": limit, "cursor": cursor}
    return Call("GET", "/v1/jobs", _model(models.JobPage), params=params)


def list_job_attempts(job_id: uuid.UUID | str) -> Call[list[models.Attempt]]:
    return Call("GET", f"/v1/jobs/{_segment(job_id)}/attempts", _attempts)


def cancel_job(job_id: uuid.UUID | str) -> Call[models.Job]:
    # Cancelling twice answers 409 the second time: not repeated on its own.
    path = f"/v1/jobs/{_segment(job_id)}/cancel"
    return Call("POST", path, _model(models.Job), idempotent=False)


def retry_job(job_id: uuid.UUID | str) -> Call[models.Job]:
    path = f"/v1/jobs/{_segment(job_id)}/retry"
    return Call("POST", path, _model(models.Job), idempotent=False)


def create_workflow(
    name: str,
    steps: Sequence[Mapping[str, Any]],
    *,
    fairness_key: str | None,
    idempotency_key: str | None,
) -> Call[models.Workflow]:
    body = _body(name=name, steps=[dict(step) for step in steps], fairnessKey=fairness_key)
    return Call(
        "POST",
        "/v1/workflows",
        _model(models.Workflow),
        json=body,
        headers=_creating(idempotency_key),
    )


def get_workflow(
    workflow_id: uuid.UUID | str, *, step_limit: int | None, steps_after: str | None
) -> Call[models.Workflow]:
    params = {"stepLimit": step_limit, "stepsAfter": steps_after}
    path = f"/v1/workflows/{_segment(workflow_id)}"
    return Call("GET", path, _model(models.Workflow), params=params)


def list_workflows(
    *, status: str | None, name: str | None, limit: int, cursor: uuid.UUID | str | None
) -> Call[models.WorkflowPage]:
    params = {"status": status, "name": name, "limit": limit, "cursor": cursor}
    return Call("GET", "/v1/workflows", _model(models.WorkflowPage), params=params)


def cancel_workflow(workflow_id: uuid.UUID | str) -> Call[models.Workflow]:
    path = f"/v1/workflows/{_segment(workflow_id)}/cancel"
    return Call("POST", path, _model(models.Workflow))  # a cancelled one is answered as is


def retry_workflow(workflow_id: uuid.UUID | str) -> Call[models.Workflow]:
    path = f"/v1/workflows/{_segment(workflow_id)}/retry"
    # Sent again after the retried workflow completed, it would be a 409: not repeated.
    return Call("POST", path, _model(models.Workflow), idempotent=False)


def create_batch(
    project_id: int,
    type: models.BatchType,
    items: Sequence[Mapping[str, Any]],
    *,
    idempotency_key: str | None,
) -> Call[models.Batch]:
    body = {"type": type, "items": [dict(item) for item in items]}
    path = f"/v1/projects/{project_id}/batches"
    headers = _creating(idempotency_key)
    return Call("POST", path, _model(models.Batch), json=body, headers=headers)


def get_batch(batch_id: str) -> Call[models.Batch]:
    return Call("GET", f"/v1/batches/{_segment(batch_id)}", _model(models.Batch))


def list_batch_items(batch_id: str, *, after: int, limit: int) -> Call[models.BatchItemPage]:
    path = f"/v1/batches/{_segment(batch_id)}/items"
    params = {"after": after, "limit": limit}
    return Call("GET", path, _model(models.BatchItemPage), params=params)


def cancel_batch(batch_id: str) -> Call[models.Batch]:
    return Call("POST", f"/v1/batches/{_segment(batch_id)}/cancel", _model(models.Batch))


def delete_batch(batch_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/batches/{_segment(batch_id)}", _nothing)


def get_page_import(page_import_id: str) -> Call[models.Child]:
    return Call("GET", f"/v1/page-imports/{_segment(page_import_id)}", _model(models.Child))


def get_code2des(code2des_id: str) -> Call[models.Child]:
    return Call("GET", f"/v1/code2des/{_segment(code2des_id)}", _model(models.Child))


def create_code2wf(
    project_id: int,
    *,
    page_import_id: str,
    figma_file_key: str,
    screen_id: str,
    placement_target: str | None,
    idempotency_key: str | None,
) -> Call[models.Code2Wf]:
    body = _body(
        pageImportId=page_import_id,
        figmaFileKey=figma_file_key,
        screenId=screen_id,
        placementTarget=placement_target,
    )
    path = f"/v1/projects/{project_id}/code2wf"
    headers = _creating(idempotency_key)
    return Call("POST", path, _model(models.Code2Wf), json=body, headers=headers)


def list_code2wf(
    project_id: int,
    *,
    figma_file_key: str,
    status: models.GenerationStatus | None,
    limit: int,
    after: str | None,
) -> Call[models.Code2WfPage]:
    params = {"figmaFileKey": figma_file_key, "status": status, "limit": limit, "after": after}
    path = f"/v1/projects/{project_id}/code2wf"
    return Call("GET", path, _model(models.Code2WfPage), params=params)


def get_code2wf(code2wf_id: str) -> Call[models.Code2Wf]:
    return Call("GET", f"/v1/code2wf/{_segment(code2wf_id)}", _model(models.Code2Wf))


def get_code2wf_result(code2wf_id: str) -> Call[bytes]:
    return Call("GET", f"/v1/code2wf/{_segment(code2wf_id)}/result", _raw)


def materialize_code2wf(code2wf_id: str) -> Call[models.Code2Wf]:
    path = f"/v1/code2wf/{_segment(code2wf_id)}/materialize"
    return Call("POST", path, _model(models.Code2Wf))


def delete_code2wf(code2wf_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/code2wf/{_segment(code2wf_id)}", _nothing)
