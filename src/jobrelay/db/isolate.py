"""Batched writes that survive a bad row: find the rows a statement refuses, write the rest.

A batched write (the worker's completions, the relay's outcomes) is one statement over many
rows, and PostgreSQL refuses the whole statement for one row it cannot store: a NUL
character in a text or jsonb value, a number out of range, a value over a limit.
`write_isolating` retries such a batch in halves (one row at a time below `single_below`
rows) until each refused row stands alone; every other row is written in the same round.
`write_in_savepoints` does the same inside one open transaction, one savepoint per part,
and also halves a part that timed out on a lock, deferring the locked rows.
Errors that say nothing about the data (a lost connection, a serialization failure, a
deadlock, a lock timeout) are raised unchanged: the caller retries the whole batch as
before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import psycopg
from psycopg import errors as pg_errors

from jobrelay.db.pool import Connection

T = TypeVar("T")
R = TypeVar("R")

# SQLSTATE classes that blame the values of the statement: 22 data exception (NUL in text,
# invalid JSON, out of range), 23 integrity constraint violation, 54 program limit exceeded
# (a jsonb or row too large).
_DATA_CLASSES = frozenset({"22", "23", "54"})


def is_data_error(exc: BaseException) -> bool:
    """True when `exc` is PostgreSQL refusing a statement for the values it was given."""
    if isinstance(exc, psycopg.DataError):  # also psycopg's own refusal of a NUL in text
        return True
    if not isinstance(exc, psycopg.Error):
        return False
    sqlstate = exc.sqlstate or ""
    return sqlstate[:2] in _DATA_CLASSES


@dataclass(slots=True)
class Isolated(Generic[T, R]):
    """What `write_isolating` did: each written part with what `write` returned for it,
    and each refused item with the error that refused it."""

    written: list[tuple[list[T], R]] = field(default_factory=list)
    refused: list[tuple[T, psycopg.Error]] = field(default_factory=list)


async def write_isolating(
    items: Sequence[T],
    write: Callable[[list[T]], Awaitable[R]],
    *,
    single_below: int = 8,
) -> Isolated[T, R]:
    """Write `items` with `write` (one call, its own transaction); when PostgreSQL refuses
    it for its data, split it and write the parts, until the refused items stand alone.

    Costs one extra call per halving only when a batch holds a bad row. `write` must be
    atomic per call (a refused call wrote nothing).
    """
    done: Isolated[T, R] = Isolated()
    await _write_part(list(items), write, max(1, single_below), done)
    return done


async def _write_part(
    items: list[T],
    write: Callable[[list[T]], Awaitable[R]],
    single_below: int,
    done: Isolated[T, R],
) -> None:
    if not items:
        return
    try:
        result = await write(items)
    except psycopg.Error as exc:
        if not is_data_error(exc):
            raise
        if len(items) == 1:
            done.refused.append((items[0], exc))
            return
        if len(items) <= single_below:
            parts = [[item] for item in items]
        else:
            middle = len(items) // 2
            parts = [items[:middle], items[middle:]]
        for part in parts:
            await _write_part(part, write, single_below, done)
        return
    done.written.append((items, result))


async def write_in_savepoints(
    conn: Connection,
    rows: Sequence[T],
    write: Callable[[Sequence[T]], Awaitable[Sequence[T]]],
    *,
    bad: Callable[[T, psycopg.Error], Awaitable[Sequence[T]]] | None = None,
) -> list[T]:
    """Run `write` over `rows` in the caller's transaction so that one locked or bad row
    does not hold back the others; returns the rows deferred by locks.

    `write` writes one part and returns the rows of it that it skipped because another
    transaction holds them (SKIP LOCKED). Each part is written in a savepoint. A part that
    fails because a lock was held past the transaction's `lock_timeout` (LockNotAvailable,
    55P03: transient, never a failure of the rows) is halved until the locked rows are
    alone, and those are deferred. A part PostgreSQL refuses for its data (`is_data_error`)
    is halved the same way when `bad` is given, and each bad row goes to `bad` (in a
    savepoint of its own, to record why it cannot be written as it is); without `bad` the
    error propagates."""
    deferred: list[T] = []

    async def attempt(part: Sequence[T]) -> None:
        try:
            async with conn.transaction():
                skipped = await write(part)
        except pg_errors.LockNotAvailable:
            if len(part) == 1:
                deferred.extend(part)
                return
            await halve(part)
            return
        except psycopg.Error as exc:
            if bad is None or not is_data_error(exc):
                raise
            if len(part) > 1:
                await halve(part)
                return
            try:
                async with conn.transaction():
                    skipped = await bad(part[0], exc)
            except pg_errors.LockNotAvailable:
                skipped = part
        deferred.extend(skipped)

    async def halve(part: Sequence[T]) -> None:
        middle = len(part) // 2
        await attempt(part[:middle])
        await attempt(part[middle:])

    if rows:
        await attempt(rows)
    return deferred
