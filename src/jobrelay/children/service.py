"""Reads of Page Import and Code2Des rows for the API and the console (scope is checked by
the caller: `jobrelay.api.deps.owned_by_caller`)."""

from __future__ import annotations

from typing import LiteralString

from psycopg_pool import AsyncConnectionPool

from jobrelay.children.views import (
    BatchChildKind,
    BatchChildView,
    batch_child_kind,
    batch_child_view,
)
from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.errors import NotFound
from jobrelay.protocol import ChildKind

_SQL = Queries("jobrelay.children")

_GET: dict[BatchChildKind, LiteralString] = {
    "page_import": _SQL.get_page_import,
    "code2des": _SQL.get_code2des,
}


class ChildService:
    """The children of batches by their own id."""

    def __init__(self, pool: AsyncConnectionPool[Connection]) -> None:
        self._pool = pool

    async def owner(self, kind: ChildKind, child_id: str) -> int:
        """The organization of a visible child, or `NotFound`."""
        return (await self.get(kind, child_id)).organization_id

    async def get(self, kind: ChildKind, child_id: str) -> BatchChildView:
        """The visible (not deleted) child, or `NotFound` (also for a kind batches do not
        carry)."""
        try:
            batch_kind = batch_child_kind(kind)
        except ValueError:
            raise NotFound(f"{kind} not found") from None
        async with self._pool.connection() as conn:
            row = await (await conn.execute(_GET[batch_kind], {"id": child_id})).fetchone()
        if row is None:
            raise NotFound(f"{kind} not found")
        return batch_child_view(batch_kind, row)
