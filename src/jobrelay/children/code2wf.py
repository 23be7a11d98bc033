"""The `code2wf` rows (seed 004): every statement that reads or writes a generation, each on
the caller's connection. The rules (who may create, when a placement may be recorded) are
the Code2WF service's (`jobrelay.generations.code2wf`); the worker outcome is
`jobrelay.children.outcomes.CODE2WF`."""

from __future__ import annotations

from jobrelay.children.views import (
    Code2WfView,
    DispatchSource,
    PageImportSource,
    code2wf_view,
    dispatch_source_view,
    page_import_source_view,
)
from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries

_SQL = Queries("jobrelay.children")


async def page_import_for_create(
    conn: Connection, page_import_id: str, *, organization_id: int
) -> PageImportSource | None:
    """The source Page Import as the organization sees it, locked `FOR SHARE` until the
    caller's transaction ends (it cannot be deleted or change state meanwhile)."""
    cursor = await conn.execute(
        _SQL.code2wf_page_import_for_create,
        {"page_import_id": page_import_id, "organization_id": organization_id},
    )
    row = await cursor.fetchone()
    return None if row is None else page_import_source_view(row)


async def insert(
    conn: Connection,
    *,
    id: str,
    organization_id: int,
    project_id: int,
    page_import_id: str,
    figma_file_key: str,
    screen_id: str,
    placement_target: str | None,
    actor: str,
) -> Code2WfView:
    """Create a processing generation (attempt 1)."""
    cursor = await conn.execute(
        _SQL.code2wf_insert,
        {
            "id": id,
            "organization_id": organization_id,
            "project_id": project_id,
            "page_import_id": page_import_id,
            "figma_file_key": figma_file_key,
            "screen_id": screen_id,
            "placement_target": placement_target,
            "actor": actor,
        },
    )
    row = await cursor.fetchone()
    assert row is not None
    return code2wf_view(row)


async def get(conn: Connection, code2wf_id: str) -> Code2WfView | None:
    """The visible (not deleted) generation, or None."""
    row = await (await conn.execute(_SQL.code2wf_get, {"id": code2wf_id})).fetchone()
    return None if row is None else code2wf_view(row)


async def discover(
    conn: Connection,
    *,
    organization_id: int,
    project_id: int,
    figma_file_key: str,
    status: str | None,
    after: str | None,
    limit: int,
) -> list[Code2WfView]:
    """Up to `limit` visible generations of one Figma file (optionally one status) with ids
    after `after`, oldest first."""
    cursor = await conn.execute(
        _SQL.code2wf_discover,
        {
            "organization_id": organization_id,
            "project_id": project_id,
            "figma_file_key": figma_file_key,
            "status": status,
            "after": after,
            "limit": limit,
        },
    )
    return [code2wf_view(row) for row in await cursor.fetchall()]


async def of_page_import(conn: Connection, page_import_id: str, *, limit: int) -> list[Code2WfView]:
    """Up to `limit` visible generations made from one Page Import, oldest first."""
    cursor = await conn.execute(
        _SQL.code2wf_of_page_import, {"page_import_id": page_import_id, "limit": limit}
    )
    return [code2wf_view(row) for row in await cursor.fetchall()]


async def dispatch_source(conn: Connection, code2wf_id: str) -> DispatchSource | None:
    """What the dispatch job sends for a generation (deleted or not), or None."""
    row = await (await conn.execute(_SQL.code2wf_dispatch_source, {"id": code2wf_id})).fetchone()
    return None if row is None else dispatch_source_view(row)


async def materialize(conn: Connection, code2wf_id: str, *, actor: str) -> bool:
    """Record the placement of a completed generation once; False when nothing changed
    (already recorded, not completed, or deleted)."""
    cursor = await conn.execute(_SQL.code2wf_materialize, {"id": code2wf_id, "actor": actor})
    return await cursor.fetchone() is not None


async def soft_delete(conn: Connection, code2wf_id: str, *, actor: str) -> bool:
    """Hide a generation from reads and discovery; False when it was already deleted."""
    cursor = await conn.execute(_SQL.code2wf_soft_delete, {"id": code2wf_id, "actor": actor})
    return await cursor.fetchone() is not None


async def fail_dispatch(conn: Connection, code2wf_id: str, *, error_message: str) -> None:
    """The dispatch gave up: a processing generation fails with a safe message."""
    await conn.execute(
        _SQL.code2wf_fail_dispatch, {"id": code2wf_id, "error_message": error_message}
    )


async def fail_orphans(conn: Connection) -> list[str]:
    """Fail the processing generations whose dispatch job ended without dispatching; returns
    their ids."""
    cursor = await conn.execute(_SQL.code2wf_fail_orphans)
    return [str(row["id"]) for row in await cursor.fetchall()]
