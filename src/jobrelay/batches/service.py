"""Batches over the pool: create, read with derived status, list items, cancel, soft delete.

Scope checks are the caller's job (the API checks membership of the batch's organization
before acting); everything here works on a batch id that may be shown to the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from psycopg import errors as pg_errors
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from jobrelay.batches.creation import BatchLimits, insert_batch, prepare_batch
from jobrelay.db.pool import Connection, transaction
from jobrelay.db.sql import Queries
from jobrelay.domain.batch_status import (
    BatchCounts,
    BatchStatus,
    ChildStatus,
    ItemState,
    batch_status,
    item_state,
)
from jobrelay.domain.errors import Conflict, NotFound
from jobrelay.loops import Backoff, retry

_SQL = Queries("jobrelay.batches")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BatchView:
    id: str
    organization_id: int
    project_id: int
    type: str
    status: BatchStatus
    counts: BatchCounts
    cancelled_at: datetime | None
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str

    @property
    def cancelling(self) -> bool:
        """Cancelled, with items the relay's sweeper is still marking (a large batch's
        cancel finishes in the background: `BatchService.cancel`)."""
        return self.cancelled_at is not None and self.counts.queued + self.counts.running > 0


@dataclass(frozen=True, slots=True)
class ItemView:
    id: str
    position: int
    job_id: str
    state: ItemState
    dispatch_attempts: int
    dispatched_at: datetime | None
    cancelled_at: datetime | None
    error_message: str | None
    result_url: str | None


@dataclass(frozen=True, slots=True)
class ItemPage:
    items: list[ItemView]
    next_after: int | None


async def retry_on_deadlock(work: Callable[[], Awaitable[T]], *, attempts: int = 5) -> T:
    """Run `work` (one whole transaction) again when PostgreSQL broke a deadlock with it.

    Cancel, the relay's terminal failures and webhooks lock items and children in different
    orders; the server detects the rare cycle and aborts one side, which simply retries.
    """
    return await retry(
        work,
        what="a transaction aborted by a deadlock",
        retry_on=_deadlock,
        backoff=_DEADLOCK_BACKOFF,
        attempts=attempts,
        level=logging.DEBUG,  # expected now and then; the server logs each deadlock already
    )


# Jitter, so the two transactions a deadlock broke do not meet again in lockstep.
_DEADLOCK_BACKOFF = Backoff(base_s=0.01, cap_s=0.05, jitter=0.5)


def _deadlock(exc: BaseException) -> bool:
    return isinstance(exc, pg_errors.DeadlockDetected)


async def fail_children(conn: Connection, failed_items: Sequence[Any], *, actor: str) -> None:
    """Fail the processing children of items that just failed for good (the rows
    `fail_items.sql` or `sweep_expired.sql` returned: `job_id`, `error_message`), in the
    caller's transaction, as a statement of its own (see `fail_children.sql`)."""
    if not failed_items:
        return
    await conn.execute(
        _SQL.fail_children,
        {
            "job_ids": [str(r["job_id"]) for r in failed_items],
            "errors": [str(r["error_message"]) for r in failed_items],
            "actor": actor,
        },
    )


_COUNT_FIELDS = ("total", "queued", "running", "completed", "failed", "cancelled")
_CHILD_TABLES = {"page_import": "page_import", "code2des": "code2des"}


async def batch_counts(conn: Connection, batch_id: str, batch_type: str) -> BatchCounts:
    """The counts of one batch as kept in the transactions that change its items and
    children (migration 0012: the sum of its few delta rows). `batch_type` is unused here;
    it names the child table of `recount_batch`, the checker."""
    del batch_type
    row = await (await conn.execute(_SQL.batch_counts_kept, {"batch_id": batch_id})).fetchone()
    assert row is not None
    return BatchCounts(**{k: int(str(v)) for k, v in row.items()})


async def recount_batch(conn: Connection, batch_id: str, batch_type: str) -> BatchCounts:
    """The checker: the counts of one batch recounted from every item and child (cost grows
    with the batch); call inside a transaction (the merge-join planner settings are local to
    it). The kept counts must always equal this."""
    query = sql.SQL(_SQL.batch_counts).format(child=sql.Identifier(_CHILD_TABLES[batch_type]))
    await conn.execute(_SQL.merge_join_only)
    row = await (await conn.execute(query, {"batch_id": batch_id})).fetchone()
    assert row is not None
    return BatchCounts(**{k: int(str(v)) for k, v in row.items()})


def _settle_children(child_table: str) -> sql.Composed:
    """`settle_cancel_children.sql` bound to a child table."""
    return sql.SQL(_SQL.settle_cancel_children).format(child=sql.Identifier(child_table))


def _cancel_items(batch_type: str) -> sql.Composed:
    """`cancel_items.sql` bound to the batch's child table."""
    return sql.SQL(_SQL.cancel_items).format(child=sql.Identifier(_CHILD_TABLES[batch_type]))


def _view(row: dict[str, Any], counts: BatchCounts) -> BatchView:
    cancelled = row["cancelled_at"] is not None
    return BatchView(
        id=str(row["id"]),
        organization_id=int(row["organization_id"]),
        project_id=int(row["project_id"]),
        type=str(row["type"]),
        status=batch_status(cancelled=cancelled, counts=counts),
        counts=counts,
        cancelled_at=row["cancelled_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        created_by=str(row["created_by"]),
        updated_by=str(row["updated_by"]),
    )


async def processing_batches(conn: Connection, *, limit: int) -> list[BatchView]:
    """Batches in progress (derived status '0'), oldest first, at most `limit`, each with its
    derived counts; call inside a transaction (REPEATABLE READ for one snapshot)."""
    rows = await (await conn.execute(_SQL.processing_batches, {"limit": limit})).fetchall()
    views = []
    for row in rows:
        counts = await batch_counts(conn, str(row["id"]), str(row["type"]))
        views.append(_view(row, counts))
    return views


async def settle_cancels(
    pool: AsyncConnectionPool[Connection], *, actor: str, step: int = 2_000
) -> int:
    """Finish background cancels (see `BatchService.cancel`): mark up to `step` processing children
    of one cancelled batch and their items per transaction, until no cancelled batch has
    any left. Returns how many children it cancelled. Safe to run in many processes at
    once (a batch being settled is skipped by the others) and to stop at any point."""
    cancelled = 0
    while True:
        done = await retry_on_deadlock(lambda: _settle_step(pool, actor=actor, step=step))
        if done is None:
            return cancelled
        cancelled += done


async def _settle_step(
    pool: AsyncConnectionPool[Connection], *, actor: str, step: int
) -> int | None:
    """One transaction of `settle_cancels`: the children it cancelled, None when no
    cancelled batch is left to settle (or every one is held by another settler)."""
    async with transaction(pool) as conn:
        row = await (await conn.execute(_SQL.settle_cancel_next)).fetchone()
        if row is None:
            return None
        batch_id, child = str(row["id"]), _CHILD_TABLES[str(row["type"])]
        params: dict[str, Any] = {"batch_id": batch_id, "actor": actor, "limit": step}
        children = await (await conn.execute(_settle_children(child), params)).fetchall()
        if children:
            params["child_ids"] = [str(c["id"]) for c in children]
            await conn.execute(_SQL.settle_cancel_items, params)
            return len(children)
        # None left unlocked: the last ones (waiting for a webhook that holds one, which
        # ends it or not), then the items of children a webhook ended cancelled meanwhile
        # (finish_*.sql), and the cancel is settled.
        await conn.execute(_SQL.cancel_children, params)
        await conn.execute(_cancel_items(str(row["type"])), params)
        await conn.execute(_SQL.settle_cancel_done, params)
        return 0


class BatchService:
    def __init__(self, pool: AsyncConnectionPool[Connection], limits: BatchLimits) -> None:
        self._pool = pool
        self._limits = limits

    async def create(
        self,
        *,
        organization_id: int,
        project_id: int,
        batch_type: str,
        items: Sequence[Any],
        actor: str,
    ) -> BatchView:
        """Validate (nothing is written on `InvalidInput`), then store in one transaction."""
        prepared = prepare_batch(
            batch_type=batch_type,
            items=items,
            organization_id=organization_id,
            project_id=project_id,
            limits=self._limits,
        )
        async with transaction(self._pool) as conn:
            row = await insert_batch(conn, prepared, actor=actor)
        counts = BatchCounts(total=len(prepared.items), queued=len(prepared.items))
        return _view(row, counts)

    async def owner(self, batch_id: str) -> int:
        """The organization of a visible (not deleted) batch, or `NotFound`."""
        async with self._pool.connection() as conn:
            row = await (await conn.execute(_SQL.get_batch, {"batch_id": batch_id})).fetchone()
        if row is None:
            raise NotFound("batch not found")
        return int(str(row["organization_id"]))

    async def get(self, batch_id: str) -> BatchView:
        # One statement: the row and its kept counts in one snapshot and one round trip.
        async with self._pool.connection() as conn:
            row = await (
                await conn.execute(_SQL.get_batch_with_counts, {"batch_id": batch_id})
            ).fetchone()
        if row is None:
            raise NotFound("batch not found")
        counts = BatchCounts(**{k: int(str(row[k])) for k in _COUNT_FIELDS})
        return _view(row, counts)

    async def list_for_project(
        self, project_id: int, *, limit: int, offset: int = 0
    ) -> tuple[list[BatchView], bool]:
        """A project's visible batches, newest first, each with its derived counts, and
        whether more follow. The caller checks the project's scope (services never check
        membership)."""
        async with transaction(self._pool) as conn:
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            params = {"project_id": project_id, "limit": limit + 1, "offset": offset}
            rows = await (await conn.execute(_SQL.list_project_batches, params)).fetchall()
            views = [
                _view(row, await batch_counts(conn, str(row["id"]), str(row["type"])))
                for row in rows[:limit]
            ]
        return views, len(rows) > limit

    async def item_of_child(self, batch_id: str, child_id: str) -> dict[str, Any] | None:
        """The item of `batch_id` that carries the child `child_id` (its dispatch state), or
        None; the caller checked that the child is visible."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                _SQL.item_of_child, {"batch_id": batch_id, "child_id": child_id}
            )
            row = await cursor.fetchone()
        return None if row is None else dict(row)

    async def items(self, batch_id: str, *, after: int, limit: int) -> ItemPage:
        """Items with `position > after` in input order; `next_after` is None on the last page."""
        async with transaction(self._pool) as conn:
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            exists = await (await conn.execute(_SQL.get_batch, {"batch_id": batch_id})).fetchone()
            if exists is None:
                raise NotFound("batch not found")
            rows = await (
                await conn.execute(
                    _SQL.list_items, {"batch_id": batch_id, "after": after, "limit": limit + 1}
                )
            ).fetchall()
        views = [
            ItemView(
                id=str(r["id"]),
                position=int(str(r["position"])),
                job_id=str(r["job_id"]),
                state=item_state(
                    child_status=ChildStatus(str(r["child_status"])),
                    dispatched=r["dispatched_at"] is not None,
                    dispatch_failed=r["dispatch_error"] is not None,
                    cancelled=r["cancelled_at"] is not None,
                ),
                dispatch_attempts=int(str(r["dispatch_attempts"])),
                dispatched_at=r["dispatched_at"],  # type: ignore[arg-type]
                cancelled_at=r["cancelled_at"],  # type: ignore[arg-type]
                error_message=(r["child_error"] or r["dispatch_error"]),  # type: ignore[arg-type]
                result_url=r["result_url"],  # type: ignore[arg-type]
            )
            for r in rows[:limit]
        ]
        next_after = views[-1].position if len(rows) > limit else None
        return ItemPage(items=views, next_after=next_after)

    async def cancel(self, batch_id: str, *, actor: str) -> BatchView:
        """Cancel a processing batch: the batch, every non-terminal item and child. Items not
        yet sent are never sent (the relay's claim skips cancelled batches); sends already in
        flight end cancelled. Cancelling again answers the cancelled batch; a batch that
        already finished is a `Conflict`.

        With at most `cancel_inline_max` processing items everything is marked in this one
        transaction. Above it only the batch row is: the batch is cancelled for every writer
        from that commit on (see `settle_cancels`), the answer comes at once with the items
        still counted as queued or running (`BatchView.cancelling`), and the relay's sweeper
        marks them in short transactions."""

        async def work() -> BatchView:
            async with transaction(self._pool) as conn:
                row = await (await conn.execute(_SQL.lock_batch, {"batch_id": batch_id})).fetchone()
                if row is None:
                    raise NotFound("batch not found")
                counts = await batch_counts(conn, batch_id, str(row["type"]))
                current = _view(row, counts)
                if current.status is BatchStatus.CANCELLED:
                    return current
                if current.status is not BatchStatus.PROCESSING:
                    raise Conflict(f"the batch already ended with status {current.status.value}")
                inline = counts.queued + counts.running <= self._limits.cancel_inline_max
                params = {"batch_id": batch_id, "actor": actor, "settled": inline}
                await conn.execute(_SQL.cancel_batch, params)
                if inline:
                    await conn.execute(_SQL.cancel_children, params)
                    await conn.execute(_cancel_items(str(row["type"])), params)
                row = await (await conn.execute(_SQL.get_batch, {"batch_id": batch_id})).fetchone()
                assert row is not None
                return _view(row, await batch_counts(conn, batch_id, str(row["type"])))

        return await retry_on_deadlock(work)

    async def delete(self, batch_id: str, *, actor: str) -> None:
        """Soft delete: cancel what has not ended (so every child reaches an end state), then
        hide the batch, its items and its children. The relay never claims them again."""

        async def work() -> None:
            async with transaction(self._pool) as conn:
                row = await (await conn.execute(_SQL.lock_batch, {"batch_id": batch_id})).fetchone()
                if row is None:
                    raise NotFound("batch not found")
                params = {"batch_id": batch_id, "actor": actor}
                await conn.execute(_SQL.cancel_children, params)
                await conn.execute(_cancel_items(str(row["type"])), params)
                await conn.execute(_SQL.delete_batch, params)

        await retry_on_deadlock(work)
