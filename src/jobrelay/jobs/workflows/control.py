"""Acting on a whole workflow: cancel, retry, the backstop of a cancel and retention.

A **cancel** marks the workflow (`cancelled_at`, `cancelled_by`: the first cancel's) and
then ends its active steps as cancelled in sweeps that skip rows another transaction
locks (a step completing or being released right now): it never waits on a completion,
so it cannot deadlock with one that releases the dependents it is cancelling. A step such
a completion released after a sweep is ended by the next sweep; a running step loses its
row, so its worker's heartbeat or completion finds none and stops (the claim token fences
a late completion off, as for a cancelled job). What a cancel could not reach at once
(the canceller died between marking and sweeping) is ended by `end_cancelled_steps` in
every worker's maintenance. A cancel racing the last step's completion ends in one state:
the step either completed (the workflow's status then follows its steps: `completed`) or
was cancelled (`cancelled`), never both.

A **retry** locks the workflow row, and when no step is active revives its failed,
cancelled and skipped steps and everything downstream of them (`retry_steps.sql`), keeping
completed steps and their results: a completed step's side effects happen once.

Both are idempotent: cancelling a cancelled workflow, or retrying one that is running
again after a retry, returns it unchanged; a retry of a completed workflow and a cancel of
an ended one that was not cancelled are a `Conflict` naming the state.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import cast

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.errors import Conflict, NotFound

_QUERIES = Queries("jobrelay.jobs.workflows")
SWEEP_ROWS = 5_000  # steps one cancel sweep ends (one statement, one transaction)
SWEEPS_MAX = 50  # sweeps a cancel makes before it leaves the rest to the backstop
SWEEP_PAUSE_S = 0.02  # between sweeps that found only locked steps


async def cancel_workflow(conn: Connection, workflow_id: uuid.UUID, *, actor: str) -> int:
    """Cancel the workflow's active steps (see the module docstring); returns how many it
    ended. Raises `NotFound`, or `Conflict` when the workflow ended without a cancel."""
    async with conn.transaction():
        cursor = await conn.execute(_QUERIES.mark_cancelled, {"id": workflow_id, "actor": actor})
        marked = await cursor.fetchone() is not None
    if not marked:
        status = await _status(conn, workflow_id)
        if status == "cancelled":
            return 0
        raise Conflict(f"workflow {workflow_id} is {status}; only a running workflow is cancelled")
    return await _sweep(conn, [workflow_id], sweeps=SWEEPS_MAX)


async def end_cancelled_steps(conn: Connection, *, limit: int) -> int:
    """The backstop of the worker's maintenance: end the active steps of up to `limit`
    cancelled workflows (one sweep each); returns how many steps it ended."""
    cursor = await conn.execute(_QUERIES.cancelled_with_steps, {"limit": limit})
    ids = [cast(uuid.UUID, r["id"]) for r in await cursor.fetchall()]
    return await _sweep(conn, ids, sweeps=1) if ids else 0


async def _sweep(conn: Connection, workflow_ids: list[uuid.UUID], *, sweeps: int) -> int:
    ended = 0
    for _ in range(sweeps):
        async with conn.transaction():
            cursor = await conn.execute(
                _QUERIES.cancel_steps, {"workflow_ids": workflow_ids, "limit": SWEEP_ROWS}
            )
            row = await cursor.fetchone()
        assert row is not None
        ended += cast(int, row["cancelled"])
        if not row["left_active"]:
            break
        if not row["cancelled"]:
            await asyncio.sleep(SWEEP_PAUSE_S)  # every step left is locked: let them commit
    return ended


async def retry_workflow(conn: Connection, workflow_id: uuid.UUID, *, actor: str) -> int:
    """Re-run the failed, cancelled and skipped steps of an ended workflow and every step
    downstream of them; returns how many steps it revived (0: it was running again after
    an earlier retry). Raises `NotFound`, or `Conflict` for a completed workflow or one
    running that was never retried."""
    async with conn.transaction():
        cursor = await conn.execute(_QUERIES.lock_workflow, {"id": workflow_id})
        locked = await cursor.fetchone()
        if locked is None:
            raise NotFound(f"no workflow {workflow_id}")
        if locked["active"]:
            if locked["retries"]:
                return 0
            raise Conflict(f"workflow {workflow_id} is running; only an ended one is retried")
        cursor = await conn.execute(_QUERIES.retry_steps, {"id": workflow_id, "actor": actor})
        row = await cursor.fetchone()
        revived = 0 if row is None else cast(int, row["revived"])
    if not revived:
        raise Conflict(f"workflow {workflow_id} is completed; nothing failed to retry")
    return revived


async def prune_workflows(conn: Connection, *, retention_s: float, limit: int) -> int:
    """Delete up to `limit` workflows that ended more than `retention_s` ago, with their
    steps' finished rows, steps and edges; returns how many. A workflow's steps go with it
    only: a dependent never waits on a step that retention removed."""
    cutoff = dt.timedelta(seconds=retention_s)
    async with conn.transaction():
        cursor = await conn.execute(_QUERIES.prune_workflows, {"kept": cutoff, "limit": limit})
        row = await cursor.fetchone()
    return 0 if row is None else cast(int, row["pruned"])


async def _status(conn: Connection, workflow_id: uuid.UUID) -> str:
    cursor = await conn.execute(_QUERIES.get_workflow, {"id": workflow_id})
    row = await cursor.fetchone()
    if row is None:
        raise NotFound(f"no workflow {workflow_id}")
    return str(row["status"])
