"""One locked or bad row never stalls the relay (issue 40), against real PostgreSQL and the
SQS emulator, with a second independent connection holding the locks: the other items of
the pass are claimed and recorded at once, the locked one once after the lock goes, without
an extra attempt; a final failure whose child is locked, or whose reason PostgreSQL cannot
store, does not hold back the rest of its batch."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from jobrelay.aws.clients import AwsEndpoint
from jobrelay.aws.sender import MessageSender, OutgoingMessage, SendResult
from jobrelay.aws.sqs_sender import SqsSender
from jobrelay.batches import outbox
from jobrelay.batches.relay import Relay
from jobrelay.batches.relay_config import RelayConfig
from jobrelay.db.isolate import write_in_savepoints
from jobrelay.db.pool import Connection, transaction
from tests.batch_support import create_batch, drain, page_items
from tests.harness import ApiHarness, AwsTestResources
from tests.jobs_support import eventually

FAST = RelayConfig(
    lease_s=30, claim_size=50, retry_delay_s=0, poll_interval_s=0.05, lock_timeout_s=0.2
)


async def _items(dsn: str, batch_id: str) -> list[dict[str, Any]]:
    async with await psycopg.AsyncConnection.connect(dsn, row_factory=dict_row) as conn:
        cur = await conn.execute(
            "SELECT bi.id, bi.job_id, bi.dispatched_at, bi.dispatch_attempts, bi.error_message, "
            "p.status, p.error_message AS child_error "
            "FROM batch_item bi JOIN page_import p ON p.id = bi.job_id "
            "WHERE bi.batch_id = %s ORDER BY position",
            (batch_id,),
        )
        return await cur.fetchall()


class Holder:
    """Another session holding the row locks of one statement until `release`."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn

    @classmethod
    async def take(cls, dsn: str, query: str, *params: object) -> Holder:
        conn = await psycopg.AsyncConnection.connect(dsn)
        await conn.execute("BEGIN")
        await conn.execute(query, params)
        return cls(conn)

    async def release(self) -> None:
        if not self.conn.closed:
            await self.conn.execute("ROLLBACK")
            await self.conn.close()


@contextlib.asynccontextmanager
async def holding(dsn: str, query: str, *params: object) -> AsyncIterator[Holder]:
    """`Holder` for the block."""
    holder = await Holder.take(dsn, query, *params)
    try:
        yield holder
    finally:
        await holder.release()


async def _dispatched(dsn: str, batch_id: str) -> set[str]:
    return {r["id"] for r in await _items(dsn, batch_id) if r["dispatched_at"] is not None}


async def _running(relay: Relay) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    return stop, asyncio.create_task(relay.run(stop))


async def test_an_item_locked_before_its_claim_is_skipped_then_sent_once_with_one_attempt(
    api: ApiHarness,
    db_dsn: str,
    pool: AsyncConnectionPool[Connection],
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(20))
    rows = await _items(db_dsn, batch["id"])
    locked = rows[7]
    others = {r["id"] for r in rows} - {locked["id"]}
    queue = aws_resources.queues.work
    holder = await Holder.take(
        db_dsn, "SELECT 1 FROM batch_item WHERE id = %s FOR UPDATE", locked["id"]
    )
    async with SqsSender(aws, queue_url=queue) as sqs:
        relay = Relay(pool=pool, sender=sqs, config=FAST, listen_conninfo="")
        stop, task = await _running(relay)
        try:
            started = time.monotonic()

            async def others_sent() -> bool:
                return await _dispatched(db_dsn, batch["id"]) >= others

            await eventually(others_sent, timeout_s=2.0, what="the 19 other items sent")
            assert time.monotonic() - started < 2.0
            row = next(r for r in await _items(db_dsn, batch["id"]) if r["id"] == locked["id"])
            assert (row["dispatched_at"], row["dispatch_attempts"]) == (None, 0)
            await holder.release()

            async def all_sent() -> bool:
                return len(await _dispatched(db_dsn, batch["id"])) == 20

            await eventually(all_sent, timeout_s=5.0, what="the locked item sent after release")
        finally:
            await holder.release()
            stop.set()
            await task
    rows = await _items(db_dsn, batch["id"])
    assert [r["dispatch_attempts"] for r in rows] == [1] * 20
    messages = await drain(aws, queue, expect=20)
    assert (
        sorted(m["MessageAttributes"]["dispatch_attempt"]["StringValue"] for m in messages)
        == ["1"] * 20
    )
    assert len(messages) == 20, "each item sent once"


class LockingSender:
    """Sends through `inner`; before answering the chunk holding `target`, another session
    locks `target`'s row with `lock` (so the record of the pass meets the lock)."""

    def __init__(self, inner: MessageSender, dsn: str, query: str, target: str) -> None:
        self.inner = inner
        self.dsn = dsn
        self.query = query
        self.target = target
        self.locker: psycopg.AsyncConnection[Any] | None = None
        self.sent: list[str] = []

    async def send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult:
        result = await self.inner.send_batch(messages)
        self.sent.extend(m.item_id for m in messages)
        if self.locker is None and any(m.item_id == self.target for m in messages):
            self.locker = await psycopg.AsyncConnection.connect(self.dsn)
            await self.locker.execute("BEGIN")
            await self.locker.execute(self.query, (self.target,))
        return result

    async def release(self) -> None:
        assert self.locker is not None, "the lock was taken"
        await self.locker.execute("ROLLBACK")
        await self.locker.close()


ITEM_LOCKS = {
    "item FOR UPDATE": ("SELECT 1 FROM batch_item WHERE id = %s FOR UPDATE", True),
    "item FOR NO KEY UPDATE": ("SELECT 1 FROM batch_item WHERE id = %s FOR NO KEY UPDATE", True),
    "item FOR SHARE": ("SELECT 1 FROM batch_item WHERE id = %s FOR SHARE", True),
    # KEY SHARE (a foreign key check, a report) does not conflict with recording a send.
    "item FOR KEY SHARE": ("SELECT 1 FROM batch_item WHERE id = %s FOR KEY SHARE", False),
    # The count delta a recorded send appends checks its batch with KEY SHARE.
    "batch FOR UPDATE": (
        "SELECT 1 FROM batch WHERE id = (SELECT batch_id FROM batch_item WHERE id = %s) FOR UPDATE",
        True,
    ),
}


@pytest.mark.parametrize("lock", list(ITEM_LOCKS))
async def test_a_record_whose_row_is_locked_after_the_send_waits_for_the_next_round(
    api: ApiHarness,
    db_dsn: str,
    pool: AsyncConnectionPool[Connection],
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
    lock: str,
) -> None:
    query, conflicts = ITEM_LOCKS[lock]
    scope = await api.tenant("alice")
    held = await create_batch(api, scope, page_items(10))
    free = await create_batch(api, scope, page_items(10, start=10))
    target = (await _items(db_dsn, held["id"]))[3]
    batch_lock = lock.startswith("batch")
    queue = aws_resources.queues.work
    async with SqsSender(aws, queue_url=queue) as sqs:
        sender = LockingSender(sqs, db_dsn, query, target["id"])
        relay = Relay(pool=pool, sender=sender, config=FAST, listen_conninfo="")
        stop, task = await _running(relay)
        try:
            started = time.monotonic()

            async def recorded_beside_the_lock() -> bool:
                done = await _dispatched(db_dsn, held["id"]) | await _dispatched(db_dsn, free["id"])
                expected = 20 if not conflicts else 10 if batch_lock else 19
                return sender.locker is not None and len(done) >= expected

            await eventually(recorded_beside_the_lock, timeout_s=2.0, what="the rest recorded")
            assert time.monotonic() - started < 2.0
            dispatched = await _dispatched(db_dsn, held["id"])
            assert (target["id"] in dispatched) is not conflicts
            if conflicts:
                assert len(await _dispatched(db_dsn, free["id"])) == 10
                assert len(dispatched) == (0 if batch_lock else 9)
                deferred = relay.metrics.rows_deferred.labels(write="sent")._value.get()
                assert deferred >= 1
            await sender.release()

            async def all_recorded() -> bool:
                done = await _dispatched(db_dsn, held["id"]) | await _dispatched(db_dsn, free["id"])
                return len(done) == 20

            await eventually(all_recorded, timeout_s=5.0, what="the deferred record written")
        finally:
            stop.set()
            await task
    rows = await _items(db_dsn, held["id"]) + await _items(db_dsn, free["id"])
    assert [r["dispatch_attempts"] for r in rows] == [1] * 20, "no attempt burnt by the lock"
    assert sorted(sender.sent) == sorted(r["id"] for r in rows), "each item sent once"
    assert relay.metrics.lost_claims._value.get() == 0


async def test_a_final_failure_whose_child_is_locked_is_deferred_and_the_rest_fail_now(
    api: ApiHarness, db_dsn: str, pool: AsyncConnectionPool[Connection]
) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(8))
    claimed = (await outbox.claim(pool, FAST.claim_limits, actor="relay")).messages
    assert len(claimed) == 8
    locked = claimed[5]
    final = [(m, "InjectedFailure: no") for m in claimed]
    async with holding(
        db_dsn, "SELECT 1 FROM page_import WHERE id = %s FOR UPDATE", locked.child_id
    ):
        started = time.monotonic()
        recorded = await outbox.record(
            pool, sent=[], retry=[], final=final, actor="relay", lock_timeout_s=0.1
        )
        # halving 8 -> 4 -> 2 -> 1: three waits of the bound for the locked child
        assert time.monotonic() - started < 2.0
        assert recorded.failed == 7
        assert [m.item_id for m, _ in recorded.deferred.final] == [locked.item_id]
        rows = {r["id"]: r for r in await _items(db_dsn, batch["id"])}
        assert rows[locked.item_id]["error_message"] is None
        assert rows[locked.item_id]["status"] == "0"
        assert all(
            r["status"] == "2" and r["child_error"] == r["error_message"]
            for i, r in rows.items()
            if i != locked.item_id
        )
    again = await outbox.record(
        pool, sent=[], retry=[], final=recorded.deferred.final, actor="relay", lock_timeout_s=0.1
    )
    assert (again.failed, len(again.deferred)) == (1, 0)
    row = next(r for r in await _items(db_dsn, batch["id"]) if r["id"] == locked.item_id)
    assert row["status"] == "2" and "InjectedFailure" in row["child_error"]
    assert (
        await outbox.record(pool, sent=[], retry=[], final=recorded.deferred.final, actor="relay")
    ).failed == 0, "applied once"
    status = (await api.client.get(f"/v1/batches/{batch['id']}", headers=api.headers())).json()
    assert status["counts"]["failed"] == 8


async def test_a_queue_error_with_a_nul_or_a_lone_surrogate_fails_its_item_readably(
    api: ApiHarness, db_dsn: str, pool: AsyncConnectionPool[Connection]
) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(3))
    claimed = (await outbox.claim(pool, FAST.claim_limits, actor="relay")).messages
    reasons = ["Refused: before\x00after", "Refused: \udcff lone", "Refused: plain"]
    recorded = await outbox.record(
        pool, sent=[], retry=[], final=list(zip(claimed, reasons, strict=True)), actor="relay"
    )
    assert recorded.failed == 3
    errors = {r["id"]: r["child_error"] for r in await _items(db_dsn, batch["id"])}
    assert errors[claimed[0].item_id].endswith("Refused: before\\0after")
    assert errors[claimed[1].item_id].endswith("Refused: \\udcff lone")
    assert errors[claimed[2].item_id].endswith("Refused: plain")


async def test_a_batch_with_a_row_postgres_refuses_is_split_until_the_row_is_alone(
    pool: AsyncConnectionPool[Connection],
) -> None:
    """`write_in_savepoints` on a real data error (a NUL PostgreSQL refuses in text): the
    good rows are written in the same round, the bad one goes to `bad` with the reason."""
    rows = [f"row {i}" for i in range(7)] + ["bad\x00row"] + [f"row {i}" for i in range(7, 10)]
    refused: list[tuple[str, str]] = []
    async with transaction(pool) as conn:
        await conn.execute("CREATE TEMP TABLE written (value text) ON COMMIT DROP")

        async def write(part: Sequence[str]) -> list[str]:
            await conn.execute(
                "INSERT INTO written SELECT unnest(%(values)s::text[])", {"values": list(part)}
            )
            return []

        async def bad(row: str, exc: psycopg.Error) -> list[str]:
            refused.append((row, type(exc).__name__))
            return []

        deferred = await write_in_savepoints(conn, rows, write, bad=bad)
        cur = await conn.execute("SELECT value FROM written")
        written = sorted(str(r["value"]) for r in await cur.fetchall())
    assert deferred == []
    assert [row for row, _ in refused] == ["bad\x00row"]
    assert written == sorted(r for r in rows if "\x00" not in r)


async def test_the_sweep_defers_an_item_whose_child_is_locked(
    api: ApiHarness, db_dsn: str, pool: AsyncConnectionPool[Connection]
) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(4))
    rows = await _items(db_dsn, batch["id"])
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE batch_item SET dispatch_attempts = 3, lease_until = now() - interval '1 s' "
            "WHERE batch_id = %s",
            (batch["id"],),
        )
    relay = Relay(pool=pool, sender=_Nothing(), config=FAST, listen_conninfo="")
    locked = rows[2]
    async with holding(
        db_dsn, "SELECT 1 FROM page_import WHERE id = %s FOR UPDATE", locked["job_id"]
    ):
        assert await relay.sweep() == 3
        assert relay.metrics.rows_deferred.labels(write="sweep")._value.get() == 1
    assert await relay.sweep() == 1
    assert {r["status"] for r in await _items(db_dsn, batch["id"])} == {"2"}


class _Nothing:
    async def send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult:
        return SendResult()
