"""`jobrelay workflows list|show|cancel|retry` as an operator runs them, on a workflow made
of the product's diagnostic types."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid

import pytest

from jobrelay.api.routes.workflows import WorkflowOut
from jobrelay.bootstrap import jobs_registry
from jobrelay.db.pool import open_pool
from jobrelay.jobs.enqueue import Enqueuer
from jobrelay.jobs.workflows.graph import Workflow
from jobrelay.jobs.workflows.store import create_workflow
from jobrelay.settings import load_settings
from tests.harness import cli_env, jobrelay_command


def _workflows(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*jobrelay_command(), "workflows", *args],
        env=cli_env(DATABASE_URL=dsn),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _create(dsn: str, name: str) -> uuid.UUID:
    registry = jobs_registry(load_settings(default_env=None))

    async def run() -> uuid.UUID:
        pool = await open_pool(dsn, min_size=1, max_size=1)
        try:
            async with pool.connection() as conn:
                workflow = (
                    Workflow(name)
                    .step("first", "diag.noop", {})
                    .step("second", "diag.noop", {}, after=["first"])
                )
                created = await create_workflow(
                    conn, Enqueuer(registry, payload_limit_bytes=65536), workflow
                )
                return created.id
        finally:
            await pool.close()

    return asyncio.run(run())


@pytest.mark.slow
def test_list_show_cancel_and_retry_print_what_the_api_answers(db_dsn: str) -> None:
    workflow_id = str(_create(db_dsn, "nightly"))
    listed = _workflows(db_dsn, "list", "--name", "nightly")
    assert listed.returncode == 0, listed.stderr
    assert [w["id"] for w in json.loads(listed.stdout)["items"]] == [workflow_id]

    shown = json.loads(_workflows(db_dsn, "show", workflow_id).stdout)
    assert set(shown) == {f.alias for f in WorkflowOut.model_fields.values()}
    assert shown["counts"] == {"pending": 1, "held": 1}

    cancelled = json.loads(_workflows(db_dsn, "cancel", workflow_id).stdout)
    assert cancelled["status"] == "cancelled" and cancelled["cancelledBy"].startswith("cli:")
    retried = json.loads(_workflows(db_dsn, "retry", workflow_id).stdout)
    assert retried["status"] == "running" and retried["retries"] == 1

    bad = _workflows(db_dsn, "show", "not-a-uuid")
    assert bad.returncode == 2 and "invalid workflow id 'not-a-uuid'" in bad.stderr
    missing = _workflows(db_dsn, "cancel", str(uuid.uuid4()))
    assert missing.returncode != 0 and "no workflow" in missing.stderr
    status = _workflows(db_dsn, "list", "--status", "lost")
    assert status.returncode == 2 and "status" in status.stderr
