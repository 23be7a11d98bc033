"""The children of batches: every write a batch makes to `page_import` / `code2des`.

Each function runs one statement on the caller's connection, inside the caller's
transaction, so the batch part can put it beside its own item statements. A statement here
changes children only, never an item: the count triggers of migration 0012 see one table
each, so a writer that changes an item and its child runs two statements (children first,
like a webhook, then the items: `jobrelay.batches`).

Where a statement names a child table, there is one file per table, chosen by the child
kind (`_COPY`, `_SETTLE_CANCEL`); no SQL is assembled at run time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import LiteralString

from jobrelay.children.views import BatchChildKind
from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries

_SQL = Queries("jobrelay.children")

_COPY: dict[BatchChildKind, LiteralString] = {
    "page_import": _SQL.copy_page_imports,
    "code2des": _SQL.copy_code2des,
}
_SETTLE_CANCEL: dict[BatchChildKind, LiteralString] = {
    "page_import": _SQL.settle_cancel_page_import,
    "code2des": _SQL.settle_cancel_code2des,
}


@dataclass(frozen=True, slots=True)
class NewChild:
    """One child of a new batch: its id and its validated request as JSON text."""

    id: str
    request_json: str


@dataclass(frozen=True, slots=True)
class ChildFailure:
    """A child whose item failed for good, with the item's error."""

    child_id: str
    error: str


async def copy_batch_children(
    conn: Connection,
    kind: BatchChildKind,
    children: Iterable[NewChild],
    *,
    organization_id: int,
    project_id: int,
    batch_id: str,
    actor: str,
) -> None:
    """Create the processing children of a new batch with one COPY, whatever their number."""
    async with conn.cursor() as cursor, cursor.copy(_COPY[kind]) as copy:
        for child in children:
            await copy.write_row(
                (
                    child.id,
                    organization_id,
                    project_id,
                    batch_id,
                    child.request_json,
                    actor,
                    actor,
                )
            )


async def cancel_batch_children(conn: Connection, batch_id: str, *, actor: str) -> int:
    """Cancel ('3') every processing child of the batch; returns how many."""
    cursor = await conn.execute(_SQL.cancel_batch_children, {"batch_id": batch_id, "actor": actor})
    row = await cursor.fetchone()
    return 0 if row is None else int(str(row["cancelled"]))


async def settle_cancel_children(
    conn: Connection, kind: BatchChildKind, batch_id: str, *, actor: str, limit: int
) -> list[str]:
    """One step of a background cancel: cancel up to `limit` processing children of the
    batch that no webhook holds; returns their ids (their items are the caller's)."""
    cursor = await conn.execute(
        _SETTLE_CANCEL[kind], {"batch_id": batch_id, "actor": actor, "limit": limit}
    )
    return [str(row["id"]) for row in await cursor.fetchall()]


async def fail_batch_children(
    conn: Connection, failures: Sequence[ChildFailure], *, actor: str
) -> None:
    """Fail ('2') the processing children of items that failed for good, each with its
    item's error (a child of a batch whose cancel is settling is left to the cancel)."""
    if not failures:
        return
    await conn.execute(
        _SQL.fail_batch_children,
        {
            "job_ids": [f.child_id for f in failures],
            "errors": [f.error for f in failures],
            "actor": actor,
        },
    )


async def delete_batch_children(conn: Connection, batch_id: str, *, actor: str) -> None:
    """Soft delete every child of the batch (the batch and its items are the caller's)."""
    await conn.execute(_SQL.delete_batch_children, {"batch_id": batch_id, "actor": actor})
