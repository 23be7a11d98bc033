"""The outbox's transitions: every write the relay makes to `batch_item` (and, through it,
to the children of items that fail for good), one function per verb.

- `claim`: lease due items (one short transaction on the claim lock, `claim_items.sql`).
- `record`: after a send, in one transaction: `record_sent` (accepted, guarded by the claimed
  attempt), `retry_later` (failed, attempts left), `fail` (failed on the last attempt; the
  item's error, then its child fails: `fail_children`), `give_back` (not sent because the
  queue was unreachable: the attempt is not counted, the lease ends).
- `sweep_expired`: items whose last claim expired without a recorded send fail the same way.
- `settle_cancels`: finish the cancels of large batches in short transactions.

No transition waits unboundedly for a row another transaction holds (issue 40): the claim
and the item statements take their items (and, where they append count deltas, the batch
row's KEY SHARE) with SKIP LOCKED, and every transaction waits at most its `lock_timeout_s`
for any other lock. What a lock held back is returned as deferred (`Recorded.deferred`), to
be written in a later round, where the attempt guards apply it once; a lock never fails an
item or counts an attempt. The failing of items and children, where a lock on the child or
an error text from the queue can refuse one row, is written in halving savepoints
(`jobrelay.db.isolate.write_in_savepoints`) so the rest of the batch is written in the same round.

A statement changes items or children, never both (the count triggers of migration 0012
see one table each); so failing an item is two statements in one transaction. Whole
transactions run again when PostgreSQL breaks a deadlock with a cancel or a webhook
(`jobrelay.db.deadlock.retry_on_deadlock`). The API's side of batches (create, read, cancel,
delete) is `jobrelay.batches.service`, which this module never imports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, LiteralString

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import AsyncConnectionPool

from jobrelay.aws.sender import OutgoingMessage
from jobrelay.children import batch as children
from jobrelay.children.views import batch_child_kind
from jobrelay.db.deadlock import retry_on_deadlock
from jobrelay.db.isolate import write_in_savepoints
from jobrelay.db.pool import Connection, transaction
from jobrelay.db.sql import Queries
from jobrelay.domain.batch_status import MAX_DISPATCH_ATTEMPTS
from jobrelay.domain.storable import storable_text

_SQL = Queries("jobrelay.batches")

LEASE_EXPIRED_ERROR = "the dispatch lease expired on the last attempt without a recorded send"
# The items of a batch's cancelled children, one statement per child table.
_CANCEL_ITEMS: dict[str, LiteralString] = {
    "page_import": _SQL.cancel_items_page_import,
    "code2des": _SQL.cancel_items_code2des,
}


@dataclass(frozen=True, slots=True)
class ClaimLimits:
    """What one claim may take: `limit` items leased for `lease_s`, at most `window` in
    flight per organization (times its weight), in flight counted for `in_flight_expiry_s`."""

    limit: int
    lease_s: float
    window: int
    weights: tuple[tuple[int, float], ...] = ()
    in_flight_expiry_s: float = 900.0


@dataclass(frozen=True, slots=True)
class Claim:
    """The claimed items as messages (ordered by item id) and the organizations with waiting
    items that were at their window (`held_back`)."""

    messages: list[OutgoingMessage]
    held_back: int


@dataclass(frozen=True, slots=True)
class Outcomes:
    """The outcomes of sends to write to their items: `sent` accepted, `retry` due again after
    its delay in seconds, `final` failed on its last attempt with the reason, `given_back`
    not sent in an outage of the queue."""

    sent: tuple[OutgoingMessage, ...] = ()
    retry: tuple[tuple[OutgoingMessage, float], ...] = ()
    final: tuple[tuple[OutgoingMessage, str], ...] = ()
    given_back: tuple[OutgoingMessage, ...] = ()

    def __len__(self) -> int:
        return len(self.sent) + len(self.retry) + len(self.final) + len(self.given_back)

    def __add__(self, other: Outcomes) -> Outcomes:
        return Outcomes(
            sent=self.sent + other.sent,
            retry=self.retry + other.retry,
            final=self.final + other.final,
            given_back=self.given_back + other.given_back,
        )


@dataclass(frozen=True, slots=True)
class Recorded:
    """What `record` (or the sweep) wrote: sends whose claim was taken over meanwhile (`lost`,
    nothing recorded for them), items failed for good (`failed`), outcomes not written
    because another transaction held a row they need (`deferred`: write them again later;
    the attempt guards apply them once) and final failures whose reason PostgreSQL could not
    store (`unstorable`: failed with a reason that says so)."""

    lost: int = 0
    failed: int = 0
    deferred: Outcomes = Outcomes()
    unstorable: int = 0


async def claim(pool: AsyncConnectionPool[Connection], limits: ClaimLimits, *, actor: str) -> Claim:
    """Lease due items for one pass and commit (see `claim_items.sql`); the claims of all
    relays take turns on one advisory lock so each organization's window is exact."""
    async with transaction(pool) as conn:
        await conn.execute(_SQL.claim_lock)
        rows = await (
            await conn.execute(
                _SQL.claim_items,
                {
                    "max_attempts": MAX_DISPATCH_ATTEMPTS,
                    "limit": limits.limit,
                    "lease_s": limits.lease_s,
                    "actor": actor,
                    "window": limits.window,
                    "weight_orgs": [org for org, _ in limits.weights],
                    "weights": [weight for _, weight in limits.weights],
                    "in_flight_expiry_s": limits.in_flight_expiry_s,
                },
            )
        ).fetchall()
    held_back = int(str(rows[0]["held_back"])) if rows else 0
    messages = sorted(
        (
            OutgoingMessage(
                item_id=str(r["id"]),
                child_id=str(r["job_id"]),
                attempt=int(str(r["dispatch_attempts"])),
                body=str(r["body"]),
                traceparent=None if r["traceparent"] is None else str(r["traceparent"]),
            )
            for r in rows
            if r["id"] is not None
        ),
        key=lambda m: m.item_id,
    )
    return Claim(messages=messages, held_back=held_back)


async def record(
    pool: AsyncConnectionPool[Connection],
    *,
    sent: Sequence[OutgoingMessage],
    retry: Sequence[tuple[OutgoingMessage, float]],
    final: Sequence[tuple[OutgoingMessage, str]],
    given_back: Sequence[OutgoingMessage] = (),
    actor: str,
    lock_timeout_s: float | None = None,
) -> Recorded:
    """Record one pass's outcomes in one transaction: `sent` accepted, `retry` due again
    after its delay in seconds, `final` failed on its last attempt with the reason,
    `given_back` not sent in an outage of the queue (`give_back`).

    No write waits for a row another transaction holds: the item statements skip locked
    items, and every statement waits at most `lock_timeout_s` for any other lock (a child
    of a final failure); what could not be written comes back in `Recorded.deferred`, the
    rest is committed."""

    async def work() -> Recorded:
        async with transaction(pool, lock_timeout_s=lock_timeout_s) as conn:
            lost, sent_later = await record_sent(conn, sent, actor=actor)
            retry_later_ = await retry_later(conn, retry, actor=actor)
            failed = await fail(conn, final, actor=actor)
            given_later = await give_back(conn, given_back, actor=actor)
        return Recorded(
            lost=lost,
            failed=failed.failed,
            deferred=Outcomes(
                sent=tuple(sent_later),
                retry=tuple(retry_later_),
                final=failed.deferred.final,
                given_back=tuple(given_later),
            ),
            unstorable=failed.unstorable,
        )

    try:
        return await retry_on_deadlock(work)
    except pg_errors.LockNotAvailable:
        # A lock outside the rows the statements isolate (an operator's lock on the count
        # table, say): nothing was written, all of it waits for the next round.
        return Recorded(
            deferred=Outcomes(
                sent=tuple(sent),
                retry=tuple(retry),
                final=tuple(final),
                given_back=tuple(given_back),
            )
        )


async def record_sent(
    conn: Connection, sent: Sequence[OutgoingMessage], *, actor: str
) -> tuple[int, list[OutgoingMessage]]:
    """Set `dispatched_at` on accepted items whose claim is still the one sent. Returns how
    many were not (their lease was taken over: the new claim decides) and the messages
    whose item another transaction holds (not written: try again later)."""
    if not sent:
        return 0, []
    rows = await _write(
        conn,
        _SQL.record_sent,
        {"ids": [m.item_id for m in sent], "attempts": [m.attempt for m in sent], "actor": actor},
    )
    deferred = {str(r["id"]) for r in rows if r["deferred"]}
    lost = sum(1 for r in rows if not r["changed"] and not r["deferred"])
    return lost, [m for m in sent if m.item_id in deferred]


async def retry_later(
    conn: Connection, retry: Sequence[tuple[OutgoingMessage, float]], *, actor: str
) -> list[tuple[OutgoingMessage, float]]:
    """Release failed items with attempts left, due again after their delay; returns those
    whose item another transaction holds (not written: try again later)."""
    if not retry:
        return []
    rows = await _write(
        conn,
        _SQL.retry_later,
        {
            "ids": [m.item_id for m, _ in retry],
            "attempts": [m.attempt for m, _ in retry],
            "delays": [delay for _, delay in retry],
            "actor": actor,
        },
    )
    deferred = {str(r["id"]) for r in rows if r["deferred"]}
    return [(m, d) for m, d in retry if m.item_id in deferred]


async def give_back(
    conn: Connection, messages: Sequence[OutgoingMessage], *, actor: str
) -> list[OutgoingMessage]:
    """Take back the claimed attempt of items not sent because the queue was unreachable:
    due at once for any relay, out of their organization's window (`give_back.sql`).
    Returns the messages whose item another transaction holds (try again later)."""
    if not messages:
        return []
    rows = await _write(
        conn,
        _SQL.give_back,
        {
            "ids": [m.item_id for m in messages],
            "attempts": [m.attempt for m in messages],
            "actor": actor,
        },
    )
    deferred = {str(r["id"]) for r in rows if r["deferred"]}
    return [m for m in messages if m.item_id in deferred]


async def fail(
    conn: Connection, final: Sequence[tuple[OutgoingMessage, str]], *, actor: str
) -> Recorded:
    """Fail items whose last attempt failed (the item's error, then its child); `failed`
    counts them (an item whose claim was taken over or that was cancelled is left alone),
    `deferred.final` holds those with a row another transaction holds."""
    if not final:
        return Recorded()
    failures = [
        _Failure(m, storable_text(f"dispatch failed after {m.attempt} attempts: {e}")[:500])
        for m, e in final
    ]
    return await _fail_isolated(conn, failures, actor=actor)


async def sweep_expired(
    pool: AsyncConnectionPool[Connection],
    *,
    actor: str,
    limit: int = 1000,
    lock_timeout_s: float | None = None,
) -> Recorded:
    """Fail up to `limit` items whose last allowed claim expired without a recorded send
    (the relay holding it died), with their children; `failed` counts them. An item or
    child another transaction holds is left for the next sweep (`deferred`)."""

    async def work() -> Recorded:
        async with transaction(pool, lock_timeout_s=lock_timeout_s) as conn:
            rows = await (
                await conn.execute(
                    _SQL.expired_items, {"max_attempts": MAX_DISPATCH_ATTEMPTS, "limit": limit}
                )
            ).fetchall()
            failures = [
                _Failure(
                    OutgoingMessage(
                        item_id=str(r["id"]),
                        child_id=str(r["job_id"]),
                        attempt=int(str(r["dispatch_attempts"])),
                        body="",
                    ),
                    LEASE_EXPIRED_ERROR,
                )
                for r in rows
            ]
            return await _fail_isolated(conn, failures, actor=actor)

    return await retry_on_deadlock(work)


@dataclass(frozen=True, slots=True)
class _Failure:
    message: OutgoingMessage
    error: str


async def _fail_isolated(conn: Connection, failures: Sequence[_Failure], *, actor: str) -> Recorded:
    """Fail items and their children in the caller's transaction, each part of the batch in
    a savepoint of its own (`write_in_savepoints`): a child another transaction holds (its
    webhook in flight, an operator) defers its own item, and a reason PostgreSQL refuses
    fails its item with a reason that says so, while the rest fails in this round."""
    failed = 0
    unstorable = 0

    async def write(part: Sequence[_Failure]) -> list[_Failure]:
        nonlocal failed
        rows = await _write(
            conn,
            _SQL.fail_items,
            {
                "ids": [f.message.item_id for f in part],
                "attempts": [f.message.attempt for f in part],
                "errors": [f.error for f in part],
                "actor": actor,
            },
        )
        done = [r for r in rows if r["changed"]]
        await fail_children(conn, done, actor=actor)
        failed += len(done)
        skipped = {str(r["id"]) for r in rows if r["deferred"]}
        return [f for f in part if f.message.item_id in skipped]

    async def unstorable_reason(failure: _Failure, exc: psycopg.Error) -> list[_Failure]:
        nonlocal unstorable
        unstorable += 1
        reason = (
            f"dispatch failed after {failure.message.attempt} attempts; the reason could not "
            f"be stored ({exc.sqlstate or 'data error'}: {_first_line(exc)})"
        )
        return await write([_Failure(failure.message, storable_text(reason)[:500])])

    deferred = await write_in_savepoints(conn, failures, write, bad=unstorable_reason)
    return Recorded(
        failed=failed,
        unstorable=unstorable,
        deferred=Outcomes(final=tuple((f.message, f.error) for f in deferred)),
    )


async def _write(conn: Connection, query: LiteralString, params: dict[str, Any]) -> list[Any]:
    return await (await conn.execute(query, params)).fetchall()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


async def fail_children(conn: Connection, failed_items: Sequence[Any], *, actor: str) -> None:
    """Fail the processing children of items that just failed for good (the rows
    `fail_items.sql` failed: `job_id`, `error_message`), in the caller's transaction, as a
    statement of its own (`jobrelay.children.batch`)."""
    await children.fail_batch_children(
        conn,
        [
            children.ChildFailure(child_id=str(r["job_id"]), error=str(r["error_message"]))
            for r in failed_items
        ],
        actor=actor,
    )


async def settle_cancels(
    pool: AsyncConnectionPool[Connection],
    *,
    actor: str,
    step: int = 2_000,
    lock_timeout_s: float | None = None,
) -> int:
    """Finish background cancels (see `BatchService.cancel`): mark up to `step` processing
    children of one cancelled batch and their items per transaction, until no cancelled
    batch has any left. Returns how many children it cancelled. Safe to run in many
    processes at once (a batch being settled is skipped by the others) and to stop at any
    point. A step that waits longer than `lock_timeout_s` for a lock (the last children
    held by a webhook or an operator) raises `psycopg.errors.LockNotAvailable`: the steps
    committed before it stay, the rest is for the next call."""
    cancelled = 0
    while True:
        done = await retry_on_deadlock(
            lambda: _settle_step(pool, actor=actor, step=step, lock_timeout_s=lock_timeout_s)
        )
        if done is None:
            return cancelled
        cancelled += done


async def cancel_rest(conn: Connection, batch_id: str, batch_type: str, *, actor: str) -> None:
    """Cancel every processing child of the batch, then the items of its cancelled children
    (two statements: see the module docstring), in the caller's transaction. Used by a
    cancel, a soft delete and the last step of a background cancel."""
    await children.cancel_batch_children(conn, batch_id, actor=actor)
    await conn.execute(_CANCEL_ITEMS[batch_type], {"batch_id": batch_id, "actor": actor})


async def _settle_step(
    pool: AsyncConnectionPool[Connection],
    *,
    actor: str,
    step: int,
    lock_timeout_s: float | None = None,
) -> int | None:
    """One transaction of `settle_cancels`: the children it cancelled, None when no
    cancelled batch is left to settle (or every one is held by another settler)."""
    async with transaction(pool, lock_timeout_s=lock_timeout_s) as conn:
        row = await (await conn.execute(_SQL.settle_cancel_next)).fetchone()
        if row is None:
            return None
        batch_id, kind = str(row["id"]), batch_child_kind(str(row["type"]))
        cancelled = await children.settle_cancel_children(
            conn, kind, batch_id, actor=actor, limit=step
        )
        params: dict[str, Any] = {"batch_id": batch_id, "actor": actor}
        if cancelled:
            params["child_ids"] = cancelled
            await conn.execute(_SQL.settle_cancel_items, params)
            return len(cancelled)
        # None left unlocked: the last ones (waiting for a webhook that holds one, which
        # ends it or not), then the items of children a webhook ended cancelled meanwhile
        # (finish_*.sql), and the cancel is settled.
        await cancel_rest(conn, batch_id, kind, actor=actor)
        await conn.execute(_SQL.settle_cancel_done, params)
        return 0
