"""The async connection pool and the transaction helper every part uses."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib.metadata import version
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, pool_async
from psycopg_pool.base import AttemptWithBackoff

from jobrelay.db.errors import DatabaseUnavailable, PoolerMismatch, describe_dsn
from jobrelay.db.network import deadline
from jobrelay.db.sql import Queries

Connection = psycopg.AsyncConnection[dict[str, object]]

_SQL = Queries("jobrelay.db")

# psycopg_pool retries a lost connection in the background with a delay that doubles from
# 1 s (1, 2, 4, 8, ... s) while `reconnect_timeout` lasts: after an outage of half a minute
# the next attempt could come 16 s after the database is back, and borrowers wait for it
# (a worker measured 28 s to its first claim). jobrelay caps that delay: a lost connection is
# retried at most every `RECONNECT_CAP_S`, so work resumes within about half a second of the
# database accepting connections. The pool has no option for it; `_install_capped_reconnect`
# replaces the attempt class it uses and checks first that it still works that way.
RECONNECT_FIRST_S = 0.1
RECONNECT_CAP_S = 0.5


class PoolPatchError(RuntimeError):
    """psycopg_pool no longer retries the way the capped reconnect expects."""


class _CappedAttempt(AttemptWithBackoff):
    INITIAL_DELAY = RECONNECT_FIRST_S

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, RECONNECT_CAP_S)


def _install_capped_reconnect() -> None:
    """Make every async pool retry lost connections with `_CappedAttempt` (idempotent)."""
    current = getattr(pool_async, "AttemptWithBackoff", None)
    if current is _CappedAttempt:
        return
    if current is not AttemptWithBackoff or not hasattr(AttemptWithBackoff, "update_delay"):
        raise PoolPatchError(
            f"psycopg_pool {version('psycopg-pool')} no longer builds its reconnection "
            "attempts from psycopg_pool.base.AttemptWithBackoff; the capped reconnect cannot "
            "be installed (install the version requirements.lock pins)"
        )
    setattr(pool_async, "AttemptWithBackoff", _CappedAttempt)  # noqa: B010


class BoundedPool(AsyncConnectionPool[Connection]):
    """A pool whose every borrow lasts at most `call_deadline_s` (None: no limit).

    Past the deadline the borrowed connection is severed (`jobrelay.db.network.deadline`):
    the call fails with `DeadlineExceeded` at once and the pool discards the connection,
    instead of the borrower waiting on a server that acknowledges packets but never answers.
    The kernel's keepalives and TCP user timeout (set on the DSN) already end a connection
    whose network went silent within seconds; this is the bound on everything else.
    """

    def __init__(self, *args: Any, call_deadline_s: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.call_deadline_s = call_deadline_s

    @asynccontextmanager
    async def connection(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 (the signature it overrides)
    ) -> AsyncIterator[Connection]:
        async with super().connection(timeout) as conn:
            what = f"a call on a connection of {self.name}"
            async with deadline(conn, self.call_deadline_s, what=what):
                yield conn


def companion_pool(
    pool: AsyncConnectionPool[Connection],
    *,
    name: str,
    max_size: int,
    configure: Callable[[Connection], Awaitable[None]] | None = None,
) -> BoundedPool:
    """A pool of its own (not opened) to the database of `pool`, with the same connection
    options and call deadline: for work that must not queue behind that pool's borrowers."""
    return BoundedPool(
        pool.conninfo,
        connection_class=pool.connection_class,
        kwargs=pool.kwargs,
        min_size=min(1, max_size),
        max_size=max_size,
        timeout=pool.timeout,
        configure=configure,
        open=False,
        name=name,
        call_deadline_s=getattr(pool, "call_deadline_s", None),
    )


async def open_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    timeout_s: float = 5.0,
    wait_s: float | None = None,
    transaction_pooler: bool = False,
    idle_in_transaction_timeout_s: float = 0.0,
    call_deadline_s: float | None = None,
) -> BoundedPool:
    """Open a pool of dict-row connections; fail fast with `DatabaseUnavailable`.

    `wait_s` is how long a borrower waits for a connection before `PoolTimeout` (default:
    six connect timeouts); the API sets it short so an outage answers 503 instead of hanging.
    Lost connections are retried at most every `RECONNECT_CAP_S`.
    `transaction_pooler`: `dsn` goes through a transaction pooler (PgBouncer
    pool_mode=transaction), where consecutive transactions of one client may run on
    different server connections: psycopg must not prepare statements there.
    `idle_in_transaction_timeout_s` (> 0, direct connections only): the server ends a session
    left idle inside a transaction that long, so a frozen process (SIGSTOP, a debugger, a
    stalled VM) does not hold its row locks, and the xmin horizon, until it wakes. Through a
    transaction pooler a session setting would leak to other clients: set it on the role.
    `call_deadline_s`: the longest one borrow may last (`BoundedPool`); None: no limit.
    """
    _install_capped_reconnect()
    await check_connection(dsn, timeout_s=timeout_s)
    kwargs: dict[str, object] = {"row_factory": dict_row, "autocommit": True}
    if transaction_pooler:
        kwargs["prepare_threshold"] = None
    configure = None
    if idle_in_transaction_timeout_s > 0 and not transaction_pooler:
        timeout_ms = max(1, round(idle_in_transaction_timeout_s * 1000))

        async def configure(conn: Connection) -> None:
            await conn.execute(
                sql.SQL("SET idle_in_transaction_session_timeout = {}").format(
                    sql.Literal(timeout_ms)
                )
            )

    pool = BoundedPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        kwargs=kwargs,
        configure=configure,
        timeout=timeout_s * 6 if wait_s is None else wait_s,
        open=False,
        name="jobrelay",
        call_deadline_s=call_deadline_s,
    )
    await pool.open(wait=min_size > 0, timeout=timeout_s * 2)
    return pool


async def check_connection(dsn: str, *, timeout_s: float = 5.0) -> None:
    """Connect once and run `SELECT 1`; translate any failure into `DatabaseUnavailable`."""
    try:
        conn = await psycopg.AsyncConnection.connect(
            dsn, connect_timeout=max(1, int(timeout_s)), prepare_threshold=None
        )
    except psycopg.Error as exc:
        raise DatabaseUnavailable(
            f"cannot connect to PostgreSQL at {describe_dsn(dsn)}: {_first_line(exc)}. "
            "Check DATABASE_URL (unset it to use the embedded server)."
        ) from exc
    async with conn:
        await conn.execute("SELECT 1")


async def check_transaction_pooler(dsn: str, *, timeout_s: float = 5.0, rounds: int = 5) -> None:
    """Raise `PoolerMismatch` unless `dsn` goes through a transaction pooler.

    Two client connections run `SELECT pg_backend_pid()` in turn, each in its own
    transaction. Behind transaction pooling the second one gets the server connection the
    first just released (PgBouncer reuses the most recent idle one), so both report the same
    backend: proof. A session pooler (or no pooler) gives each client its own backend for its
    whole life, so the pids never match. Other clients of a busy pooler can take the
    released server connection first, so the check repeats `rounds` times and one match is
    enough. It cannot tell a session pooler from a direct connection: both are refused.
    """
    timeout = max(1, int(timeout_s))
    try:
        first = await psycopg.AsyncConnection.connect(
            dsn, connect_timeout=timeout, autocommit=True, prepare_threshold=None
        )
        second = await psycopg.AsyncConnection.connect(
            dsn, connect_timeout=timeout, autocommit=True, prepare_threshold=None
        )
    except psycopg.Error as exc:
        raise DatabaseUnavailable(
            f"cannot connect to PostgreSQL at {describe_dsn(dsn)}: {_first_line(exc)}. "
            "Check DATABASE_URL."
        ) from exc
    async with first, second:
        for _ in range(rounds):
            pids: set[object] = set()
            for conn in (first, second):
                cursor = await conn.execute("SELECT pg_backend_pid()")
                row = await cursor.fetchone()
                pids.add(row[0] if row else None)
            if len(pids) == 1:
                return
    raise PoolerMismatch(
        f"JOBRELAY_DATABASE_POOLER=transaction, but each client of {describe_dsn(dsn)} keeps "
        "its own server session (a PgBouncer with pool_mode=session, or no pooler): set "
        "pool_mode=transaction on the pooler, or JOBRELAY_DATABASE_POOLER=none"
    )


@asynccontextmanager
async def transaction(
    pool: AsyncConnectionPool[Connection], *, lock_timeout_s: float | None = None
) -> AsyncIterator[Connection]:
    """Borrow a connection and run the block in one transaction (commit, or roll back).

    `lock_timeout_s`: no statement of the block waits longer than that for another
    transaction's lock (`bound_lock_waits`); it fails with `psycopg.errors.LockNotAvailable`.
    """
    async with pool.connection() as conn, conn.transaction():
        if lock_timeout_s is not None:
            await bound_lock_waits(conn, lock_timeout_s)
        yield conn


async def bound_lock_waits(conn: Connection, timeout_s: float) -> None:
    """Make every later statement of the current transaction wait at most `timeout_s` for a
    lock (then `psycopg.errors.LockNotAvailable`, SQLSTATE 55P03). Transaction-local, so it
    never leaks to the next borrower, nor through a transaction pooler to another client."""
    if not timeout_s > 0:
        raise ValueError(f"a lock timeout must be positive, got {timeout_s}")
    await conn.execute(_SQL.lock_timeout, {"timeout": f"{max(1, round(timeout_s * 1000))}ms"})


@asynccontextmanager
async def transaction_on(
    pool: AsyncConnectionPool[Connection], conn: Connection | None
) -> AsyncIterator[Connection]:
    """The block in a transaction of the caller's `conn` (a savepoint inside the caller's
    own), or of a connection borrowed from `pool` when `conn` is None."""
    if conn is None:
        async with transaction(pool) as own:
            yield own
        return
    async with conn.transaction():
        yield conn


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
