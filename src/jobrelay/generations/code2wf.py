"""The Code2WF generation lifecycle (seed 004): create, dispatch, outcome, discovery,
result, materialization, soft delete.

A valid POST always creates a new row (no request dedupe) and its `code2wf.dispatch` job in
one transaction. The dispatch job sends the worker message; when it gives up, the row fails
with a safe message. The worker's outcome is a compare-and-set from processing fenced by
`attempt` (fixed at 1 in V1): an outcome for another attempt changes nothing. Placement
(`materialized_at`) is recorded once, only after completion; no Figma node ids are stored.

The rules live here; the rows are written and read by `jobrelay.children.code2wf`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from psycopg_pool import AsyncConnectionPool

from jobrelay.auth.tenancy import ProjectScope
from jobrelay.children import code2wf as rows
from jobrelay.children.views import Code2WfView, PageImportSource
from jobrelay.db.pool import Connection, transaction, transaction_on
from jobrelay.domain.batch_status import ChildStatus
from jobrelay.domain.errors import Conflict, FieldError, InvalidInput, NotFound
from jobrelay.ids import new_id
from jobrelay.jobs.enqueue import EnqueueRequest
from jobrelay.jobs.service import JobsService

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
        self,
        scope: ProjectScope,
        request: NewGeneration,
        *,
        actor: str,
        conn: Connection | None = None,
    ) -> Code2WfView:
        """Create the row and its dispatch job in one transaction (both or neither), of
        `conn` when given (the caller's, e.g. with its idempotency key)."""
        async with transaction_on(self._pool, conn) as conn:
            source = await rows.page_import_for_create(
                conn, request.page_import_id, organization_id=scope.organization_id
            )
            _require_usable_page_import(source, scope)
            generation = await rows.insert(
                conn,
                id=new_id(),
                organization_id=scope.organization_id,
                project_id=scope.project_id,
                page_import_id=request.page_import_id,
                figma_file_key=request.figma_file_key,
                screen_id=request.screen_id,
                placement_target=request.placement_target,
                actor=actor,
            )
            if self._failpoint is not None:
                await self._failpoint(generation.id)
            await self._jobs.enqueue(
                EnqueueRequest(type=DISPATCH_TYPE, payload={"code2wfId": generation.id}),
                conn=conn,
            )
        return generation

    async def owner(self, code2wf_id: str) -> int:
        """The organization of a visible generation, or `NotFound`."""
        return (await self.get(code2wf_id)).organization_id

    async def get(self, code2wf_id: str) -> Code2WfView:
        """The generation, or `NotFound` when it does not exist or was deleted."""
        async with self._pool.connection() as conn:
            generation = await rows.get(conn, code2wf_id)
        if generation is None:
            raise NotFound("code2wf not found")
        return generation

    async def discover(
        self,
        scope: ProjectScope,
        *,
        figma_file_key: str,
        status: str | None,
        limit: int,
        after: str | None,
    ) -> tuple[list[Code2WfView], str | None]:
        """Generations of one Figma file (optionally one status), oldest first, by pages."""
        async with self._pool.connection() as conn:
            found = await rows.discover(
                conn,
                organization_id=scope.organization_id,
                project_id=scope.project_id,
                figma_file_key=figma_file_key,
                status=status,
                after=after,
                limit=limit + 1,
            )
        page = found[:limit]
        return page, (page[-1].id if len(found) > limit else None)

    async def of_page_import(self, page_import_id: str, *, limit: int) -> list[Code2WfView]:
        """The visible generations made from one Page Import, oldest first, at most `limit`
        (same organization and project as the Page Import: creation requires it)."""
        async with self._pool.connection() as conn:
            return await rows.of_page_import(conn, page_import_id, limit=limit)

    async def materialize(self, code2wf_id: str, *, actor: str) -> Code2WfView:
        """Record placement once (a repeat returns the same row); 409 unless completed."""
        generation = await self.get(code2wf_id)
        if generation.status is not ChildStatus.COMPLETED:
            raise Conflict("only a completed generation can be materialized")
        if generation.materialized_at is None:
            async with transaction(self._pool) as conn:
                await rows.materialize(conn, code2wf_id, actor=actor)
            generation = await self.get(code2wf_id)
        return generation

    async def delete(self, code2wf_id: str, *, actor: str) -> None:
        """Soft delete: hidden from reads and discovery from now on."""
        await self.get(code2wf_id)
        async with transaction(self._pool) as conn:
            await rows.soft_delete(conn, code2wf_id, actor=actor)


async def fail_orphaned_generations(pool: AsyncConnectionPool[Connection]) -> list[str]:
    """Fail processing generations whose dispatch job ended without dispatching (its lease
    expired on the last attempt, or an operator cancelled it); run by every worker as the
    sweep `code2wf.orphans`."""
    async with transaction(pool) as conn:
        return await rows.fail_orphans(conn)


def _require_usable_page_import(source: PageImportSource | None, scope: ProjectScope) -> None:
    def invalid(message: str) -> InvalidInput:
        return InvalidInput(message, [FieldError("pageImportId", message)])

    if source is None or source.deleted:
        raise invalid("no such page import in this organization")
    if source.project_id != scope.project_id:
        raise invalid("the page import belongs to another project")
    if source.status is ChildStatus.PROCESSING:
        raise Conflict("the page import is still processing; retry when it has completed")
    if source.status is not ChildStatus.COMPLETED or not source.result_url:
        raise Conflict("the page import did not complete; import the page again")
