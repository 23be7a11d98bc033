"""Worker outcomes: the one terminal write a webhook makes to a child.

A child is created processing ('0') and ends exactly once: completed ('1') or failed ('2')
by a worker outcome, failed by the relay after its third failed dispatch, or cancelled
('3') with its batch. Every terminal write is a compare-and-set from '0', so whichever
writer comes first wins and the others see the terminal state. The same outcome again is a
no-op, a cancelled child stays cancelled, anything else that already ended differently is a
conflict. Code2WF outcomes are also fenced by the generation's `attempt`.

Each child kind has one `ChildLifecycle`; `LIFECYCLES` maps every kind a worker reports on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, LiteralString, Protocol

from jobrelay.children.views import OutcomeResult
from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.batch_status import ChildStatus
from jobrelay.domain.errors import NotFound
from jobrelay.protocol import ChildKind, WorkerOutcome

_SQL = Queries("jobrelay.children")


class ChildLifecycle(Protocol):
    """How one child kind takes a worker outcome."""

    @property
    def kind(self) -> ChildKind: ...

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
class _BatchChildLifecycle:
    """Page Import and Code2Des: a CAS from processing; a child of a batch whose cancel is
    still settling ends cancelled instead (`finish_*.sql`)."""

    kind: ChildKind
    finish_sql: LiteralString
    status_sql: LiteralString
    has_manifest: bool

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


@dataclass(frozen=True)
class _Code2WfLifecycle:
    """Code2WF: a CAS from processing fenced by `attempt`. The same outcome again is a
    no-op; another attempt, or a different terminal outcome, conflicts and changes nothing."""

    kind: ChildKind = "code2wf"

    async def apply(self, conn: Connection, outcome: WorkerOutcome, *, actor: str) -> OutcomeResult:
        target = _target(outcome)
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


PAGE_IMPORT: ChildLifecycle = _BatchChildLifecycle(
    kind="page_import",
    finish_sql=_SQL.finish_page_import,
    status_sql=_SQL.page_import_status,
    has_manifest=True,
)
CODE2DES: ChildLifecycle = _BatchChildLifecycle(
    kind="code2des",
    finish_sql=_SQL.finish_code2des,
    status_sql=_SQL.code2des_status,
    has_manifest=False,
)
CODE2WF: ChildLifecycle = _Code2WfLifecycle()

LIFECYCLES: Mapping[str, ChildLifecycle] = {
    "page_import": PAGE_IMPORT,
    "code2des": CODE2DES,
    "code2wf": CODE2WF,
}
"""Every child kind a worker can report on."""
