"""The Code2WF generation lifecycle (seed 004): create, dispatch, outcome, discovery,
result, materialization, soft delete.

A valid POST always creates a new row (no request dedupe) and its `code2wf.dispatch` job in
one transaction. The dispatch job sends the worker message; when it gives up, the row fails
with a safe message. The worker's outcome is a compare-and-set from processing fenced by
`attempt` (fixed at 1 in V1): an outcome for another attempt changes nothing. Placement
(`materialized_at`) is recorded once, only after completion; no Figma node ids are stored.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool

from jobrelay.auth.tenancy import ProjectScope
from jobrelay.db.pool import Connection, transaction
from jobrelay.db.sql import Queries
from jobrelay.domain.batch_status import ChildStatus
from jobrelay.domain.errors import Conflict, FieldError, InvalidInput, NotFound
from jobrelay.generations.children import OutcomeResult
from jobrelay.ids import new_id
from jobrelay.jobs.enqueue import EnqueueRequest
from jobrelay.jobs.service import JobsService
from jobrelay.protocol import ChildKind, WorkerOutcome

_SQL = Queries("jobrelay.generations")

DISPATCH_TYPE = "code2wf.dispatch"
PAGE_SIZE_MAX = 200

# Test hook: called inside the creating transaction after the row insert (failure injection).
Failpoint = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class NewGeneration:
    page_import_id: str
    figma_file_key: str
    screen_id: str
    placement_target: str | None = None


class Code2WfService:
    """Code2WF reads and writes. Who may act is decided before: creation and discovery take
    an already checked `ProjectScope`, and the API authorizes a generation reached by its id
    (`jobrelay.api.deps.owned_by_caller`)."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        jobs: JobsService,
        *,
        failpoint: Failpoint | None = None,
    ) -> None:
        self._pool = pool
        self._jobs = jobs
        self._failpoint = failpoint

    async def create(
        self, scope: ProjectScope, request: NewGeneration, *, actor: str
    ) -> dict[str, Any]:
        """Create the row and its dispatch job in one transaction (both or neither)."""
        async with transaction(self._pool) as conn:
            source = await (
                await conn.execute(
                    _SQL.code2wf_page_import_for_create,
                    {
                        "page_import_id": request.page_import_id,
                        "organization_id": scope.organization_id,
                    },
                )
            ).fetchone()
            _require_usable_page_import(source, scope)
            row = await (
                await conn.execute(
                    _SQL.code2wf_insert,
                    {
                        "id": new_id(),
                        "organization_id": scope.organization_id,
                        "project_id": scope.project_id,
                        "page_import_id": request.page_import_id,
                        "figma_file_key": request.figma_file_key,
                        "screen_id": request.screen_id,
                        "placement_target": request.placement_target,
                        "actor": actor,
                    },
                )
            ).fetchone()
            assert row is not None
            if self._failpoint is not None:
                await self._failpoint(str(row["id"]))
            await self._jobs.enqueue(
                EnqueueRequest(type=DISPATCH_TYPE, payload={"code2wfId": row["id"]}), conn=conn
            )
        return dict(row)

    async def owner(self, code2wf_id: str) -> int:
        """The organization of a visible generation, or `NotFound`."""
        return int(str((await self.get(code2wf_id))["organization_id"]))

    async def get(self, code2wf_id: str) -> dict[str, Any]:
        """The generation, or `NotFound` when it does not exist or was deleted."""
        async with self._pool.connection() as conn:
            row = await (await conn.execute(_SQL.code2wf_get, {"id": code2wf_id})).fetchone()
        if row is None:
            raise NotFound("code2wf not found")
        return dict(row)

    async def discover(
        self,
        scope: ProjectScope,
        *,
        figma_file_key: str,
        status: str | None,
        limit: int,
        after: str | None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Generations of one Figma file (optionally one status), oldest first, by pages."""
        async with self._pool.connection() as conn:
            rows = await (
                await conn.execute(
                    _SQL.code2wf_discover,
                    {
                        "organization_id": scope.organization_id,
                        "project_id": scope.project_id,
                        "figma_file_key": figma_file_key,
                        "status": status,
                        "after": after,
                        "limit": limit + 1,
                    },
                )
            ).fetchall()
        page = [dict(r) for r in rows[:limit]]
        return page, (str(page[-1]["id"]) if len(rows) > limit else None)

    async def of_page_import(self, page_import_id: str, *, limit: int) -> list[dict[str, Any]]:
        """The visible generations made from one Page Import, oldest first, at most `limit`
        (same organization and project as the Page Import: creation requires it)."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                _SQL.code2wf_of_page_import, {"page_import_id": page_import_id, "limit": limit}
            )
            return [dict(r) for r in await cursor.fetchall()]

    async def materialize(self, code2wf_id: str, *, actor: str) -> dict[str, Any]:
        """Record placement once (a repeat returns the same row); 409 unless completed."""
        row = await self.get(code2wf_id)
        if row["status"] != ChildStatus.COMPLETED.value:
            raise Conflict("only a completed generation can be materialized")
        if row["materialized_at"] is None:
            async with transaction(self._pool) as conn:
                await conn.execute(_SQL.code2wf_materialize, {"id": code2wf_id, "actor": actor})
            row = await self.get(code2wf_id)
        return row

    async def delete(self, code2wf_id: str, *, actor: str) -> None:
        """Soft delete: hidden from reads and discovery from now on."""
        await self.get(code2wf_id)
        async with transaction(self._pool) as conn:
            await conn.execute(_SQL.code2wf_soft_delete, {"id": code2wf_id, "actor": actor})


async def fail_orphaned_generations(pool: AsyncConnectionPool[Connection]) -> list[str]:
    """Fail processing generations whose dispatch job ended without dispatching (its lease
    expired on the last attempt, or an operator cancelled it); run by every worker as the
    sweep `code2wf.orphans`."""
    async with transaction(pool) as conn:
        rows = await (await conn.execute(_SQL.code2wf_fail_orphans)).fetchall()
    return [str(r["id"]) for r in rows]


def _require_usable_page_import(source: dict[str, Any] | None, scope: ProjectScope) -> None:
    def invalid(message: str) -> InvalidInput:
        return InvalidInput(message, [FieldError("pageImportId", message)])

    if source is None or source["deleted_at"] is not None:
        raise invalid("no such page import in this organization")
    if int(source["project_id"]) != scope.project_id:
        raise invalid("the page import belongs to another project")
    status = str(source["status"])
    if status == ChildStatus.PROCESSING.value:
        raise Conflict("the page import is still processing; retry when it has completed")
    if status != ChildStatus.COMPLETED.value or not source["result_url"]:
        raise Conflict("the page import did not complete; import the page again")


@dataclass(frozen=True)
class Code2WfLifecycle:
    """Worker outcomes for Code2WF: a CAS from processing fenced by `attempt`. The same
    outcome again is a no-op; another attempt, or a different terminal outcome, conflicts
    and changes nothing."""

    kind: ChildKind = "code2wf"

    async def get(self, conn: Connection, child_id: str) -> dict[str, Any] | None:
        row = await (await conn.execute(_SQL.code2wf_get, {"id": child_id})).fetchone()
        return dict(row) if row is not None else None

    async def apply(self, conn: Connection, outcome: WorkerOutcome, *, actor: str) -> OutcomeResult:
        target = ChildStatus.COMPLETED if outcome.outcome == "completed" else ChildStatus.FAILED
        row = await (
            await conn.execute(
                _SQL.code2wf_finish,
                {
                    "id": outcome.id,
                    "status": target.value,
                    "attempt": outcome.attempt,
                    "result_url": outcome.result_url,
                    "flag_count": outcome.flag_count if target is ChildStatus.COMPLETED else None,
                    "error_message": outcome.error_message,
                    "actor": actor,
                },
            )
        ).fetchone()
        if row is not None:
            return OutcomeResult(kind=self.kind, id=outcome.id, status=target, changed=True)
        current = await (await conn.execute(_SQL.code2wf_status, {"id": outcome.id})).fetchone()
        if current is None:
            raise NotFound(f"no code2wf with id {outcome.id}")
        status = ChildStatus(str(current["status"]))
        attempt = int(str(current["attempt"]))
        if attempt != outcome.attempt:
            return OutcomeResult(
                kind=self.kind,
                id=outcome.id,
                status=status,
                changed=False,
                conflict=True,
                detail=f"attempt {outcome.attempt} does not match the generation's attempt "
                f"{attempt}",
            )
        return OutcomeResult(
            kind=self.kind,
            id=outcome.id,
            status=status,
            changed=False,
            conflict=status is not target,
        )


CODE2WF = Code2WfLifecycle()
