"""Every network wait of a database connection has a deadline (issue 24): a black-holed
connection fails within its tcp_user_timeout / keepalives, a client-side deadline severs
its connection at once instead of waiting for psycopg's cancel, and nothing is pooled
broken."""

from __future__ import annotations

import time

import psycopg
import pytest

from jobrelay.db.network import DeadlineExceeded, NetworkTimeouts, deadline
from tests.partition import Blackhole, TcpRelay


def test_bad_timeouts_name_the_field() -> None:
    with pytest.raises(ValueError, match="tcp_user_timeout_s must be a number > 0, got 0"):
        NetworkTimeouts(tcp_user_timeout_s=0)
    with pytest.raises(ValueError, match="keepalives_count must be an integer >= 1"):
        NetworkTimeouts(keepalives_count=0)
    with pytest.raises(ValueError, match="connect_timeout_s must be a number > 0, got nan"):
        NetworkTimeouts(connect_timeout_s=float("nan"))


def test_conninfo_keeps_what_the_dsn_sets() -> None:
    conninfo = NetworkTimeouts(tcp_user_timeout_s=1.5).conninfo(
        "postgresql://u@db:5432/app?keepalives_idle=30"
    )
    params = psycopg.conninfo.conninfo_to_dict(conninfo)
    assert params["keepalives_idle"] == "30"
    assert params["tcp_user_timeout"] == "1500"
    assert params["keepalives"] == "1"
    assert params["connect_timeout"] == "2"


async def test_a_silent_connection_fails_within_its_user_timeout(
    relayed: tuple[TcpRelay, str],
) -> None:
    relay, dsn = relayed
    timeouts = NetworkTimeouts(keepalives_idle_s=1, keepalives_interval_s=1, tcp_user_timeout_s=1)
    conn = await psycopg.AsyncConnection.connect(timeouts.conninfo(dsn), autocommit=True)
    async with conn:
        await conn.execute("SELECT 1")
        with Blackhole(relay.port).cut_for():
            started = time.monotonic()
            with pytest.raises(psycopg.OperationalError):
                await conn.execute("SELECT 1")
            took = time.monotonic() - started
        assert conn.broken
    # Kernel-detected: well inside the 15 minutes of tcp_retries2 and the 11 s of a cancel.
    assert took < 8, took


async def test_a_deadline_severs_its_connection(relayed: tuple[TcpRelay, str]) -> None:
    relay, dsn = relayed
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    async with conn:
        with Blackhole(relay.port).cut_for():
            started = time.monotonic()
            with pytest.raises(DeadlineExceeded, match=r"no answer within 0\.5 s"):
                async with deadline(conn, 0.5, what="the probe"):
                    await conn.execute("SELECT 1")
            took = time.monotonic() - started
        assert conn.broken
    assert took < 4, took  # psycopg's own cancel path took 11 s here


async def test_a_deadline_that_does_not_fire_changes_nothing(db_dsn: str) -> None:
    conn = await psycopg.AsyncConnection.connect(db_dsn, autocommit=True)
    async with conn:
        async with deadline(conn, 5.0):
            cursor = await conn.execute("SELECT 41 + 1")
            assert await cursor.fetchone() == (42,)
        await conn.execute("SELECT 1")  # still usable
        assert not conn.broken
