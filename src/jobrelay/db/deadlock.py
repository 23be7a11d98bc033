"""Running a whole transaction again when PostgreSQL broke a deadlock with it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from psycopg import errors as pg_errors

from jobrelay.loops import Backoff, retry

T = TypeVar("T")

# Jitter, so the two transactions a deadlock broke do not meet again in lockstep.
_DEADLOCK_BACKOFF = Backoff(base_s=0.01, cap_s=0.05, jitter=0.5)


async def retry_on_deadlock(work: Callable[[], Awaitable[T]], *, attempts: int = 5) -> T:
    """Run `work` (one whole transaction) again when PostgreSQL broke a deadlock with it.

    Writers that lock the same rows in different orders (a batch cancel, the relay's
    terminal failures and webhooks lock items and children) meet in a rare cycle; the server
    detects it and aborts one side, which simply runs again. `work` must open its own
    transaction, so a retry starts from nothing.
    """
    return await retry(
        work,
        what="a transaction aborted by a deadlock",
        retry_on=_deadlock,
        backoff=_DEADLOCK_BACKOFF,
        attempts=attempts,
        level=logging.DEBUG,  # expected now and then; the server logs each deadlock already
    )


def _deadlock(exc: BaseException) -> bool:
    return isinstance(exc, pg_errors.DeadlockDetected)
