"""Kept batch counts verify themselves (issue 24): a repair script that writes children and
items in one statement (against the rule of migration 0012) leaves the kept counts wrong;
`jobrelay ops verify-counts` finds the drift (exit 1), `--repair` corrects it in the
transaction that found it, and the relay's sampling verifier repairs one by itself."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobrelay.aws.sender import OutgoingMessage, SendResult
from jobrelay.batches.relay import Relay
from jobrelay.batches.relay_config import RelayConfig
from jobrelay.db.pool import Connection
from tests.batch_support import create_batch, page_items
from tests.harness import ApiHarness, run_cli

ADDED = 5


def _write_together(dsn: str, batch_id: str, organization_id: int, project_id: int) -> None:
    """Children and their items in ONE statement, as an operator's repair SQL might."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "WITH children AS ("
            "  INSERT INTO page_import (id, organization_id, project_id, batch_id, request, "
            "    created_by, updated_by) "
            "  SELECT %(batch)s || '-repair-' || n, %(org)s, %(project)s, %(batch)s, '{}', "
            "    'ops', 'ops' FROM generate_series(1, %(n)s) AS n RETURNING id"
            ") "
            "INSERT INTO batch_item (id, batch_id, position, request, job_id, message, "
            "  created_by, updated_by) "
            "SELECT 'item-' || id, %(batch)s, 1000 + row_number() OVER (ORDER BY id), '{}', id, "
            "  '{}', 'ops', 'ops' FROM children",
            {"batch": batch_id, "org": organization_id, "project": project_id, "n": ADDED},
        )


async def _total(api: ApiHarness, batch_id: str) -> Any:
    body = (await api.client.get(f"/v1/batches/{batch_id}", headers=api.headers())).json()
    return body["counts"]["total"] if "counts" in body else body


async def test_a_drift_is_found_and_repaired(api: ApiHarness, db_dsn: str) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(3))
    other = await create_batch(api, scope, page_items(2))
    _write_together(db_dsn, batch["id"], scope.organization_id, scope.project_id)

    found = run_cli("ops", "verify-counts", DATABASE_URL=db_dsn)
    assert found.returncode == 1, found.stdout + found.stderr
    report = json.loads(found.stdout)
    assert report["checked"] == 2
    [drift] = report["drifted"]
    assert drift["batchId"] == batch["id"] and not drift["repaired"]
    assert drift["recount"]["total"] == 3 + ADDED
    assert drift["kept"]["total"] != drift["recount"]["total"], drift

    one = run_cli("ops", "verify-counts", "--batch", other["id"], DATABASE_URL=db_dsn)
    assert one.returncode == 0 and json.loads(one.stdout) == {"checked": 1, "drifted": []}
    missing = run_cli("ops", "verify-counts", "--batch", "nope", DATABASE_URL=db_dsn)
    assert missing.returncode == 2 and "no batch 'nope'" in missing.stderr + missing.stdout

    repaired = run_cli("ops", "verify-counts", "--repair", DATABASE_URL=db_dsn)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert [d["repaired"] for d in json.loads(repaired.stdout)["drifted"]] == [True]
    again = run_cli("ops", "verify-counts", DATABASE_URL=db_dsn)
    assert again.returncode == 0 and json.loads(again.stdout)["drifted"] == []
    assert await _total(api, batch["id"]) == 3 + ADDED


async def test_the_relay_repairs_a_drift_by_itself(
    api: ApiHarness, db_dsn: str, pool: AsyncConnectionPool[Connection]
) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(2))
    _write_together(db_dsn, batch["id"], scope.organization_id, scope.project_id)

    class Nothing:
        async def send_batch(self, messages: list[OutgoingMessage]) -> SendResult:
            return SendResult()

    relay = Relay(pool=pool, sender=Nothing(), config=RelayConfig(verify_sample=5))
    assert await relay.verify_counts() == 1  # one batch in this database: always sampled
    assert relay.metrics.count_drift._value.get() == 1
    assert await relay.verify_counts() == 0
    assert await _total(api, batch["id"]) == 2 + ADDED
