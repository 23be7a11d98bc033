"""`POST /v1/webhooks/worker`: signed terminal outcomes from the external workers.

Order of checks, each with its own answer:
1. Standard Webhooks verification (`jobrelay.webhooks.WebhookVerifier`): missing headers, a
   timestamp outside 5 minutes or no matching signature -> 401; unparsable headers, a body
   that is not UTF-8 or not JSON -> 400. Nothing is stored.
2. The body must be a `WorkerOutcome` -> otherwise 400 with field errors.
3. Idempotency on `webhook-id`, in the same transaction as the outcome: the first delivery
   inserts its `webhook_delivery` row, a concurrent duplicate waits on that row and then
   answers the stored result without reprocessing. The same id with another body -> 409.
4. The outcome is a CAS from processing (`jobrelay.children.outcomes`): applied -> 200
   `changed: true`; the same outcome again -> 200 `changed: false`; a cancelled child -> 200,
   unchanged; a child that already ended with the other outcome -> 409. Unknown child -> 404
   (not remembered, so a retry after the row exists is processed).

5. No lock wait without a bound: the transaction waits at most `lock_timeout_s` for a row
   another transaction holds (the child, its batch item, a concurrent delivery of the same
   id); past it nothing is stored and the API answers 503 `row-locked` with Retry-After,
   which the SQS workers retry like any 503.

The endpoint never answers 410 (a Standard Webhooks sender disables the endpoint on 410).

When tracing, each delivery is a `jobrelay.webhook.complete` span (inside the request's,
which continues the worker's trace) naming the child, the outcome and the answer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError

from jobrelay import tracing
from jobrelay.children.outcomes import LIFECYCLES, ChildLifecycle
from jobrelay.children.views import OutcomeResult
from jobrelay.db.pool import Connection, transaction
from jobrelay.db.sql import Queries
from jobrelay.domain.errors import Conflict, FieldError, InvalidInput, NotFound
from jobrelay.protocol import WorkerOutcome
from jobrelay.webhooks import WebhookVerifier

_SQL = Queries("jobrelay.generations")
ACTOR = "webhook"


@dataclass(frozen=True, slots=True)
class WebhookAnswer:
    """The HTTP answer to a delivery: status code and JSON body (problem details when 409)."""

    status_code: int
    body: dict[str, Any]
    replayed: bool = False


def _answer(result: OutcomeResult) -> WebhookAnswer:
    if result.conflict:
        return WebhookAnswer(
            409,
            {
                "type": "https://jobrelay.dev/problems/conflict",
                "title": "Conflict",
                "status": 409,
                "detail": result.detail
                or f"{result.kind} {result.id} already ended with status {result.status.value}",
                "kind": result.kind,
                "id": result.id,
            },
        )
    return WebhookAnswer(
        200,
        {
            "kind": result.kind,
            "id": result.id,
            "status": result.status.value,
            "changed": result.changed,
        },
    )


class WorkerWebhooks:
    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        verifier: WebhookVerifier,
        lifecycles: Mapping[str, ChildLifecycle] = LIFECYCLES,
        *,
        lock_timeout_s: float | None = None,
    ) -> None:
        self._pool = pool
        self._verifier = verifier
        self._lifecycles = lifecycles
        self._lock_timeout_s = lock_timeout_s

    async def receive(self, headers: Mapping[str, str], body: bytes) -> WebhookAnswer:
        """Verify and apply one delivery; raises `Unauthorized`/`Malformed` (401/400),
        `InvalidInput` (400 here: a well-formed JSON body that is not an outcome),
        `Conflict` (409: a known webhook-id with another body), `NotFound` (404) or
        `psycopg.errors.LockNotAvailable` (503 row-locked: a row it needs stayed locked by
        another transaction past `lock_timeout_s`; nothing was stored)."""
        with tracing.span("jobrelay.webhook.complete"):
            answer = await self._receive(headers, body)
            tracing.annotate(
                {
                    "jobrelay.webhook.status_code": answer.status_code,
                    "jobrelay.webhook.replayed": answer.replayed,
                }
            )
        return answer

    async def _receive(self, headers: Mapping[str, str], body: bytes) -> WebhookAnswer:
        delivery = self._verifier.verify(headers, body)
        try:
            outcome = WorkerOutcome.model_validate(delivery.payload)
        except ValidationError as exc:
            raise InvalidInput(
                "the body is not a worker outcome",
                [
                    FieldError(".".join(str(p) for p in e["loc"]) or "body", str(e["msg"]))
                    for e in exc.errors(include_url=False)
                ],
            ) from exc
        tracing.annotate(
            {
                "jobrelay.child.kind": outcome.kind,
                "jobrelay.child.id": outcome.id,
                "jobrelay.child.outcome": outcome.outcome,
            }
        )
        lifecycle = self._lifecycles.get(outcome.kind)
        if lifecycle is None:
            raise NotFound(f"no {outcome.kind} with id {outcome.id}")
        digest = hashlib.sha256(body).hexdigest()
        async with transaction(self._pool, lock_timeout_s=self._lock_timeout_s) as conn:
            params = {"webhook_id": delivery.webhook_id, "body_sha256": digest}
            first = await (await conn.execute(_SQL.claim_delivery, params)).fetchone()
            if first is None:
                return await self._replay(conn, delivery.webhook_id, digest)
            answer = _answer(await lifecycle.apply(conn, outcome, actor=ACTOR))
            await conn.execute(
                _SQL.finish_delivery,
                {
                    "webhook_id": delivery.webhook_id,
                    "status_code": answer.status_code,
                    "response": Jsonb(answer.body),
                },
            )
        return answer

    @staticmethod
    async def _replay(conn: Connection, webhook_id: str, digest: str) -> WebhookAnswer:
        row = await (await conn.execute(_SQL.get_delivery, {"webhook_id": webhook_id})).fetchone()
        assert row is not None
        if row["body_sha256"] != digest:
            raise Conflict(f"webhook-id {webhook_id} was already delivered with a different body")
        body = row["response"]
        assert isinstance(body, dict)
        return WebhookAnswer(int(str(row["status_code"])), body, replayed=True)
