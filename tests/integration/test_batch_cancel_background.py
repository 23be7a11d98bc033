"""The cancel of a batch with more processing items than JOBRELAY_BATCH_CANCEL_INLINE_MAX
answers at once (202, `cancelling`) and the relay's sweeper marks its children and items in
short transactions (migration 0014). Meanwhile the batch is cancelled for every writer: the
relay claims nothing of it, a webhook ends its child cancelled, the counts stay exact."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay.aws.clients import AwsEndpoint
from jobrelay.aws.sender import OutgoingMessage, SendResult
from jobrelay.aws.sqs_sender import SqsSender
from jobrelay.batches.counts import recount_batch
from jobrelay.batches.outbox import _settle_step, settle_cancels
from jobrelay.batches.relay import Relay
from jobrelay.batches.relay_config import RelayConfig
from jobrelay.db.pool import Connection, open_pool, transaction
from jobrelay.domain.batch_status import BatchCounts
from tests.batch_support import create_batch, drain, outcome, page_items, post_webhook
from tests.harness import ApiHarness, AwsTestResources, api_harness
from tests.jobs_support import fetch

Pool = AsyncConnectionPool[Connection]
INLINE_MAX = 10


@pytest.fixture
async def small_inline_api(db_dsn: str, issuer_dir: Path) -> AsyncIterator[ApiHarness]:
    async with api_harness(
        db_dsn, issuer_dir, batches={"cancel_inline_max": INLINE_MAX}
    ) as harness:
        yield harness


class Refuse:
    async def send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult:
        raise AssertionError("nothing of a cancelled batch may be sent")


async def _status(api: ApiHarness, batch_id: str) -> dict[str, Any]:
    response = await api.client.get(f"/v1/batches/{batch_id}", headers=api.headers())
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _recount(pool: Pool, batch_id: str) -> dict[str, int]:
    async with transaction(pool) as conn:
        counts: BatchCounts = await recount_batch(conn, batch_id, "page_import")
    return {k: getattr(counts, k) for k in BatchCounts.__dataclass_fields__}


async def test_a_large_cancel_answers_at_once_and_the_relay_settles_it(
    small_inline_api: ApiHarness,
    pool: Pool,
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
) -> None:
    api = small_inline_api
    queue = aws_resources.queues.work
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(300))
    async with SqsSender(aws, queue_url=queue) as sqs:
        sending = Relay(pool=pool, sender=sqs, config=RelayConfig(claim_size=100))
        assert (await sending.run_once()).sent == 100
    sent = await fetch(
        pool,
        "SELECT job_id FROM batch_item WHERE batch_id = %s AND dispatched_at IS NOT NULL "
        "ORDER BY position",
        batch["id"],
    )
    for item in sent[:10]:
        assert (await post_webhook(api.client, outcome(item["job_id"]))).status_code == 200

    response = await api.client.post(f"/v1/batches/{batch['id']}/cancel", headers=api.headers())
    assert response.status_code == 202, response.text
    body = response.json()
    assert (body["status"], body["cancelling"]) == ("3", True)
    assert body["counts"]["queued"] + body["counts"]["running"] == 290

    # Cancelled for every writer before anything else is marked: nothing more is sent, and a
    # late worker outcome ends its child cancelled without keeping the result.
    relay = Relay(pool=pool, sender=Refuse(), config=RelayConfig(poll_interval_s=3600))
    assert (await relay.run_once()).claimed == 0
    late = str(sent[50]["job_id"])
    answer = await post_webhook(api.client, outcome(late))
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "3"
    [child] = await fetch(pool, "SELECT status, result_url FROM page_import WHERE id = %s", late)
    assert (child["status"], child["result_url"]) == ("3", None)
    assert (await _status(api, batch["id"]))["counts"] == await _recount(pool, batch["id"])

    await relay.sweep()  # the relay's periodic sweep finishes the cancel
    status = await _status(api, batch["id"])
    assert (status["status"], status["cancelling"]) == ("3", False)
    assert status["counts"] == {
        "total": 300,
        "queued": 0,
        "running": 0,
        "completed": 10,
        "failed": 0,
        "cancelled": 290,
    }
    assert status["counts"] == await _recount(pool, batch["id"])
    unmarked = await fetch(
        pool,
        "SELECT bi.id FROM batch_item bi JOIN page_import p ON p.id = bi.job_id "
        "WHERE bi.batch_id = %s AND p.status = '3' AND bi.cancelled_at IS NULL",
        batch["id"],
    )
    assert unmarked == []
    again = await api.client.post(f"/v1/batches/{batch['id']}/cancel", headers=api.headers())
    assert (again.status_code, again.json()["cancelling"]) == (200, False)
    assert len(await drain(aws, queue, expect=100)) == 100


async def test_two_sweepers_settle_each_child_once_and_can_stop_between_steps(
    small_inline_api: ApiHarness, db_dsn: str, pool: Pool
) -> None:
    api = small_inline_api
    scope = await api.tenant("alice")
    batches = [await create_batch(api, scope, page_items(400)) for _ in range(3)]
    for batch in batches:
        response = await api.client.post(f"/v1/batches/{batch['id']}/cancel", headers=api.headers())
        assert response.status_code == 202

    # One step, then "the process dies": what is marked is consistent on its own.
    assert await settle_once(pool) == 50
    for batch in batches:
        assert (await _status(api, batch["id"]))["counts"] == await _recount(pool, batch["id"])

    other = await open_pool(db_dsn, min_size=1, max_size=2)
    try:
        cancelled = await asyncio.gather(
            settle_cancels(pool, actor="sweeper-a", step=50),
            settle_cancels(other, actor="sweeper-b", step=50),
        )
    finally:
        await other.close()
    assert sum(cancelled) == 3 * 400 - 50
    for batch in batches:
        status = await _status(api, batch["id"])
        assert (status["cancelling"], status["counts"]["cancelled"]) == (False, 400)
        assert status["counts"] == await _recount(pool, batch["id"])
    left = await fetch(pool, "SELECT id FROM batch WHERE cancel_settled_at IS NULL")
    assert left == []


async def settle_once(pool: Pool) -> int:
    """One step of the sweeper (a transaction of 50 children), as a process that stops
    stopping after it would leave them."""
    done = await _settle_step(pool, actor="sweeper", step=50)
    assert done is not None
    return done


async def test_a_small_cancel_still_marks_everything_in_its_own_transaction(
    small_inline_api: ApiHarness, pool: Pool
) -> None:
    api = small_inline_api
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(INLINE_MAX))
    response = await api.client.post(f"/v1/batches/{batch['id']}/cancel", headers=api.headers())
    assert response.status_code == 200
    assert (response.json()["cancelling"], response.json()["counts"]["cancelled"]) == (
        False,
        INLINE_MAX,
    )
    [row] = await fetch(
        pool,
        "SELECT cancel_settled_at IS NOT NULL AS settled FROM batch WHERE id = %s",
        batch["id"],
    )
    assert row["settled"]


async def test_deleting_a_batch_whose_cancel_is_settling_settles_it(
    small_inline_api: ApiHarness, pool: Pool
) -> None:
    api = small_inline_api
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(50))
    url = f"/v1/batches/{batch['id']}"
    assert (await api.client.post(f"{url}/cancel", headers=api.headers())).status_code == 202
    assert (await api.client.delete(url, headers=api.headers())).status_code == 204
    [row] = await fetch(
        pool,
        "SELECT cancel_settled_at IS NOT NULL AS settled, "
        "(SELECT count(*) FROM page_import WHERE batch_id = b.id AND status = '0') AS left "
        "FROM batch b WHERE id = %s",
        batch["id"],
    )
    assert (row["settled"], row["left"]) == (True, 0)
    assert await settle_cancels(pool, actor="sweeper") == 0
