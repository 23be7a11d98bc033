"""The API's batch service: create, read with derived status, list items, cancel, soft
delete. The relay's writes are `jobrelay.batches.outbox`.

Scope checks are the caller's job (the API checks membership of the batch's organization
before acting); everything here works on a batch id that may be shown to the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

from jobrelay.batches.counts import COUNT_FIELDS, batch_counts
from jobrelay.batches.creation import BatchLimits, insert_batch, prepare_batch
from jobrelay.batches.outbox import cancel_rest
from jobrelay.children.batch import delete_batch_children
from jobrelay.db.deadlock import retry_on_deadlock
from jobrelay.db.pool import Connection, transaction, transaction_on
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

_SQL = Queries("jobrelay.batches")


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
        conn: Connection | None = None,
    ) -> BatchView:
        """Validate (nothing is written on `InvalidInput`), then store in one transaction
        (of `conn` when given: the caller's, e.g. with its idempotency key)."""
        prepared = prepare_batch(
            batch_type=batch_type,
            items=items,
            organization_id=organization_id,
            project_id=project_id,
            limits=self._limits,
        )
        async with transaction_on(self._pool, conn) as writer:
            row = await insert_batch(writer, prepared, actor=actor)
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
        counts = BatchCounts(**{k: int(str(row[k])) for k in COUNT_FIELDS})
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
                    await cancel_rest(conn, batch_id, str(row["type"]), actor=actor)
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
                await cancel_rest(conn, batch_id, str(row["type"]), actor=actor)
                await conn.execute(_SQL.delete_batch, {"batch_id": batch_id, "actor": actor})
                await delete_batch_children(conn, batch_id, actor=actor)

        await retry_on_deadlock(work)
