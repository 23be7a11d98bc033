"""`JobrelayClient` (sync) and `AsyncJobrelayClient`: the operations of `_calls`, sent with
retries. Both have the same methods; the async one's are coroutines."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import httpx

from jobrelay.client import _calls as calls
from jobrelay.client import models
from jobrelay.client._calls import Call, Retries, retry_after_s

T = TypeVar("T")
Token = str | Callable[[], str] | None

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 30.0


def _auth(token: Token) -> dict[str, str]:
    value = token() if callable(token) else token
    return {"Authorization": f"Bearer {value}"} if value else {}


class JobrelayClient:
    """A jobrelay API client over `httpx.Client`.

    `token`: the bearer token, or a function returning a fresh one for each request.
    `retries`: when calls are sent again (see `Retries`); `Retries(attempts=1)` never.
    Errors are `jobrelay.client.errors.ApiError` subclasses; a connection that stays down
    after the retries raises httpx's error. Use as a context manager, or call `close()`.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        token: Token = None,
        retries: Retries | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        http: httpx.Client | None = None,
    ) -> None:
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout_s)
        self._token = token
        self.retries = retries or Retries()

    def __enter__(self) -> JobrelayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, call: Call[T]) -> T:
        """Send `call`, again while `retries` allows, and read its answer."""
        attempt = 1
        while True:
            request = call.request(self._http)
            request.headers.update(_auth(self._token))
            try:
                response = self._http.send(request)
            except httpx.TransportError as exc:
                if attempt >= self.retries.attempts or not self.retries.retries_error(call, exc):
                    raise
                time.sleep(self.retries.delay_s(attempt, None))
            else:
                if attempt >= self.retries.attempts or not self.retries.retries_answer(
                    call, response
                ):
                    return call.read(response)
                time.sleep(self.retries.delay_s(attempt, retry_after_s(response)))
            attempt += 1

    # --- jobs ---------------------------------------------------------------------------------

    def enqueue_job(
        self,
        type: str,
        payload: Mapping[str, Any] | None = None,
        *,
        priority: int | None = None,
        delay_s: float | None = None,
        run_at: Any = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
    ) -> models.Enqueued:
        """Enqueue a job (admin). Left at None, an option takes the type's default; the
        idempotency key defaults to a new one per call (so its retries never enqueue twice)."""
        return self.send(
            calls.enqueue_job(
                type,
                payload or {},
                priority=priority,
                delay_s=delay_s,
                run_at=run_at,
                max_attempts=max_attempts,
                idempotency_key=idempotency_key,
            )
        )

    def get_job(self, job_id: uuid.UUID | str) -> models.Job:
        return self.send(calls.get_job(job_id))

    def list_jobs(
        self,
        *,
        type: str | None = None,
        status: models.JobStatus | None = None,
        limit: int = 50,
        cursor: uuid.UUID | str | None = None,
    ) -> models.JobPage:
        """Jobs, newest first; pass `next_cursor` as `cursor` for the next page."""
        return self.send(calls.list_jobs(type=type, status=status, limit=limit, cursor=cursor))

    def list_job_attempts(self, job_id: uuid.UUID | str) -> list[models.Attempt]:
        return self.send(calls.list_job_attempts(job_id))

    def cancel_job(self, job_id: uuid.UUID | str) -> models.Job:
        return self.send(calls.cancel_job(job_id))

    def retry_job(self, job_id: uuid.UUID | str) -> models.Job:
        return self.send(calls.retry_job(job_id))

    def wait_for_job(
        self, job_id: uuid.UUID | str, *, timeout_s: float = 60.0, poll_s: float = 0.5
    ) -> models.Job:
        """Poll until the job is finished; `TimeoutError` after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not (job := self.get_job(job_id)).finished:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is still {job.status} after {timeout_s} s")
            time.sleep(poll_s)
        return job

    # --- workflows ----------------------------------------------------------------------------

    def create_workflow(
        self,
        name: str,
        steps: Sequence[Mapping[str, Any]],
        *,
        fairness_key: str | None = None,
        idempotency_key: str | None = None,
    ) -> models.Workflow:
        """Create a workflow; each step as the API takes it: `{"name", "type", "payload",
        "after": [names], "onDependencyFailure", "priority", "maxAttempts"}`."""
        return self.send(
            calls.create_workflow(
                name, steps, fairness_key=fairness_key, idempotency_key=idempotency_key
            )
        )

    def get_workflow(
        self,
        workflow_id: uuid.UUID | str,
        *,
        step_limit: int | None = None,
        steps_after: str | None = None,
    ) -> models.Workflow:
        """The workflow and a page of its steps (`next_step_cursor` as `steps_after`)."""
        return self.send(
            calls.get_workflow(workflow_id, step_limit=step_limit, steps_after=steps_after)
        )

    def list_workflows(
        self,
        *,
        status: models.WorkflowStatus | None = None,
        name: str | None = None,
        limit: int = 50,
        cursor: uuid.UUID | str | None = None,
    ) -> models.WorkflowPage:
        """Workflows, newest first; pass `next_cursor` as `cursor` for the next page."""
        return self.send(calls.list_workflows(status=status, name=name, limit=limit, cursor=cursor))

    def cancel_workflow(self, workflow_id: uuid.UUID | str) -> models.Workflow:
        return self.send(calls.cancel_workflow(workflow_id))

    def retry_workflow(self, workflow_id: uuid.UUID | str) -> models.Workflow:
        return self.send(calls.retry_workflow(workflow_id))

    def wait_for_workflow(
        self, workflow_id: uuid.UUID | str, *, timeout_s: float = 60.0, poll_s: float = 0.5
    ) -> models.Workflow:
        """Poll until the workflow has ended; `TimeoutError` after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not (workflow := self.get_workflow(workflow_id, step_limit=0)).finished:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"workflow {workflow_id} is still {workflow.status} after {timeout_s} s"
                )
            time.sleep(poll_s)
        return self.get_workflow(workflow_id)

    # --- batches ------------------------------------------------------------------------------

    def create_batch(
        self,
        project_id: int,
        type: models.BatchType,
        items: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
    ) -> models.Batch:
        """A batch of Page Import (`{"url": ...}` or `{"html": ...}`) or Code2Des
        (`{"html": ..., "css": ...}`) items; all valid or nothing stored (`InvalidRequest`
        names `items.<position>.<field>`)."""
        return self.send(
            calls.create_batch(project_id, type, items, idempotency_key=idempotency_key)
        )

    def get_batch(self, batch_id: str) -> models.Batch:
        return self.send(calls.get_batch(batch_id))

    def list_batch_items(
        self, batch_id: str, *, after: int = -1, limit: int = 100
    ) -> models.BatchItemPage:
        """A page of items in input order; pass `next_after` as `after` for the next."""
        return self.send(calls.list_batch_items(batch_id, after=after, limit=limit))

    def cancel_batch(self, batch_id: str) -> models.Batch:
        return self.send(calls.cancel_batch(batch_id))

    def delete_batch(self, batch_id: str) -> None:
        self.send(calls.delete_batch(batch_id))

    def wait_for_batch(
        self, batch_id: str, *, timeout_s: float = 300.0, poll_s: float = 1.0
    ) -> models.Batch:
        """Poll until the batch is finished (status other than '0'); `TimeoutError` after
        `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not (batch := self.get_batch(batch_id)).finished:
            if time.monotonic() > deadline:
                raise TimeoutError(f"batch {batch_id} still processing after {timeout_s} s")
            time.sleep(poll_s)
        return batch

    def get_page_import(self, page_import_id: str) -> models.Child:
        return self.send(calls.get_page_import(page_import_id))

    def get_code2des(self, code2des_id: str) -> models.Child:
        return self.send(calls.get_code2des(code2des_id))

    # --- Code2WF ------------------------------------------------------------------------------

    def create_code2wf(
        self,
        project_id: int,
        *,
        page_import_id: str,
        figma_file_key: str,
        screen_id: str,
        placement_target: str | None = None,
        idempotency_key: str | None = None,
    ) -> models.Code2Wf:
        """A generation from a completed Page Import of the project (`Conflict` while it
        processes or when it failed)."""
        return self.send(
            calls.create_code2wf(
                project_id,
                page_import_id=page_import_id,
                figma_file_key=figma_file_key,
                screen_id=screen_id,
                placement_target=placement_target,
                idempotency_key=idempotency_key,
            )
        )

    def list_code2wf(
        self,
        project_id: int,
        *,
        figma_file_key: str,
        status: models.GenerationStatus | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> models.Code2WfPage:
        """The generations of one Figma file, oldest first (the plugin's discovery)."""
        return self.send(
            calls.list_code2wf(
                project_id, figma_file_key=figma_file_key, status=status, limit=limit, after=after
            )
        )

    def get_code2wf(self, code2wf_id: str) -> models.Code2Wf:
        return self.send(calls.get_code2wf(code2wf_id))

    def get_code2wf_result(self, code2wf_id: str) -> bytes:
        """The stored result document of a completed generation."""
        return self.send(calls.get_code2wf_result(code2wf_id))

    def materialize_code2wf(self, code2wf_id: str) -> models.Code2Wf:
        return self.send(calls.materialize_code2wf(code2wf_id))

    def delete_code2wf(self, code2wf_id: str) -> None:
        self.send(calls.delete_code2wf(code2wf_id))

    def get_me(self) -> models.Me:
        return self.send(calls.get_me())


class AsyncJobrelayClient:
    """`JobrelayClient` over `httpx.AsyncClient`: the same methods, as coroutines. Use as
    an async context manager, or await `aclose()`."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        token: Token = None,
        retries: Retries | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout_s)
        self._token = token
        self.retries = retries or Retries()

    async def __aenter__(self) -> AsyncJobrelayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        """Send `call`, again while `retries` allows, and read its answer."""
        attempt = 1
        while True:
            request = call.request(self._http)
            request.headers.update(_auth(self._token))
            try:
                response = await self._http.send(request)
            except httpx.TransportError as exc:
                if attempt >= self.retries.attempts or not self.retries.retries_error(call, exc):
                    raise
                await asyncio.sleep(self.retries.delay_s(attempt, None))
            else:
                if attempt >= self.retries.attempts or not self.retries.retries_answer(
                    call, response
                ):
                    return call.read(response)
                await asyncio.sleep(self.retries.delay_s(attempt, retry_after_s(response)))
            attempt += 1

    async def enqueue_job(
        self,
        type: str,
        payload: Mapping[str, Any] | None = None,
        *,
        priority: int | None = None,
        delay_s: float | None = None,
        run_at: Any = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
    ) -> models.Enqueued:
        """See `JobrelayClient.enqueue_job`."""
        return await self.send(
            calls.enqueue_job(
                type,
                payload or {},
                priority=priority,
                delay_s=delay_s,
                run_at=run_at,
                max_attempts=max_attempts,
                idempotency_key=idempotency_key,
            )
        )

    async def get_job(self, job_id: uuid.UUID | str) -> models.Job:
        return await self.send(calls.get_job(job_id))

    async def list_jobs(
        self,
        *,
        type: str | None = None,
        status: models.JobStatus | None = None,
        limit: int = 50,
        cursor: uuid.UUID | str | None = None,
    ) -> models.JobPage:
        return await self.send(
            calls.list_jobs(type=type, status=status, limit=limit, cursor=cursor)
        )

    async def list_job_attempts(self, job_id: uuid.UUID | str) -> list[models.Attempt]:
        return await self.send(calls.list_job_attempts(job_id))

    async def cancel_job(self, job_id: uuid.UUID | str) -> models.Job:
        return await self.send(calls.cancel_job(job_id))

    async def retry_job(self, job_id: uuid.UUID | str) -> models.Job:
        return await self.send(calls.retry_job(job_id))

    async def wait_for_job(
        self, job_id: uuid.UUID | str, *, timeout_s: float = 60.0, poll_s: float = 0.5
    ) -> models.Job:
        """See `JobrelayClient.wait_for_job`."""
        deadline = time.monotonic() + timeout_s
        while not (job := await self.get_job(job_id)).finished:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is still {job.status} after {timeout_s} s")
            await asyncio.sleep(poll_s)
        return job

    async def create_workflow(
        self,
        name: str,
        steps: Sequence[Mapping[str, Any]],
        *,
        fairness_key: str | None = None,
        idempotency_key: str | None = None,
    ) -> models.Workflow:
        """See `JobrelayClient.create_workflow`."""
        return await self.send(
            calls.create_workflow(
                name, steps, fairness_key=fairness_key, idempotency_key=idempotency_key
            )
        )

    async def get_workflow(
        self,
        workflow_id: uuid.UUID | str,
        *,
        step_limit: int | None = None,
        steps_after: str | None = None,
    ) -> models.Workflow:
        return await self.send(
            calls.get_workflow(workflow_id, step_limit=step_limit, steps_after=steps_after)
        )

    async def list_workflows(
        self,
        *,
        status: models.WorkflowStatus | None = None,
        name: str | None = None,
        limit: int = 50,
        cursor: uuid.UUID | str | None = None,
    ) -> models.WorkflowPage:
        return await self.send(
            calls.list_workflows(status=status, name=name, limit=limit, cursor=cursor)
        )

    async def cancel_workflow(self, workflow_id: uuid.UUID | str) -> models.Workflow:
        return await self.send(calls.cancel_workflow(workflow_id))

    async def retry_workflow(self, workflow_id: uuid.UUID | str) -> models.Workflow:
        return await self.send(calls.retry_workflow(workflow_id))

    async def wait_for_workflow(
        self, workflow_id: uuid.UUID | str, *, timeout_s: float = 60.0, poll_s: float = 0.5
    ) -> models.Workflow:
        """See `JobrelayClient.wait_for_workflow`."""
        deadline = time.monotonic() + timeout_s
        while not (workflow := await self.get_workflow(workflow_id, step_limit=0)).finished:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"workflow {workflow_id} is still {workflow.status} after {timeout_s} s"
                )
            await asyncio.sleep(poll_s)
        return await self.get_workflow(workflow_id)

    async def create_batch(
        self,
        project_id: int,
        type: models.BatchType,
        items: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
    ) -> models.Batch:
        """See `JobrelayClient.create_batch`."""
        return await self.send(
            calls.create_batch(project_id, type, items, idempotency_key=idempotency_key)
        )

    async def get_batch(self, batch_id: str) -> models.Batch:
        return await self.send(calls.get_batch(batch_id))

    async def list_batch_items(
        self, batch_id: str, *, after: int = -1, limit: int = 100
    ) -> models.BatchItemPage:
        return await self.send(calls.list_batch_items(batch_id, after=after, limit=limit))

    async def cancel_batch(self, batch_id: str) -> models.Batch:
        return await self.send(calls.cancel_batch(batch_id))

    async def delete_batch(self, batch_id: str) -> None:
        await self.send(calls.delete_batch(batch_id))

    async def wait_for_batch(
        self, batch_id: str, *, timeout_s: float = 300.0, poll_s: float = 1.0
    ) -> models.Batch:
        """See `JobrelayClient.wait_for_batch`."""
        deadline = time.monotonic() + timeout_s
        while not (batch := await self.get_batch(batch_id)).finished:
            if time.monotonic() > deadline:
                raise TimeoutError(f"batch {batch_id} still processing after {timeout_s} s")
            await asyncio.sleep(poll_s)
        return batch

    async def get_page_import(self, page_import_id: str) -> models.Child:
        return await self.send(calls.get_page_import(page_import_id))

    async def get_code2des(self, code2des_id: str) -> models.Child:
        return await self.send(calls.get_code2des(code2des_id))

    async def create_code2wf(
        self,
        project_id: int,
        *,
        page_import_id: str,
        figma_file_key: str,
        screen_id: str,
        placement_target: str | None = None,
        idempotency_key: str | None = None,
    ) -> models.Code2Wf:
        """See `JobrelayClient.create_code2wf`."""
        return await self.send(
            calls.create_code2wf(
                project_id,
                page_import_id=page_import_id,
                figma_file_key=figma_file_key,
                screen_id=screen_id,
                placement_target=placement_target,
                idempotency_key=idempotency_key,
            )
        )

    async def list_code2wf(
        self,
        project_id: int,
        *,
        figma_file_key: str,
        status: models.GenerationStatus | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> models.Code2WfPage:
        return await self.send(
            calls.list_code2wf(
                project_id, figma_file_key=figma_file_key, status=status, limit=limit, after=after
            )
        )

    async def get_code2wf(self, code2wf_id: str) -> models.Code2Wf:
        return await self.send(calls.get_code2wf(code2wf_id))

    async def get_code2wf_result(self, code2wf_id: str) -> bytes:
        return await self.send(calls.get_code2wf_result(code2wf_id))

    async def materialize_code2wf(self, code2wf_id: str) -> models.Code2Wf:
        return await self.send(calls.materialize_code2wf(code2wf_id))

    async def delete_code2wf(self, code2wf_id: str) -> None:
        await self.send(calls.delete_code2wf(code2wf_id))

    async def get_me(self) -> models.Me:
        return await self.send(calls.get_me())
