"""The relay under SQS partitions (issue 24): the port between a relay and the SQS endpoint
(the emulator's real API) is black-holed: packets dropped, no RST.

- One relay cut off while another is healthy: the cut relay's sends time out, it gives its
  items back uncounted and opens its circuit; the healthy relay delivers everything, without
  waiting for the cut relay's leases to expire (its organization's window stays open).
- Every relay cut off, for 12 s and for 3 minutes: nothing is sent, no item fails, no
  attempt is spent; within seconds of the heal the relay sends again and delivers every
  item.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from jobrelay.aws.clients import AwsEndpoint
from jobrelay.aws.sqs_sender import SqsSender
from jobrelay.batches.relay import Relay
from jobrelay.batches.relay_config import RelayConfig
from jobrelay.db.pool import Connection
from tests.batch_support import create_batch, page_items
from tests.harness import ApiHarness, AwsTestResources
from tests.partition import Blackhole, TcpRelay, unavailable

pytestmark = pytest.mark.long

ITEMS = 300
# A small window: a cut relay that kept its claimed items for their lease would hold the
# whole window and stop the healthy relay. Sent items stop counting in it after half a
# second (no SQS worker completes their children here).
CONFIG = RelayConfig(
    lease_s=60,
    claim_size=20,
    workers=2,
    poll_interval_s=0.05,
    retry_delay_s=0,
    send_timeout_s=1.5,
    window=40,
    window_poll_s=0.02,
    in_flight_expiry_s=0.5,
)
HEAL_CEILING_S = 8.0


@pytest.fixture
def sqs_relay(emulator_url: str) -> Iterator[tuple[TcpRelay, AwsEndpoint]]:
    if (reason := unavailable()) is not None:
        pytest.skip(reason)
    target = urlsplit(emulator_url)
    relay = TcpRelay((target.hostname or "127.0.0.1", target.port or 80))
    with relay:
        yield (
            relay,
            AwsEndpoint(
                region="us-east-1",
                endpoint_url=f"http://127.0.0.1:{relay.port}",
                connect_timeout_s=1.0,
                read_timeout_s=2.0,
            ),
        )


def _counts(dsn: str, batch_id: str) -> dict[str, Any]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE dispatched_at IS NOT NULL) AS sent, "
            "count(*) FILTER (WHERE error_message IS NOT NULL) AS failed, "
            "coalesce(max(dispatch_attempts), 0) AS most_attempts "
            "FROM batch_item WHERE batch_id = %s",
            (batch_id,),
        ).fetchone()
    assert row is not None
    return row


async def _until(probe: Any, *, timeout_s: float, what: str) -> float:
    """Poll `probe()` until truthy; the monotonic time it became so."""
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        if probe():
            return time.monotonic()
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture
async def running() -> AsyncIterator[list[tuple[asyncio.Event, asyncio.Task[None]]]]:
    relays: list[tuple[asyncio.Event, asyncio.Task[None]]] = []
    yield relays
    for stop, _ in relays:
        stop.set()
    await asyncio.gather(*(task for _, task in relays))


def _start(relays: list[tuple[asyncio.Event, asyncio.Task[None]]], relay: Relay) -> None:
    stop = asyncio.Event()
    relays.append((stop, asyncio.create_task(relay.run(stop))))


async def test_a_cut_relay_gives_its_items_back_to_a_healthy_one(
    api: ApiHarness,
    db_dsn: str,
    pool: AsyncConnectionPool[Connection],
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
    sqs_relay: tuple[TcpRelay, AwsEndpoint],
    running: list[tuple[asyncio.Event, asyncio.Task[None]]],
) -> None:
    port_relay, cut_endpoint = sqs_relay
    queue = aws_resources.queues.work
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(ITEMS))
    hole = Blackhole(port_relay.port)
    hole.cut()
    try:
        async with (
            SqsSender(cut_endpoint, queue_url=queue) as cut_sender,
            SqsSender(aws, queue_url=queue) as healthy_sender,
        ):
            cut = Relay(pool=pool, sender=cut_sender, config=CONFIG, actor="cut-relay")
            _start(running, cut)
            await _until(lambda: cut.circuit.is_open, timeout_s=20, what="the cut relay's circuit")
            healthy = Relay(pool=pool, sender=healthy_sender, config=CONFIG, actor="healthy")
            started = time.monotonic()
            _start(running, healthy)
            first = await _until(
                lambda: _counts(db_dsn, batch["id"])["sent"] > 0,
                timeout_s=20,
                what="the healthy relay's first send",
            )
            await _until(
                lambda: _counts(db_dsn, batch["id"])["sent"] == ITEMS,
                timeout_s=120,
                what="every item sent by the healthy relay",
            )
            counts = _counts(db_dsn, batch["id"])
            given_back = cut.metrics.given_back._value.get()
    finally:
        hole.heal()
    print(
        f"\nhealthy relay: first send {first - started:.2f} s after it started; cut relay "
        f"gave back {given_back:.0f} claimed items, circuit opened {cut.circuit.openings}x"
    )
    assert counts["failed"] == 0, counts
    assert given_back > 0
    # Within a lease (60 s) by far: the cut relay's claims did not hold the window.
    assert first - started < 10, first - started
    assert counts["most_attempts"] <= 2, counts  # an attempt counts only when sent


@pytest.mark.parametrize("outage_s", [12.0, 180.0], ids=["12s", "3min"])
async def test_an_outage_of_the_queue_fails_nothing_and_ends_within_seconds(
    outage_s: float,
    api: ApiHarness,
    db_dsn: str,
    pool: AsyncConnectionPool[Connection],
    aws_resources: AwsTestResources,
    sqs_relay: tuple[TcpRelay, AwsEndpoint],
    running: list[tuple[asyncio.Event, asyncio.Task[None]]],
) -> None:
    port_relay, cut_endpoint = sqs_relay
    queue = aws_resources.queues.work
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(ITEMS))
    hole = Blackhole(port_relay.port)
    async with SqsSender(cut_endpoint, queue_url=queue) as sender:
        relay = Relay(pool=pool, sender=sender, config=CONFIG)
        _start(running, relay)
        await _until(lambda: _counts(db_dsn, batch["id"])["sent"] > 0, timeout_s=20, what="sends")
        hole.cut()
        cut_at = time.monotonic()
        try:
            await _until(lambda: relay.circuit.is_open, timeout_s=20, what="the circuit")
            sent_at_cut = _counts(db_dsn, batch["id"])["sent"]
            await asyncio.sleep(max(0.0, outage_s - (time.monotonic() - cut_at)))
            during = _counts(db_dsn, batch["id"])
        finally:
            hole.heal()
        healed_at = time.monotonic()
        resumed = await _until(
            lambda: _counts(db_dsn, batch["id"])["sent"] > during["sent"],
            timeout_s=HEAL_CEILING_S + 20,
            what="a send after the heal",
        )
        await _until(
            lambda: _counts(db_dsn, batch["id"])["sent"] == ITEMS,
            timeout_s=120,
            what="every item sent",
        )
        closed = not relay.circuit.is_open
    counts = _counts(db_dsn, batch["id"])
    print(
        f"\n{sent_at_cut} of {ITEMS} sent when the circuit opened, {during['sent']} after "
        f"{outage_s:g} s of outage; first send {resumed - healed_at:.2f} s after the heal"
    )
    assert during["failed"] == 0 and counts["failed"] == 0, counts
    assert counts["most_attempts"] <= 2, counts
    assert closed
    assert resumed - healed_at < HEAL_CEILING_S, resumed - healed_at
