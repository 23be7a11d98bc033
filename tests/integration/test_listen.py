"""The one LISTEN loop (`jobrelay.db.listen.NotifyListener`) on a real server: it wakes its
owner on each notification and once per (re)connect, reconnects after its backend is
terminated, and logs one line when the connection is lost and one when it is back."""

from __future__ import annotations

import pytest
from psycopg_pool import AsyncConnectionPool
from structlog.testing import capture_logs

from jobrelay.db.listen import NotifyListener
from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.jobs.maintenance import LISTEN_JOBS
from tests.jobs_support import eventually, kill_and_await_reconnect

Pool = AsyncConnectionPool[Connection]
_LISTEN_BATCH_ITEMS = Queries("jobrelay.batches").listen_batch_items


async def _true(value: bool) -> bool:
    return value


async def test_a_killed_listener_reconnects_and_wakes_its_owner_once(pool: Pool) -> None:
    assert isinstance(pool.conninfo, str)
    wakes: list[int] = []
    listener = NotifyListener(
        conninfo=pool.conninfo,
        listen=[_LISTEN_BATCH_ITEMS],
        notified=lambda: wakes.append(1),
        name="test-listener",
    )
    with capture_logs() as logs:
        await listener.start()
        try:
            await eventually(lambda: _true(listener.connected), what="LISTEN")
            assert len(wakes) == 1  # on connect: work may have come before it listened
            async with pool.connection() as conn:
                await conn.execute("SELECT pg_notify('jobrelay_batch_items', 'b1')")
            await eventually(lambda: _true(len(wakes) == 2), what="the notification")
            await kill_and_await_reconnect(pool, listener)
            # The reconnect wakes the owner once, with no notification sent.
            assert len(wakes) == 3
            async with pool.connection() as conn:
                await conn.execute("SELECT pg_notify('jobrelay_batch_items', 'b2')")
            await eventually(lambda: _true(len(wakes) == 4), what="a notification after it")
            # Another channel's notifications are not this listener's.
            async with pool.connection() as conn:
                await conn.execute("SELECT pg_notify('jobrelay_jobs', '')")
                await conn.execute("SELECT pg_notify('jobrelay_batch_items', 'b3')")
            await eventually(lambda: _true(len(wakes) == 5), what="the last notification")
        finally:
            await listener.stop()
    assert len(wakes) == 5 and listener.signals.acted == 3
    changes = [
        e["event"] for e in logs if e.get("loop") == "test-listener" and e["log_level"] != "debug"
    ]
    assert changes == ["loop.failing", "loop.recovered"]
    assert (listener.signals.errors, listener.signals.recoveries) == (1, 1)
    assert not listener.connected


async def test_one_listener_can_listen_on_several_channels(pool: Pool) -> None:
    assert isinstance(pool.conninfo, str)
    wakes: list[int] = []
    listener = NotifyListener(
        conninfo=pool.conninfo,
        listen=[LISTEN_JOBS, _LISTEN_BATCH_ITEMS],
        notified=lambda: wakes.append(1),
    )
    await listener.start()
    try:
        await eventually(lambda: _true(listener.connected), what="LISTEN")
        async with pool.connection() as conn:
            await conn.execute("SELECT pg_notify('jobrelay_jobs', '')")
            await conn.execute("SELECT pg_notify('jobrelay_batch_items', '')")
        await eventually(lambda: _true(listener.signals.acted == 2), what="both notifications")
    finally:
        await listener.stop()
    assert len(wakes) == 3


@pytest.mark.parametrize("listen", [[], "LISTEN jobrelay_jobs"])
def test_the_listen_statements_are_a_non_empty_list(listen: list[str] | str) -> None:
    with pytest.raises(ValueError, match="listen must be a non-empty list of LISTEN statements"):
        NotifyListener(conninfo="", listen=listen, notified=lambda: None)  # type: ignore[arg-type]
