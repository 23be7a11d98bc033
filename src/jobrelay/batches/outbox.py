"""The outbox's transitions: every write the relay makes to `batch_item` (and, through it,
to the children of items that fail for good), one function per verb.

- `claim`: lease due items (one short transaction on the claim lock, `claim_items.sql`).
- `record`: after a send, in one transaction: `record_sent` (accepted, guarded by the claimed
  attempt), `retry_later` (failed, attempts left), `fail` (failed on the last attempt; the
  item's error, then its child fails: `fail_children`), `give_back` (not sent because the
  queue was unreachable: the attempt is not counted, the lease ends).
- `sweep_expired`: items whose last claim expired without a recorded send fail the same way.
- `settle_cancels`: finish the cancels of large batches in short transactions.

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

from psycopg_pool import AsyncConnectionPool

from jobrelay.aws.sender import OutgoingMessage
from jobrelay.children import batch as children
from jobrelay.children.views import batch_child_kind
from jobrelay.db.deadlock import retry_on_deadlock
from jobrelay.db.pool import Connection, transaction
from jobrelay.db.sql import Queries
from jobrelay.domain.batch_status import MAX_DISPATCH_ATTEMPTS

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
class Recorded:
    """What `record` wrote: sends whose claim was taken over meanwhile (`lost`, nothing
    recorded for them) and items failed for good (`failed`)."""

    lost: int = 0
    failed: int = 0


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
) -> Recorded:
    """Record one pass's outcomes in one transaction: `sent` accepted, `retry` due again
    after its delay in seconds, `final` failed on its last attempt with the reason,
    `given_back` not sent in an outage of the queue (`give_back`)."""

    async def work() -> Recorded:
        async with transaction(pool) as conn:
            lost = await record_sent(conn, sent, actor=actor)
            await retry_later(conn, retry, actor=actor)
            failed = await fail(conn, final, actor=actor)
            await give_back(conn, given_back, actor=actor)
        return Recorded(lost=lost, failed=failed)

    return await retry_on_deadlock(work)


async def record_sent(conn: Connection, sent: Sequence[OutgoingMessage], *, actor: str) -> int:
    """Set `dispatched_at` on accepted items whose claim is still the one sent; returns how
    many were not (their lease was taken over: the new claim decides)."""
    if not sent:
        return 0
    cur = await conn.execute(
        _SQL.record_sent,
        {
            "ids": [m.item_id for m in sent],
            "attempts": [m.attempt for m in sent],
            "actor": actor,
        },
    )
    return max(0, len(sent) - cur.rowcount)


async def retry_later(
    conn: Connection, retry: Sequence[tuple[OutgoingMessage, float]], *, actor: str
) -> None:
    """Release failed items with attempts left, due again after their delay."""
    if not retry:
        return
    await conn.execute(
        _SQL.retry_later,
        {
            "ids": [m.item_id for m, _ in retry],
            "attempts": [m.attempt for m, _ in retry],
            "delays": [delay for _, delay in retry],
            "actor": actor,
        },
    )


async def give_back(conn: Connection, messages: Sequence[OutgoingMessage], *, actor: str) -> None:
    """Take back the claimed attempt of items not sent because the queue was unreachable:
    due at once for any relay, out of their organization's window (`give_back.sql`)."""
    if not messages:
        return
    await conn.execute(
        _SQL.give_back,
        {
            "ids": [m.item_id for m in messages],
            "attempts": [m.attempt for m in messages],
            "actor": actor,
        },
    )


async def fail(
    conn: Connection, final: Sequence[tuple[OutgoingMessage, str]], *, actor: str
) -> int:
    """Fail items whose last attempt failed (the item's error, then its child); returns how
    many failed (an item whose claim was taken over or that was cancelled is left alone)."""
    if not final:
        return 0
    rows = await (
        await conn.execute(
            _SQL.fail_items,
            {
                "ids": [m.item_id for m, _ in final],
                "attempts": [m.attempt for m, _ in final],
                "errors": [
                    f"dispatch failed after {m.attempt} attempts: {e}"[:500] for m, e in final
                ],
                "actor": actor,
            },
        )
    ).fetchall()
    await fail_children(conn, rows, actor=actor)
    return len(rows)


async def sweep_expired(
    pool: AsyncConnectionPool[Connection], *, actor: str, limit: int = 1000
) -> int:
    """Fail up to `limit` items whose last allowed claim expired without a recorded send
    (the relay holding it died), with their children; returns how many."""
    async with transaction(pool) as conn:
        rows = await (
            await conn.execute(
                _SQL.sweep_expired,
                {
                    "max_attempts": MAX_DISPATCH_ATTEMPTS,
                    "limit": limit,
                    "error": LEASE_EXPIRED_ERROR,
                    "actor": actor,
                },
            )
        ).fetchall()
        await fail_children(conn, rows, actor=actor)
    return len(rows)


async def fail_children(conn: Connection, failed_items: Sequence[Any], *, actor: str) -> None:
    """Fail the processing children of items that just failed for good (the rows
    `fail_items.sql` or `sweep_expired.sql` returned: `job_id`, `error_message`), in the
    caller's transaction, as a statement of its own (`jobrelay.children.batch`)."""
    await children.fail_batch_children(
        conn,
        [
            children.ChildFailure(child_id=str(r["job_id"]), error=str(r["error_message"]))
            for r in failed_items
        ],
        actor=actor,
    )


async def settle_cancels(
    pool: AsyncConnectionPool[Connection], *, actor: str, step: int = 2_000
) -> int:
    """Finish background cancels (see `BatchService.cancel`): mark up to `step` processing
    children of one cancelled batch and their items per transaction, until no cancelled
    batch has any left. Returns how many children it cancelled. Safe to run in many
    processes at once (a batch being settled is skipped by the others) and to stop at any
    point."""
    cancelled = 0
    while True:
        done = await retry_on_deadlock(lambda: _settle_step(pool, actor=actor, step=step))
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
    pool: AsyncConnectionPool[Connection], *, actor: str, step: int
) -> int | None:
    """One transaction of `settle_cancels`: the children it cancelled, None when no
    cancelled batch is left to settle (or every one is held by another settler)."""
    async with transaction(pool) as conn:
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
