"""Child job lifecycles completed by worker webhooks: page_import and code2des.

A child is created processing ('0') with its batch (see `jobrelay.batches.creation`) and
ends exactly once: completed ('1') or failed ('2') by a worker outcome, failed by the relay
after its third failed dispatch, or cancelled ('3') with its batch. Every terminal write is a
compare-and-set from '0', so whichever writer comes first wins and the others see the
terminal state.

Each child kind has one `ChildLifecycle`: how to read a row and how to apply a worker outcome
to it. Code2WF (issue 7) adds its own lifecycle with the `attempt` fence under `kind:
code2wf`; the webhook dispatches on `kind` through `LIFECYCLES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, LiteralString, Protocol

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.batch_status import ChildStatus
from jobrelay.domain.errors import NotFound
from jobrelay.protocol import ChildKind, WorkerOutcome

_SQL = Queries("jobrelay.generations")


@dataclass(frozen=True, slots=True)
class OutcomeResult:
    """What applying an outcome did: `changed` (the CAS won), the child's status afterwards,
    and `conflict` when the child already ended differently."""

    kind: ChildKind
    id: str
    status: ChildStatus
    changed: bool
    conflict: bool = False
    detail: str | None = None  # why it conflicts, when "already ended" is not the reason


class ChildLifecycle(Protocol):
    """One child kind's reads and terminal writes."""

    @property
    def kind(self) -> ChildKind: ...

    async def get(self, conn: Connection, child_id: str) -> dict[str, Any] | None:
        """The visible (not deleted) row, or None."""
        ...

    async def apply(self, conn: Connection, outcome: WorkerOutcome, *, actor: str) -> OutcomeResult:
        """Apply a worker outcome on the caller's transaction; `NotFound` for an unknown id."""
        ...


def _target(outcome: WorkerOutcome) -> ChildStatus:
    return ChildStatus.COMPLETED if outcome.outcome == "completed" else ChildStatus.FAILED


def _settle(outcome: WorkerOutcome, current: ChildStatus, *, changed: bool) -> OutcomeResult:
    """The same outcome again is a no-op, a cancelled child stays cancelled, anything else
    that already ended differently is a conflict."""
    target = _target(outcome)
    conflict = not changed and current not in (target, ChildStatus.CANCELLED)
    return OutcomeResult(
        kind=outcome.kind, id=outcome.id, status=current, changed=changed, conflict=conflict
    )


@dataclass(frozen=True)
class _CasLifecycle:
    kind: ChildKind
    get_sql: LiteralString
    finish_sql: LiteralString
    status_sql: LiteralString
    has_manifest: bool

    async def get(self, conn: Connection, child_id: str) -> dict[str, Any] | None:
        row = await (await conn.execute(self.get_sql, {"id": child_id})).fetchone()
        return dict(row) if row is not None else None

    async def apply(self, conn: Connection, outcome: WorkerOutcome, *, actor: str) -> OutcomeResult:
        params: dict[str, Any] = {
            "id": outcome.id,
            "status": _target(outcome).value,
            "result_url": outcome.result_url,
            "error_message": outcome.error_message,
            "actor": actor,
        }
        if self.has_manifest:
            params["manifest_hash"] = outcome.manifest_hash
        row = await (await conn.execute(self.finish_sql, params)).fetchone()
        if row is not None:
            return _settle(outcome, ChildStatus(str(row["status"])), changed=True)
        row = await (await conn.execute(self.status_sql, {"id": outcome.id})).fetchone()
        if row is None:
            raise NotFound(f"no {outcome.kind} with id {outcome.id}")
        return _settle(outcome, ChildStatus(str(row["status"])), changed=False)


PAGE_IMPORT = _CasLifecycle(
    kind="page_import",
    get_sql=_SQL.get_page_import,
    finish_sql=_SQL.finish_page_import,
    status_sql=_SQL.page_import_status,
    has_manifest=True,
)
CODE2DES = _CasLifecycle(
    kind="code2des",
    get_sql=_SQL.get_code2des,
    finish_sql=_SQL.finish_code2des,
    status_sql=_SQL.code2des_status,
    has_manifest=False,
)

LIFECYCLES: dict[str, ChildLifecycle] = {"page_import": PAGE_IMPORT, "code2des": CODE2DES}


class ChildService:
    """Reads of child rows for the API (scope is checked by the caller)."""

    def __init__(self, pool: AsyncConnectionPool[Connection]) -> None:
        self._pool = pool

    async def owner(self, kind: ChildKind, child_id: str) -> int:
        """The organization of a visible child, or `NotFound`."""
        return int(str((await self.get(kind, child_id))["organization_id"]))

    async def get(self, kind: ChildKind, child_id: str) -> dict[str, Any]:
        lifecycle = LIFECYCLES.get(kind)
        if lifecycle is None:
            raise NotFound(f"{kind} not found")
        async with self._pool.connection() as conn:
            row = await lifecycle.get(conn, child_id)
        if row is None:
            raise NotFound(f"{kind} not found")
        return row
