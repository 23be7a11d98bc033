"""Deadlines on every network wait of a database connection (docs/deploy.md, network
partitions and failovers).

A partition is a peer that stops answering without closing anything: packets are dropped,
no RST, no FIN. Left to the kernel's defaults a connection then waits for a reply for about
15 minutes (`tcp_retries2=15`) and a connect for 130 s. Two layers bound those waits:

* `NetworkTimeouts.conninfo()` adds libpq's TCP keepalives, `tcp_user_timeout` and
  `connect_timeout` to a connection string, so the kernel itself declares a silent peer dead:
  unacknowledged data for `tcp_user_timeout_s`, or an idle connection whose keepalive probes go
  unanswered, ends the connection with an error (psycopg marks it broken and a pool throws it
  away). The composition root applies it to the one DSN every pool, listener and command uses.
* `deadline(conn, seconds)` bounds one call on one connection from the client side, for what
  the kernel cannot see (a server or pooler that acknowledges packets but never answers). It
  does not cancel the awaiting task: asyncio's cancellation makes psycopg send a cancel
  request over a new connection, which the partition drops too (measured: 11 s for a 1 s
  timeout). It shuts the socket down instead; the pending read ends at once with
  `psycopg.OperationalError`, the connection is broken, and no pool lends it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import psycopg
from psycopg.conninfo import make_conninfo


@dataclass(frozen=True, slots=True)
class NetworkTimeouts:
    """How long a database connection may wait on a silent network. Invalid values raise
    `ValueError` naming them.

    `connect_timeout_s`: one connection attempt (libpq rounds up to whole seconds, at least 2).
    `keepalives_idle_s`: idle time before the first keepalive probe (whole seconds).
    `keepalives_interval_s`: between unanswered probes (whole seconds).
    `keepalives_count`: unanswered probes that end the connection.
    `tcp_user_timeout_s`: sent data left unacknowledged this long ends the connection (also
    caps the keepalive probing).
    """

    connect_timeout_s: float = 2.0
    keepalives_idle_s: float = 1.0
    keepalives_interval_s: float = 1.0
    keepalives_count: int = 3
    tcp_user_timeout_s: float = 2.0

    def __post_init__(self) -> None:
        for name in (
            "connect_timeout_s",
            "keepalives_idle_s",
            "keepalives_interval_s",
            "tcp_user_timeout_s",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a number > 0, got {value!r}")
        if not (isinstance(self.keepalives_count, int) and self.keepalives_count >= 1):
            raise ValueError(
                f"keepalives_count must be an integer >= 1, got {self.keepalives_count!r}"
            )

    def libpq_params(self) -> dict[str, int]:
        """The libpq connection parameters (ignored by libpq on Unix sockets)."""
        return {
            "connect_timeout": max(2, math.ceil(self.connect_timeout_s)),
            "keepalives": 1,
            "keepalives_idle": max(1, math.ceil(self.keepalives_idle_s)),
            "keepalives_interval": max(1, math.ceil(self.keepalives_interval_s)),
            "keepalives_count": self.keepalives_count,
            "tcp_user_timeout": max(1, round(self.tcp_user_timeout_s * 1000)),
        }

    def conninfo(self, dsn: str) -> str:
        """`dsn` with these parameters; parameters the DSN sets itself win."""
        explicit = set(psycopg.conninfo.conninfo_to_dict(dsn))
        extra = {k: v for k, v in self.libpq_params().items() if k not in explicit}
        return make_conninfo(dsn, **extra)


class DeadlineExceeded(psycopg.OperationalError):
    """A database call outlived its client-side deadline; its connection was discarded."""


def sever(conn: psycopg.AsyncConnection[object]) -> None:
    """Shut the connection's socket down, so whatever waits on it fails at once and the
    connection is broken (never lent again). Safe on a closed connection."""
    if conn.closed:
        return
    try:
        fd = conn.pgconn.socket
    except psycopg.Error:
        return
    with contextlib.suppress(OSError):
        duplicate = socket.socket(fileno=os.dup(fd))
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        finally:
            duplicate.close()


@contextlib.asynccontextmanager
async def deadline(
    conn: psycopg.AsyncConnection[object], seconds: float | None, *, what: str = "a database call"
) -> AsyncIterator[None]:
    """Run the block on `conn` for at most `seconds` (None: no client-side deadline); past it
    the connection is severed and the block's error becomes `DeadlineExceeded`."""
    if seconds is None:
        yield
        return
    fired = False

    def expire() -> None:
        nonlocal fired
        fired = True
        sever(conn)

    timer = asyncio.get_running_loop().call_later(seconds, expire)
    try:
        yield
    except psycopg.OperationalError as exc:
        if fired:
            raise DeadlineExceeded(f"{what} got no answer within {seconds:g} s") from exc
        raise
    finally:
        # A block that finished as the deadline passed keeps its result (a commit may have
        # landed); its connection is broken all the same and the pool discards it.
        timer.cancel()
