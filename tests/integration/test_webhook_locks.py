"""The worker webhook never hangs on a row another transaction holds (issue 40): it answers
503 row-locked with Retry-After after `JOBRELAY_API_LOCK_TIMEOUT_S`, stores nothing, and the
same delivery succeeds once the lock goes."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from tests.batch_support import create_batch, outcome, page_items, post_webhook
from tests.harness import ApiHarness, run_cli

LOCKS = {
    "child FOR UPDATE": "SELECT 1 FROM page_import WHERE id = %(child)s FOR UPDATE",
    # Ending a child reads its item FOR SHARE (the count trigger) and settles it.
    "item FOR UPDATE": "SELECT 1 FROM batch_item WHERE job_id = %(child)s FOR UPDATE",
    "item FOR NO KEY UPDATE": "SELECT 1 FROM batch_item WHERE job_id = %(child)s FOR NO KEY UPDATE",
}


def _state(dsn: str, child: str) -> tuple[Any, ...]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT p.status, p.updated_by, bi.settled_at IS NOT NULL, "
            "(SELECT count(*) FROM webhook_delivery) "
            "FROM page_import p JOIN batch_item bi ON bi.job_id = p.id WHERE p.id = %s",
            (child,),
        ).fetchone()
    assert row is not None
    return tuple(row)


@pytest.mark.parametrize("lock", list(LOCKS))
async def test_a_locked_row_is_a_503_with_retry_after_then_the_same_delivery_applies_once(
    api: ApiHarness, db_dsn: str, lock: str
) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(2))
    items = (
        await api.client.get(f"/v1/batches/{batch['id']}/items", headers=api.headers())
    ).json()["items"]
    child = items[0]["jobId"]
    before = _state(db_dsn, child)
    assert before[0] == "0"
    async with await psycopg.AsyncConnection.connect(db_dsn) as other:
        await other.execute("BEGIN")
        await other.execute(LOCKS[lock], {"child": child})
        started = time.monotonic()
        response = await post_webhook(api.client, outcome(child), webhook_id="msg_locked")
        elapsed = time.monotonic() - started
        assert response.status_code == 503, response.text
        assert elapsed < 2.0, f"answered after {elapsed:.2f} s"
        assert response.headers["content-type"] == "application/problem+json"
        assert int(response.headers["retry-after"]) >= 1
        body = response.json()
        assert body["type"].endswith("/row-locked")
        assert "locked by another transaction" in body["detail"]
        assert _state(db_dsn, child) == before, "nothing stored, not even the delivery"
        # Other children are not held back by the locked one.
        other_child = items[1]["jobId"]
        assert (await post_webhook(api.client, outcome(other_child))).status_code == 200
        await other.execute("ROLLBACK")
    again = await post_webhook(api.client, outcome(child), webhook_id="msg_locked")
    assert again.status_code == 200, again.text
    assert again.json()["changed"] is True
    assert _state(db_dsn, child)[:3] == ("1", "webhook", True)
    replay = await post_webhook(api.client, outcome(child), webhook_id="msg_locked")
    assert (replay.status_code, replay.json()["changed"]) == (200, True), "stored answer"
    status = (await api.client.get(f"/v1/batches/{batch['id']}", headers=api.headers())).json()
    assert status["counts"]["completed"] == 2, "the child ended once"


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan"])
@pytest.mark.parametrize(
    ("command", "name"),
    [
        ("api", "JOBRELAY_API_LOCK_TIMEOUT_S"),
        ("relay", "JOBRELAY_RELAY_LOCK_TIMEOUT_S"),
        ("worker", "JOBRELAY_WORKER_LOCK_TIMEOUT_S"),
    ],
)
def test_a_lock_timeout_that_is_not_a_positive_number_is_one_line_and_exit_2(
    command: str, name: str, value: str
) -> None:
    result = run_cli(command, **{name: value})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0], result.stderr


async def test_cancelling_a_job_whose_row_another_session_locks_is_a_503_then_works(
    api: ApiHarness, db_dsn: str
) -> None:
    """The API's cancel waits at most `JOBRELAY_API_LOCK_TIMEOUT_S` for the job's row (issue
    40): a 503 row-locked with Retry-After, the job untouched; the diagnosis names the
    session; once the lock goes the same cancel succeeds."""
    h = api.headers("root", admin=True)
    created = await api.client.post("/v1/jobs", json={"type": "diag.noop"}, headers=h)
    job_id = created.json()["id"]
    with psycopg.connect(db_dsn, application_name="report") as holder:
        holder.execute("SELECT 1 FROM jobs WHERE id = %s FOR KEY SHARE", (job_id,))
        started = time.monotonic()
        refused = await api.client.post(f"/v1/jobs/{job_id}/cancel", headers=h)
        assert time.monotonic() - started < 30, "bounded, not hanging"
        assert refused.status_code == 503, refused.text
        assert refused.json()["type"].endswith("row-locked")
        assert refused.headers["Retry-After"] == "1"
        got = (await api.client.get(f"/v1/jobs/{job_id}", headers=h)).json()
        assert got["status"] == "pending"
        why = (await api.client.get(f"/v1/jobs/{job_id}/diagnosis", headers=h)).json()
        [locker] = why["rowLockedBy"]
        assert (locker["pid"], locker["application"]) == (holder.info.backend_pid, "report")
        holder.rollback()
    cancelled = await api.client.post(f"/v1/jobs/{job_id}/cancel", headers=h)
    assert (cancelled.status_code, cancelled.json()["status"]) == (200, "cancelled")
