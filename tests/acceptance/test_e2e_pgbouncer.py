"""The end-to-end flow through PgBouncer in transaction pooling mode (issue 13): `jobrelay
api`, `relay`, `worker` and `sqs-worker` as real processes whose DATABASE_URL is the
bouncer, with the direct URL (LISTEN, migrations) on the server itself. A batch of page
imports goes through the relay, SQS, the reference worker and signed webhooks; a Code2WF
generation goes through the jobs engine's worker."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from jobrelay.aws.clients import AwsEndpoint
from tests.acceptance.test_e2e_stack import (
    _code2wf_from_first_item,
    _manifests_match_their_hashes,
    _submit,
    _terminal,
)
from tests.e2e_support import page_server, running_stack, tenant, token
from tests.harness import AwsTestResources, PgBouncer

pytestmark = pytest.mark.long


def test_batch_and_code2wf_end_to_end_through_pgbouncer_transaction_pooling(
    db_dsn: str,
    pgbouncer: PgBouncer,
    emulator_url: str,
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
    tmp_path: Path,
) -> None:
    dbname = psycopg.conninfo.conninfo_to_dict(db_dsn)["dbname"]
    pooled = pgbouncer.dsn(str(dbname))
    project_id = tenant(db_dsn, "alice")
    headers = {"Authorization": f"Bearer {token(tmp_path, 'alice')}"}
    with (
        running_stack(
            pooled,
            emulator_url,
            aws_resources,
            tmp_path,
            JOBRELAY_DATABASE_POOLER="transaction",
            JOBRELAY_DATABASE_DIRECT_URL=db_dsn,
        ) as stack,
        page_server(20) as urls,
    ):
        batch_id = _submit(stack, headers, project_id, urls)
        batch = _terminal(stack, headers, batch_id)
        assert batch["status"] == "1", batch
        assert batch["counts"]["completed"] == 20

        row = _code2wf_from_first_item(stack, headers, project_id, batch_id)
        assert row["status"] == "1", row
        logs = {name: stack.log(name) for name in ("api", "relay", "worker")}
    assert asyncio.run(_manifests_match_their_hashes(db_dsn, aws, aws_resources.bucket)) == 20
    for name, text in logs.items():
        assert "prepared statement" not in text, (name, text)
        assert "listen_unavailable" not in text, (name, text)  # the direct URL LISTENs
    # The API, relay and worker reached the database only through the bouncer (the direct
    # URL serves LISTEN and migrations): their connections are the bouncer's, not ours.
    with psycopg.connect(pgbouncer.dsn("pgbouncer"), autocommit=True) as admin:
        pools = admin.execute("SHOW POOLS").fetchall()
    assert any(row[0] == dbname for row in pools), pools
