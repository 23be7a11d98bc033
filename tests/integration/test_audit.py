"""Audit columns (issue 3): API writes carry the caller's `sub`; backend writes carry their
actor names (`relay`, `webhook`, `worker`); no audit column is ever empty."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobrelay.aws.clients import AwsEndpoint
from jobrelay.aws.sqs_sender import SqsSender
from jobrelay.batches.relay import Relay
from jobrelay.batches.relay_config import RelayConfig
from jobrelay.db.pool import Connection
from tests.batch_support import create_batch, outcome, page_items, post_webhook
from tests.harness import ApiHarness, AwsTestResources

AUDITED = ["organization", "project", "batch", "batch_item", "page_import", "code2des", "code2wf"]


def _audit(dsn: str, table: str, where: str = "TRUE") -> list[dict[str, Any]]:
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute(
            f"SELECT id, created_by, updated_by, deleted_by FROM {table} WHERE {where}"
        ).fetchall()


async def test_api_writes_carry_the_sub_and_backend_writes_their_actor(
    api: ApiHarness,
    db_dsn: str,
    pool: AsyncConnectionPool[Connection],
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
) -> None:
    scope = await api.tenant("alice-sub-7f3a")
    batch = await create_batch(api, scope, page_items(3), sub="alice-sub-7f3a")
    for table in ("batch", "batch_item", "page_import"):
        rows = _audit(db_dsn, table)
        assert {(r["created_by"], r["updated_by"]) for r in rows} == {
            ("alice-sub-7f3a", "alice-sub-7f3a")
        }, table

    async with SqsSender(aws, queue_url=aws_resources.queues.work) as sqs:
        relay = Relay(pool=pool, sender=sqs, config=RelayConfig(poll_interval_s=0.05))
        await relay.run_once()
    assert {r["updated_by"] for r in _audit(db_dsn, "batch_item")} == {"relay"}

    children = [r["id"] for r in _audit(db_dsn, "page_import")]
    completed = await post_webhook(api.client, outcome(children[0]))
    assert completed.status_code == 200
    assert _audit(db_dsn, "page_import", f"id = '{children[0]}'")[0]["updated_by"] == "webhook"

    cancelled = await api.client.post(
        f"/v1/batches/{batch['id']}/cancel", headers=api.headers("alice-sub-7f3a")
    )
    assert cancelled.status_code == 200
    assert _audit(db_dsn, "batch")[0]["updated_by"] == "alice-sub-7f3a"
    deleted = await api.client.delete(
        f"/v1/batches/{batch['id']}", headers=api.headers("alice-sub-7f3a")
    )
    assert deleted.status_code in (200, 204)
    assert _audit(db_dsn, "batch")[0]["deleted_by"] == "alice-sub-7f3a"

    for table in AUDITED:
        for row in _audit(db_dsn, table):
            assert row["created_by"] and row["updated_by"], (table, row)
            assert row["deleted_by"] is None or row["deleted_by"], (table, row)
