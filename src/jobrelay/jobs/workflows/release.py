"""Releasing workflow steps: in the transaction that ends their last dependency.

A held step is pending at 9999-12-31, outside every claim's range, with a counter of the
dependencies not ended yet (`workflow_steps.dependencies_left`). The transaction that ends
a step (`jobs.claims.settle_many`, for completions and failures alike):

1. locks the steps waiting on it (`lock_dependents`, id order, SKIP LOCKED: a step whose
   dependent another transaction holds is deferred, its end tried again, as a child whose
   parent is locked);
2. ends it (the completion or failure statement);
3. counts its end into each dependent (`release_dependents`): a dependent whose last
   dependency that was is released (available now, workers woken) when its dependencies
   ended well or its policy is `run`; otherwise it ends without running (`cancel`, or
   `skip`), and its own dependents are counted in turn, in the same transaction.

Two dependencies ending at once in different processes: the second transaction waits for
the first's lock on the dependent (step 1 of the second skips it and defers, or finds it
free after the first committed), and each decrement reads the row the other wrote, so the
counter reaches zero in exactly one transaction. Plain jobs (no workflow) skip all of this.

`StepReconciler` in the worker's maintenance releases held steps whose dependencies all
ended by a path that does not count endings (a lease rescue, a cancel, an old release).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from pydantic import BaseModel

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries

_QUERIES = Queries("jobrelay.jobs.workflows")
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class DependencyResult:
    """What a step's handler sees of one dependency: its end and its result."""

    status: str  # completed, failed, cancelled, skipped
    result: Mapping[str, Any] | None
    error: str | None

    def result_as(self, model: type[M]) -> M:
        """The result validated as `model`, the Pydantic model the dependency's handler
        returns (`Complete(result=model.model_dump())`); a result that does not fit raises
        `pydantic.ValidationError` (a permanent failure of the step that reads it)."""
        return model.model_validate(self.result or {})


async def lock_dependents(conn: Connection, ending: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Lock the dependents of the `ending` steps; returns those of `ending` that have a
    dependent another transaction holds (their end must wait). Needs a transaction."""
    if not ending:
        return set()
    cursor = await conn.execute(_QUERIES.lock_dependents, {"ids": sorted(set(ending))})
    return {cast(uuid.UUID, r["id"]) for r in await cursor.fetchall()}


async def release_dependents(conn: Connection, ended: Mapping[uuid.UUID, bool]) -> int:
    """Count the ends of steps (`ended`: id -> ended well, i.e. completed or skipped) into
    their dependents, release those now ready and end those that will not run, down the
    graph. Returns the steps released. Call after `lock_dependents` in the same
    transaction."""
    released = 0
    while ended:
        cursor = await conn.execute(
            _QUERIES.count_endings, {"ids": list(ended), "ok": list(ended.values())}
        )
        ready = [cast(uuid.UUID, r["id"]) for r in await cursor.fetchall() if r["ready"]]
        count, doomed = await _release_ready(conn, ready)
        released += count
        ended = await _end_unrun(conn, doomed)
    return released


async def _release_ready(
    conn: Connection, ready: Sequence[uuid.UUID]
) -> tuple[int, dict[uuid.UUID, bool]]:
    """Release the `ready` steps that may run; returns how many, and the others (id ->
    skip, by their policy), which end without running."""
    if not ready:
        return 0, {}
    cursor = await conn.execute(_QUERIES.release_ready, {"ids": sorted(ready)})
    rows = await cursor.fetchall()
    doomed = {
        cast(uuid.UUID, r["id"]): r["policy"] == "skip"
        for r in rows
        if not r["released"] and r["policy"] != "run"
    }
    return sum(1 for r in rows if r["released"]), doomed


async def _end_unrun(conn: Connection, doomed: Mapping[uuid.UUID, bool]) -> dict[uuid.UUID, bool]:
    """End steps that will not run (cancelled, or skipped); returns them as ended (id ->
    ended well: skipped counts as well for their own dependents)."""
    if not doomed:
        return {}
    cursor = await conn.execute(
        _QUERIES.end_unrun_steps, {"ids": list(doomed), "skip": list(doomed.values())}
    )
    return {cast(uuid.UUID, r["id"]): bool(r["skip"]) for r in await cursor.fetchall()}


@dataclass(slots=True)
class RepairCursor:
    """Where the repair of held steps goes on from (a pass examines a bounded slice)."""

    after: uuid.UUID | None = None


async def reconcile_stuck(
    conn: Connection, *, limit: int, cursor: RepairCursor | None = None
) -> int:
    """The periodic repair: release (or end) held steps none of whose dependencies is
    active, examining at most `limit` steps after `cursor` (which it moves on, and back to
    the start after the last step); returns how many steps it found. Opens its own
    transaction."""
    cursor = cursor if cursor is not None else RepairCursor()
    async with conn.transaction():
        rows = await conn.execute(_QUERIES.stuck_steps, {"scan": limit, "after": cursor.after})
        row = await rows.fetchone()
        assert row is not None
        stuck = cast(list[uuid.UUID], row["stuck"])
        _, doomed = await _release_ready(conn, stuck)
        await release_dependents(conn, await _end_unrun(conn, doomed))
    done = cast(int, row["examined"]) < limit
    cursor.after = None if done else cast(uuid.UUID, row["last_examined"])
    return len(stuck)


async def dependency_results(conn: Connection, job_id: uuid.UUID) -> dict[str, DependencyResult]:
    """The dependencies of step `job_id` by step name, with their ends and results."""
    cursor = await conn.execute(_QUERIES.dependency_results, {"id": job_id})
    return {
        str(r["name"]): DependencyResult(
            str(r["status"]),
            cast(Mapping[str, Any] | None, r["result"]),
            cast(str | None, r["last_error"]),
        )
        for r in await cursor.fetchall()
    }
