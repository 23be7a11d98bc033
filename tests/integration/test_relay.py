"""The relay in-process against real PostgreSQL and the SQS emulator: sends, records,
per-entry failures, SQS unavailable and back, the sweep, cancel while it runs (issue 6)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import psycopg
from aiobotocore.config import AioConfig
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from structlog.testing import capture_logs

from jobrelay.aws.clients import AwsEndpoint
from jobrelay.aws.emulator import free_port
from jobrelay.aws.sender import MessageSender, OutgoingMessage, SendResult
from jobrelay.aws.sqs_sender import SqsSender
from jobrelay.batches import outbox
from jobrelay.batches.chunking import chunk_messages
from jobrelay.batches.creation import ATTRIBUTE_BYTES
from jobrelay.batches.outbox import LEASE_EXPIRED_ERROR
from jobrelay.batches.relay import Relay
from jobrelay.batches.relay_config import RelayConfig
from jobrelay.db.pool import Connection
from tests.batch_support import create_batch, drain, outcome, page_items, post_webhook
from tests.harness import ApiHarness, AwsTestResources
from tests.jobs_support import eventually, kill_and_await_reconnect

FAST = RelayConfig(lease_s=30, claim_size=50, retry_delay_s=0, poll_interval_s=0.05)


def _items(dsn: str, batch_id: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute(
            "SELECT bi.*, bi.message::text AS body, p.status, p.error_message AS child_error "
            "FROM batch_item bi JOIN page_import p ON p.id = bi.job_id "
            "WHERE bi.batch_id = %s ORDER BY position",
            (batch_id,),
        ).fetchall()


async def _status(api: ApiHarness, batch_id: str) -> dict[str, Any]:
    body: dict[str, Any] = (
        await api.client.get(f"/v1/batches/{batch_id}", headers=api.headers())
    ).json()
    return body


class Flaky:
    """Injected per-entry failures: entries whose child is in `reject` fail, others go to SQS."""

    def __init__(self, inner: MessageSender, reject: set[str]) -> None:
        self.inner = inner
        self.reject = reject
        self.calls: list[int] = []

    async def send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult:
        self.calls.append(len(messages))
        keep = [m for m in messages if m.child_id not in self.reject]
        result = await self.inner.send_batch(keep) if keep else SendResult()
        injected = {m.item_id: "InjectedFailure: no" for m in messages if m.child_id in self.reject}
        return SendResult(accepted=result.accepted, failed={**result.failed, **injected})


async def test_a_pass_sends_stored_bodies_and_records_them(
    api: ApiHarness,
    db_dsn: str,
    pool: AsyncConnectionPool[Connection],
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(25))
    queue = aws_resources.queues.work
    async with SqsSender(aws, queue_url=queue) as sqs:
        sender = Flaky(sqs, reject=set())
        result = await Relay(pool=pool, sender=sender, config=FAST).run_once()
    assert (result.claimed, result.sent) == (25, 25)
    assert sorted(sender.calls) == [5, 10, 10]
    rows = _items(db_dsn, batch["id"])
    assert all(r["dispatched_at"] and r["dispatch_attempts"] == 1 for r in rows)
    assert {r["updated_by"] for r in rows} == {"relay"}
    messages = await drain(aws, queue)
    by_child = {r["job_id"]: r for r in rows}
    assert len(messages) == 25
    for message in messages:
        body = json.loads(message["Body"])
        row = by_child[body["page_import_id"]]
        assert message["Body"] == row["body"]
        assert body == row["message"]
        assert message["MessageAttributes"]["dispatch_attempt"]["StringValue"] == "1"
    status = await _status(api, batch["id"])
    assert (status["status"], status["counts"]["running"]) == ("0", 25)


async def test_per_entry_failures_retry_then_fail_the_child_on_the_third(
    api: ApiHarness,
    db_dsn: str,
    pool: AsyncConnectionPool[Connection],
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(4))
    rows = _items(db_dsn, batch["id"])
    doomed = rows[1]["job_id"]
    async with SqsSender(aws, queue_url=aws_resources.queues.work) as sqs:
        sender = Flaky(sqs, reject={doomed})
        relay = Relay(pool=pool, sender=sender, config=FAST)
        first = await relay.run_once()
        assert (first.sent, first.retried) == (3, 1)
        await relay.run_once()
        third = await relay.run_once()
        assert third.failed == 1
        assert (await relay.run_once()).claimed == 0
    rows = {r["job_id"]: r for r in _items(db_dsn, batch["id"])}
    failed = rows[doomed]
    assert failed["dispatch_attempts"] == 3
    assert failed["dispatched_at"] is None
    assert "InjectedFailure" in failed["error_message"]
    assert failed["status"] == "2"
    assert failed["child_error"] == failed["error_message"]
    assert relay.metrics.failed_attempts._value.get() == 3
    for child in rows:
        if child != doomed:
            await post_webhook(api.client, outcome(child))
    status = await _status(api, batch["id"])
    assert status["status"] == "2"
    assert status["counts"] == {
        "total": 4, "queued": 0, "running": 0, "completed": 3, "failed": 1, "cancelled": 0,
    }  # fmt: skip


async def test_an_unreachable_queue_fails_nothing_and_a_refusing_one_counts_attempts(
    api: ApiHarness,
    db_dsn: str,
    pool: AsyncConnectionPool[Connection],
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
) -> None:
    queue = aws_resources.queues.work
    nowhere = AwsEndpoint(region="us-east-1", endpoint_url=f"http://127.0.0.1:{free_port()}")
    scope = await api.tenant("alice")
    kept = await create_batch(api, scope, page_items(3))
    no_retries = AioConfig(retries={"max_attempts": 1})

    class Switch:
        """The queue as the relay sees it: down (nothing listens), then back."""

        def __init__(self, inner: MessageSender) -> None:
            self.inner = inner

        async def send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult:
            return await self.inner.send_batch(messages)

    async with (
        SqsSender(nowhere, queue_url=queue, config=no_retries) as down,
        SqsSender(aws, queue_url=queue) as up,
    ):
        switch = Switch(down)
        relay = Relay(pool=pool, sender=switch, config=FAST, endpoint="the test queue")
        with capture_logs() as logs:
            for _ in range(3):  # an outage: the attempt is given back, never counted
                result = await relay.run_once()
                assert (result.claimed, result.given_back, result.retried) == (3, 3, 0)
                rows = _items(db_dsn, kept["id"])
                assert [r["dispatch_attempts"] for r in rows] == [0, 0, 0]
                assert all(r["lease_until"] is None and r["status"] == "0" for r in rows)
            assert relay.circuit.is_open
            switch.inner = up  # the queue answers again
            result = await relay.run_once(probe=True)
            assert (result.claimed, result.sent) == (1, 1)
            assert not relay.circuit.is_open
            assert (await relay.run_once()).sent == 2
        events = [e for e in logs if e["event"].startswith("relay.circuit")]
        assert [e["event"] for e in events] == ["relay.circuit_open", "relay.circuit_closed"]
        assert events[0]["endpoint"] == "the test queue"
        assert "EndpointConnectionError" in events[0]["error"]
        rows = _items(db_dsn, kept["id"])
        assert all(r["dispatched_at"] and r["dispatch_attempts"] == 1 for r in rows)

    class Refuse:
        """A queue that answers and refuses the call (access denied, a bad parameter)."""

        async def send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult:
            raise RuntimeError("AccessDenied: not allowed")

    refused = await create_batch(api, scope, page_items(3, start=10))
    relay = Relay(pool=pool, sender=Refuse(), config=FAST)
    for attempt in (1, 2, 3):
        result = await relay.run_once()
        assert (result.claimed, result.given_back) == (3, 0)
        assert [r["dispatch_attempts"] for r in _items(db_dsn, refused["id"])] == [attempt] * 3
    rows = _items(db_dsn, refused["id"])
    assert all(r["status"] == "2" and "AccessDenied" in r["error_message"] for r in rows)
    assert (await _status(api, refused["id"]))["status"] == "2"
    assert not relay.circuit.is_open


async def test_the_sweep_fails_an_expired_last_claim_and_stale_records_are_ignored(
    api: ApiHarness, db_dsn: str, pool: AsyncConnectionPool[Connection]
) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(2))
    [a, b] = _items(db_dsn, batch["id"])
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        # a: third claim expired; b: second claim expired (still due).
        conn.execute(
            "UPDATE batch_item SET dispatch_attempts = 3, lease_until = now() - interval '1 s' "
            "WHERE id = %s",
            (a["id"],),
        )
        conn.execute(
            "UPDATE batch_item SET dispatch_attempts = 2, lease_until = now() - interval '1 s' "
            "WHERE id = %s",
            (b["id"],),
        )

    class Nothing:
        async def send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult:
            return SendResult()

    relay = Relay(pool=pool, sender=Nothing(), config=FAST)
    assert await relay.sweep() == 1
    [a, b] = _items(db_dsn, batch["id"])
    assert a["error_message"] == LEASE_EXPIRED_ERROR
    assert a["status"] == "2"
    assert b["error_message"] is None and b["status"] == "0"
    # A relay still holding attempt 2 of b after another claimed attempt 3 records nothing.
    claimed = (await outbox.claim(pool, FAST.claim_limits, actor="relay")).messages
    assert [(m.item_id, m.attempt) for m in claimed] == [(b["id"], 3)]
    stale = OutgoingMessage(item_id=b["id"], child_id=b["job_id"], attempt=2, body="{}")
    await outbox.record(pool, sent=[stale], retry=[], final=[], actor="relay")
    assert _items(db_dsn, batch["id"])[1]["dispatched_at"] is None
    await outbox.record(pool, sent=claimed, retry=[], final=[], actor="relay")
    assert _items(db_dsn, batch["id"])[1]["dispatched_at"] is not None


async def test_cancel_while_the_relay_runs(
    api: ApiHarness,
    db_dsn: str,
    pool: AsyncConnectionPool[Connection],
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
) -> None:
    queue = aws_resources.queues.work
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(600))

    class Slow:
        def __init__(self, inner: MessageSender) -> None:
            self.inner = inner
            self.sent = 0
            self.underway = asyncio.Event()

        async def send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult:
            await asyncio.sleep(0.02)  # injected latency keeps sends in flight
            result = await self.inner.send_batch(messages)
            self.sent += len(messages) - len(result.failed)
            if self.sent >= 50:
                self.underway.set()
            return result

    stop = asyncio.Event()
    async with SqsSender(aws, queue_url=queue) as sqs:
        sender = Slow(sqs)
        relay = Relay(
            pool=pool,
            sender=sender,
            config=RelayConfig(claim_size=20, workers=2, max_in_flight=4, poll_interval_s=0.05),
        )
        running = asyncio.create_task(relay.run(stop))
        await asyncio.wait_for(sender.underway.wait(), timeout=30)
        response = await api.client.post(f"/v1/batches/{batch['id']}/cancel", headers=api.headers())
        assert response.status_code == 200
        with psycopg.connect(db_dsn) as conn:
            claimed_before_cancel = {
                str(r[0])
                for r in conn.execute(
                    "SELECT job_id FROM batch_item WHERE batch_id = %s AND dispatch_attempts > 0",
                    (batch["id"],),
                )
            }
        stop.set()
        await running
    sent = {json.loads(m["Body"])["page_import_id"] for m in await drain(aws, queue)}
    assert 50 <= len(sent) < 600
    assert sent <= claimed_before_cancel, "an item claimed after the cancel was sent"
    status = await _status(api, batch["id"])
    assert status["status"] == "3"
    assert status["counts"]["cancelled"] == 600
    late = sorted(sent)[0]
    response = await post_webhook(api.client, outcome(late))
    assert response.status_code == 200
    assert response.json()["status"] == "3"
    assert (await _status(api, batch["id"]))["counts"]["cancelled"] == 600


async def test_a_relay_whose_listener_was_killed_reconnects_and_is_woken_again(
    api: ApiHarness,
    db_dsn: str,
    pool: AsyncConnectionPool[Connection],
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
) -> None:
    # The relay never polls here: only its listener can make it claim the batch.
    queue = aws_resources.queues.work
    scope = await api.tenant("alice")
    stop = asyncio.Event()
    async with SqsSender(aws, queue_url=queue) as sqs:
        relay = Relay(pool=pool, sender=sqs, config=RelayConfig(poll_interval_s=3600))
        listener = relay.listener
        assert listener is not None
        with capture_logs() as logs:
            running = asyncio.create_task(relay.run(stop))
            try:
                await eventually(lambda: _true(listener.connected), what="LISTEN")
                await kill_and_await_reconnect(pool, listener)
                batch = await create_batch(api, scope, page_items(3))
                await eventually(
                    lambda: _true(all(r["dispatched_at"] for r in _items(db_dsn, batch["id"]))),
                    what="the batch sent after a notification",
                )
            finally:
                stop.set()
                await running
    assert len(await drain(aws, queue, expect=3)) == 3
    changes = [
        e["event"] for e in logs if e.get("loop") == "relay-listener" and e["log_level"] != "debug"
    ]
    assert changes == ["loop.failing", "loop.recovered"]
    assert not listener.running and not relay.sweeper.running


async def _true(value: bool) -> bool:
    return value


def test_chunks_respect_ten_entries_and_the_byte_limit() -> None:
    def message(n: int, size: int) -> OutgoingMessage:
        return OutgoingMessage(item_id=str(n), child_id=str(n), attempt=1, body="x" * size)

    small = [message(n, 10) for n in range(25)]
    assert [len(c) for c in chunk_messages(small, byte_limit=64 * 1024)] == [10, 10, 5]
    big = [message(n, 400) for n in range(5)]
    # Each counts its body and the attributes' allowance: two fit, not three.
    two = 2 * (400 + ATTRIBUTE_BYTES) + 100
    assert [len(c) for c in chunk_messages(big, byte_limit=two)] == [2, 2, 1]


async def test_deleted_and_cancelled_batches_are_never_claimed(
    api: ApiHarness, pool: AsyncConnectionPool[Connection]
) -> None:
    scope = await api.tenant("alice")
    deleted = await create_batch(api, scope, page_items(3))
    cancelled = await create_batch(api, scope, page_items(3))
    assert (
        await api.client.delete(f"/v1/batches/{deleted['id']}", headers=api.headers())
    ).status_code == 204
    assert (
        await api.client.post(f"/v1/batches/{cancelled['id']}/cancel", headers=api.headers())
    ).status_code == 200

    class Refuse:
        async def send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult:
            raise AssertionError("nothing may be sent")

    assert (await Relay(pool=pool, sender=Refuse(), config=FAST).run_once()).claimed == 0
