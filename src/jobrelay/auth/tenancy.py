"""Organizations, projects and membership; the scope check behind every resource endpoint.

A caller acts only inside organizations it is a member of. A project of another
organization and a project that does not exist give the same `NotFound`, so responses never
reveal what exists elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.errors import translated_errors
from jobrelay.db.pool import Connection, transaction
from jobrelay.db.sql import Queries
from jobrelay.domain.errors import NotFound

_SQL = Queries("jobrelay.auth")

Role = Literal["member", "admin"]


@dataclass(frozen=True, slots=True)
class ProjectScope:
    """A project the caller may act in, with its organization."""

    organization_id: int
    project_id: int
    role: str


class Tenancy:
    """Tenancy reads and writes over the pool."""

    def __init__(self, pool: AsyncConnectionPool[Connection]) -> None:
        self._pool = pool

    async def project_scope(self, subject: str, project_id: int) -> ProjectScope:
        """The project scope for `subject`, or `NotFound` (missing and foreign look alike)."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                _SQL.project_scope, {"project_id": project_id, "subject": subject}
            )
            row = await cur.fetchone()
        if row is None:
            raise NotFound("project not found")
        return ProjectScope(
            organization_id=int(str(row["organization_id"])),
            project_id=int(str(row["project_id"])),
            role=str(row["role"]),
        )

    async def is_member(self, subject: str, organization_id: int) -> bool:
        """True when `subject` belongs to the organization."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                _SQL.organization_scope,
                {"organization_id": organization_id, "subject": subject},
            )
            return await cur.fetchone() is not None

    async def create_organization(self, name: str, *, actor: str) -> dict[str, Any]:
        async with transaction(self._pool) as conn:
            row = await (
                await conn.execute(_SQL.create_organization, {"name": name, "actor": actor})
            ).fetchone()
        assert row is not None
        return dict(row)

    async def create_project(
        self, organization_id: int, name: str, *, actor: str
    ) -> dict[str, Any]:
        async with transaction(self._pool) as conn:
            row = await (
                await conn.execute(
                    _SQL.create_project,
                    {"organization_id": organization_id, "name": name, "actor": actor},
                )
            ).fetchone()
        if row is None:
            raise NotFound(f"organization {organization_id} not found")
        return dict(row)

    async def add_member(
        self, organization_id: int, subject: str, *, role: Role = "member", actor: str
    ) -> dict[str, Any]:
        async with transaction(self._pool) as conn:
            with translated_errors():
                row = await (
                    await conn.execute(
                        _SQL.add_member,
                        {
                            "organization_id": organization_id,
                            "subject": subject,
                            "role": role,
                            "actor": actor,
                        },
                    )
                ).fetchone()
        if row is None:
            raise NotFound(f"organization {organization_id} not found")
        return dict(row)

    async def organizations_of(self, subject: str) -> list[dict[str, Any]]:
        """The organizations `subject` belongs to, with role and projects."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(_SQL.organizations_of_subject, {"subject": subject})
            return [dict(r) for r in await cur.fetchall()]

    async def get_project(self, scope: ProjectScope) -> dict[str, Any]:
        """The project row of an already checked scope."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(_SQL.get_project, {"project_id": scope.project_id})
            row = await cur.fetchone()
        if row is None:
            raise NotFound("project not found")
        return dict(row)

    async def list_organizations(self) -> list[dict[str, Any]]:
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(_SQL.list_organizations)).fetchall()
        return [dict(r) for r in rows]
