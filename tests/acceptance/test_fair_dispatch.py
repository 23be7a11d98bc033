"""Fair dispatch (issue 17 acceptance): organization A submits a 10,000-item batch, then
organization B submits 10 items; B's batch completes before A has finished 10% of its items.

A real `jobrelay relay` process (default window) sends to the emulator's SQS; a test consumer
does what an external worker does: receive 10 at a time, post the signed webhook of each
message to the API, delete the messages. The assertion is on the order of events (the
consumer's ledger and the database), so it holds on a loaded machine; the times of B alone
and B behind A are printed, not asserted.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from jobrelay.aws.clients import AwsEndpoint, sqs_client
from tests.acceptance.test_relay_processes import relay_process
from tests.batch_support import create_batch, outcome, page_items, post_webhook
from tests.harness import ApiHarness, AwsTestResources, wait_until

pytestmark = pytest.mark.slow

LARGE = 10_000
SMALL = 10
CONSUMERS = 4


@dataclass
class Ledger:
    """Children finished by the test consumer, in the order their webhooks were accepted."""

    done: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    at: dict[str, float] = field(default_factory=dict)


async def consume(
    api: ApiHarness, aws: AwsEndpoint, queue: str, ledger: Ledger, stop: asyncio.Event
) -> None:
    async with sqs_client(aws) as sqs:
        while not stop.is_set():
            response = await sqs.receive_message(
                QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1
            )
            messages = response.get("Messages", [])
            for message in messages:
                child = json.loads(message["Body"])["page_import_id"]
                reply = await post_webhook(api.client, outcome(child))
                assert reply.status_code < 300, reply.text
                if child not in ledger.seen:  # SQS may deliver a message twice
                    ledger.seen.add(child)
                    ledger.done.append(child)
                    ledger.at[child] = time.monotonic()
            if messages:
                await sqs.delete_message_batch(
                    QueueUrl=queue,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(messages)
                    ],
                )


def _children(dsn: str, batch_id: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT job_id FROM batch_item WHERE batch_id = %s", (batch_id,))
        return {str(r[0]) for r in rows.fetchall()}


def _count(dsn: str, sql: str, batch_id: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql, (batch_id,)).fetchone()
    return int(row[0]) if row else 0


async def _until(probe: object, *, timeout_s: float, what: str) -> None:
    """`wait_until` without blocking the loop the consumers run on."""
    assert callable(probe)
    await asyncio.to_thread(wait_until, probe, timeout_s=timeout_s, what=what)


async def test_a_small_batch_is_not_queued_behind_another_organizations_large_one(
    api: ApiHarness,
    db_dsn: str,
    emulator_url: str,
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
    tmp_path: Path,
) -> None:
    queue = aws_resources.queues.work
    alice = await api.tenant("alice")
    bob = await api.tenant("bob")
    ledger = Ledger()
    stop = asyncio.Event()
    consumers = [
        asyncio.create_task(consume(api, aws, queue, ledger, stop)) for _ in range(CONSUMERS)
    ]
    try:
        with relay_process(tmp_path, "relay", db_dsn, emulator_url, queue):
            await _until(
                lambda: "relay.started" in (tmp_path / "relay.log").read_text(),
                timeout_s=60,
                what="the relay to start",
            )
            # B alone: the reference time.
            start = time.monotonic()
            alone = await create_batch(api, bob, page_items(SMALL), sub="bob")
            alone_children = _children(db_dsn, alone["id"])
            await _until(
                lambda: alone_children <= ledger.seen, timeout_s=60, what="B's batch alone"
            )
            b_alone_s = max(ledger.at[c] for c in alone_children) - start

            # A's 10,000 items, then B's 10 once A's window is out in SQS (B's worst case).
            large = await create_batch(api, alice, page_items(LARGE))
            await _until(
                lambda: (
                    _count(
                        db_dsn,
                        "SELECT count(*) FROM batch_item WHERE batch_id = %s "
                        "AND dispatched_at IS NOT NULL",
                        large["id"],
                    )
                    >= 100
                ),
                timeout_s=60,
                what="A's first items sent",
            )
            start = time.monotonic()
            small = await create_batch(api, bob, page_items(SMALL, start=SMALL), sub="bob")
            small_children = _children(db_dsn, small["id"])
            await _until(
                lambda: small_children <= ledger.seen, timeout_s=120, what="B's batch behind A"
            )
            b_behind_s = max(ledger.at[c] for c in small_children) - start
            large_children = _children(db_dsn, large["id"])
            last_of_b = max(ledger.done.index(c) for c in small_children)
            a_before_b = sum(1 for c in ledger.done[:last_of_b] if c in large_children)
            status = (
                await api.client.get(f"/v1/batches/{large['id']}", headers=api.headers())
            ).json()
            a_sent = _count(
                db_dsn,
                "SELECT count(*) FROM batch_item WHERE batch_id = %s AND dispatched_at IS NOT NULL",
                large["id"],
            )
            print(
                f"\nB alone: {b_alone_s:.2f} s; B behind A: {b_behind_s:.2f} s; A finished "
                f"before B's last item: {a_before_b} of {LARGE}; A sent to SQS by then: "
                f"{a_sent}; A completed when B was checked: {status['counts']['completed']}"
            )
            assert a_before_b < LARGE // 10
            assert status["counts"]["completed"] < LARGE // 10
            # The outbox, not SQS, holds A's backlog.
            assert a_sent < LARGE // 10
            response = await api.client.post(
                f"/v1/batches/{large['id']}/cancel", headers=api.headers()
            )
            assert response.status_code < 300, response.text
    finally:
        stop.set()
        await asyncio.gather(*consumers)
