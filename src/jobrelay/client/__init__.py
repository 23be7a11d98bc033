"""A typed Python client of jobrelay's HTTP API (httpx; sync and async).

    from jobrelay.client import JobrelayClient

    with JobrelayClient("http://127.0.0.1:8000", token=token) as api:
        batch = api.create_batch(project_id, "page_import", [{"url": "https://example.com"}])
        done = api.wait_for_batch(batch.id)

`AsyncJobrelayClient` has the same methods as coroutines. Answers are the models of
`jobrelay.client.models`; error answers raise the `ApiError` subclasses of
`jobrelay.client.errors` (`InvalidRequest.errors` names each refused field). Reads, deletes,
cancels and creations are retried with backoff on 502/503/504 (at least `Retry-After`) and
on lost connections; every creation sends an `Idempotency-Key` (one of yours, or a new one
per call) so that a retried creation never makes a second resource. See
docs/how-to/use-the-python-client.md.

This package needs only httpx and pydantic: it imports nothing else of jobrelay.
"""

from jobrelay.client._calls import Call, Retries
from jobrelay.client._clients import AsyncJobrelayClient, JobrelayClient
from jobrelay.client.errors import (
    ApiError,
    BadRequest,
    Conflict,
    FieldProblem,
    Forbidden,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    Unavailable,
)

__all__ = [
    "ApiError",
    "AsyncJobrelayClient",
    "BadRequest",
    "Call",
    "Conflict",
    "FieldProblem",
    "Forbidden",
    "InvalidRequest",
    "JobrelayClient",
    "NotFound",
    "PayloadTooLarge",
    "Retries",
    "Unauthorized",
    "Unavailable",
]
