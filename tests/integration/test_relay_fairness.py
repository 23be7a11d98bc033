"""Fair dispatch in the batch outbox (issue 17), the relay in-process against real PostgreSQL:
the window per organization, round robin across organizations, weights, items that finish
before their send is recorded, cancelled and failed items giving their slot back, bad
weights refused at startup."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay.aws.sender import MessageSender, OutgoingMessage, SendResult
from jobrelay.batches.relay import Relay
from jobrelay.batches.relay_config import RelayConfig
from jobrelay.db.pool import Connection
from jobrelay.domain.fair_dispatch import parse_organization_weights
from tests.batch_support import create_batch, outcome, page_items, post_webhook
from tests.harness import ApiHarness, run_cli

WINDOW = 30


def config(**overrides: Any) -> RelayConfig:
    base: dict[str, Any] = {
        "lease_s": 30,
        "claim_size": 20,
        "retry_delay_s": 0,
        "poll_interval_s": 0.05,
        "window": WINDOW,
    }
    return RelayConfig(**{**base, **overrides})


class Recorder:
    """Accepts every message and remembers the child ids in the order they were sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult:
        self.sent.extend(m.child_id for m in messages)
        return SendResult(accepted={m.item_id: m.item_id for m in messages})


def _children(dsn: str, batch_id: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [
            str(r[0])
            for r in conn.execute(
                "SELECT job_id FROM batch_item WHERE batch_id = %s ORDER BY position", (batch_id,)
            ).fetchall()
        ]


def _dispatched(dsn: str, batch_id: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM batch_item WHERE batch_id = %s AND dispatched_at IS NOT NULL",
            (batch_id,),
        ).fetchone()
    return int(row[0]) if row else 0


async def _drain(relay: Relay) -> int:
    """Passes until one claims nothing; the items sent."""
    sent = 0
    while (result := await relay.run_once()).claimed:
        sent += result.sent
    return sent


async def test_an_organization_holds_at_most_its_window_and_finished_items_free_slots(
    api: ApiHarness, db_dsn: str, pool: AsyncConnectionPool[Connection]
) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(100))
    recorder = Recorder()
    relay = Relay(pool=pool, sender=recorder, config=config())
    assert await _drain(relay) == WINDOW
    blocked = await relay.run_once()
    assert (blocked.claimed, blocked.held_back) == (0, 1)
    assert _dispatched(db_dsn, batch["id"]) == WINDOW
    # Seven finish (completed or failed by their webhooks): exactly seven more go out.
    for index, child in enumerate(recorder.sent[:7]):
        response = await post_webhook(
            api.client, outcome(child, "completed" if index % 2 else "failed")
        )
        assert response.status_code < 300, response.text
    assert await _drain(relay) == 7
    assert _dispatched(db_dsn, batch["id"]) == WINDOW + 7
    # The order inside one organization is kept: positions go out first to last.
    assert recorder.sent == _children(db_dsn, batch["id"])[: WINDOW + 7]


async def test_a_small_batch_behind_a_large_one_goes_out_on_the_next_claim(
    api: ApiHarness, db_dsn: str, pool: AsyncConnectionPool[Connection]
) -> None:
    large = await create_batch(api, await api.tenant("alice"), page_items(200))
    recorder = Recorder()
    relay = Relay(pool=pool, sender=recorder, config=config(window=100))
    assert (await relay.run_once()).sent == 20  # alice alone: the whole claim
    small = await create_batch(api, await api.tenant("bob"), page_items(5), sub="bob")
    second = await relay.run_once()
    bob = set(_children(db_dsn, small["id"]))
    # The claim is shared between the two organizations: bob's five are in it.
    assert second.sent == 15
    assert bob <= set(recorder.sent[20:])
    assert Counter(c in bob for c in recorder.sent[20:]) == {True: 5, False: 10}
    assert _dispatched(db_dsn, large["id"]) == 30


async def test_weights_scale_the_window(
    api: ApiHarness, db_dsn: str, pool: AsyncConnectionPool[Connection]
) -> None:
    heavy_scope = await api.tenant("alice")
    light_scope = await api.tenant("bob")
    heavy = await create_batch(api, heavy_scope, page_items(100))
    light = await create_batch(api, light_scope, page_items(100), sub="bob")
    relay = Relay(
        pool=pool,
        sender=Recorder(),
        config=config(window=10, weights=((heavy_scope.organization_id, 2.5),)),
    )
    await _drain(relay)
    assert (_dispatched(db_dsn, heavy["id"]), _dispatched(db_dsn, light["id"])) == (25, 10)


class FinishesFirst:
    """A consumer faster than the relay's record step: each message's child is finished by
    its webhook before the send is recorded (the race a counter kept apart would leak)."""

    def __init__(self, api: ApiHarness, inner: MessageSender) -> None:
        self.api = api
        self.inner = inner

    async def send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult:
        result = await self.inner.send_batch(messages)
        for message in messages:
            child = json.loads(message.body)["page_import_id"]
            response = await post_webhook(self.api.client, outcome(child))
            assert response.status_code < 300, response.text
        return result


async def test_items_finished_before_their_send_is_recorded_hold_no_slot(
    api: ApiHarness, db_dsn: str, pool: AsyncConnectionPool[Connection]
) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(3 * WINDOW))
    relay = Relay(pool=pool, sender=FinishesFirst(api, Recorder()), config=config())
    # Every item settles before it is recorded: the window never fills, all go out.
    assert await _drain(relay) == 3 * WINDOW
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE settled_at IS NULL), "
            "count(*) FILTER (WHERE dispatched_at IS NULL) FROM batch_item WHERE batch_id = %s",
            (batch["id"],),
        ).fetchone()
    assert row == (0, 0)


async def test_cancelled_batches_and_failed_sends_give_their_slots_back(
    api: ApiHarness, db_dsn: str, pool: AsyncConnectionPool[Connection]
) -> None:
    scope = await api.tenant("alice")
    first = await create_batch(api, scope, page_items(WINDOW))
    second = await create_batch(api, scope, page_items(10))
    relay = Relay(pool=pool, sender=Recorder(), config=config())
    await _drain(relay)
    assert (_dispatched(db_dsn, first["id"]), _dispatched(db_dsn, second["id"])) == (WINDOW, 0)
    response = await api.client.post(f"/v1/batches/{first['id']}/cancel", headers=api.headers())
    assert response.status_code < 300, response.text
    assert await _drain(relay) == 10
    assert _dispatched(db_dsn, second["id"]) == 10


@pytest.mark.parametrize("weights", ["42=0", "42=-1", "42=abc", "x=2", "42=2,42=3", "42=inf"])
def test_bad_weights_are_refused_naming_the_setting(weights: str) -> None:
    with pytest.raises(ValueError, match="JOBRELAY_RELAY_ORG_WEIGHTS"):
        parse_organization_weights(weights, what="JOBRELAY_RELAY_ORG_WEIGHTS")


def test_a_bad_weight_is_one_line_at_startup_and_exit_2() -> None:
    result = run_cli("relay", JOBRELAY_RELAY_ORG_WEIGHTS="42=2,7=0")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "JOBRELAY_RELAY_ORG_WEIGHTS" in lines[0], result.stderr


def test_weights_parse() -> None:
    assert parse_organization_weights(" 7=0.5, 42=2 ,", what="w") == ((7, 0.5), (42, 2.0))
    assert parse_organization_weights("", what="w") == ()
