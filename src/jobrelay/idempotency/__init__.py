"""Idempotency keys: a creating request repeated with the same key gets the first answer.

A client sends `Idempotency-Key: <key>` on a POST that creates (a batch, a Code2WF
generation, a job). `IdempotentRequests.run_once` runs the creation in one transaction with
the key's row (`idempotency_key`, migration 0019):

* the first request takes the key (an `INSERT ... ON CONFLICT DO NOTHING`), creates the
  resource on the same connection and stores its answer there: both commit, or neither;
* a repeat while the first still runs waits on the key's row (PostgreSQL makes a second
  insert of the same key wait for the first transaction), then finds the committed answer
  and returns it: concurrent repeats create one resource;
* a repeat whose request differs (method, path or body: the `fingerprint`) is refused with
  `InvalidInput` on the `Idempotency-Key` field;
* a creation that fails (invalid input, not found) rolls the key back with it: nothing is
  remembered, the client may correct the request and send it with the same key.

Keys are per caller and live `ttl_s` (24 hours); a worker sweep deletes the expired ones,
and an expired key is taken over by the next request that names it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection, transaction
from jobrelay.db.sql import Queries
from jobrelay.domain.errors import FieldError, InvalidInput
from jobrelay.jobs.declare import JobTypes

_SQL = Queries("jobrelay.idempotency")

HEADER = "Idempotency-Key"
KEY_TTL_S = 24 * 3600
PURGE_BATCH = 5000
PURGE_EVERY_S = 600.0


@dataclass(frozen=True)
class Answer:
    """What a creation answered: its status code and JSON body (stored for repeats)."""

    status_code: int
    body: Mapping[str, Any]
    replayed: bool = False


Writer = Connection | None
"""The connection a creation writes on: the key's transaction, or None (its own)."""
Creation = Callable[[Writer], Awaitable[Answer]]


def fingerprint(method: str, path: str, body: object) -> str:
    """The request a key stands for: method, path and body (canonical JSON)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{method.upper()} {path}\n{canonical}".encode()).hexdigest()


class IdempotentRequests:
    """Runs creations at most once per (caller, key); see the module docstring."""

    def __init__(self, pool: AsyncConnectionPool[Connection], *, ttl_s: int = KEY_TTL_S) -> None:
        self._pool = pool
        self._ttl_s = ttl_s

    async def run_once(
        self, *, caller_sub: str, key: str, fingerprint: str, create: Creation
    ) -> Answer:
        """The first answer for `key`: `create`'s, run now in the key's transaction, or the
        one stored by an earlier request with the same fingerprint. Raises `InvalidInput`
        naming `Idempotency-Key` when the key was used for another request."""
        names = {"caller_sub": caller_sub, "key": key}
        async with transaction(self._pool) as conn:
            taken = await conn.execute(
                _SQL.claim_key, {**names, "fingerprint": fingerprint, "ttl_s": self._ttl_s}
            )
            if await taken.fetchone() is None:
                held = await (await conn.execute(_SQL.held_key, names)).fetchone()
                if held is None:  # expired and purged between the two statements
                    raise InvalidInput(
                        "the idempotency key expired while in use",
                        [FieldError(HEADER, "expired just now: send the request again")],
                    )
                return _replay(held, fingerprint)
            answer = await create(conn)
            await conn.execute(
                _SQL.record_answer,
                {**names, "status_code": answer.status_code, "response": Jsonb(answer.body)},
            )
        return answer


def _replay(held: Mapping[str, Any], fingerprint: str) -> Answer:
    if held["fingerprint"] != fingerprint:
        raise InvalidInput(
            "the idempotency key was used for another request",
            [
                FieldError(
                    HEADER,
                    f"already used at {held['created_at'].isoformat()} with another method, "
                    "path or body; a key stands for one request for 24 hours: send a new key",
                )
            ],
        )
    return Answer(status_code=int(held["status_code"]), body=held["response"], replayed=True)


async def purge_expired(pool: AsyncConnectionPool[Connection]) -> int:
    """Delete up to `PURGE_BATCH` expired keys; returns how many went."""
    async with pool.connection() as conn:
        cursor = await conn.execute(_SQL.purge_expired_keys, {"limit": PURGE_BATCH})
        return cursor.rowcount


def job_types() -> JobTypes:
    """The sweep that deletes expired keys, run by every worker."""
    group = JobTypes()
    group.sweep("idempotency.purge", every_s=PURGE_EVERY_S)(purge_expired)
    return group
