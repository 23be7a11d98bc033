"""`jobrelay relay` as real processes: two relays share 2,000 items; a relay SIGKILLed after
SQS accepted its messages but before recording them (issue 6 acceptance)."""

from __future__ import annotations

import json
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from jobrelay.aws.clients import AwsEndpoint
from tests.batch_support import create_batch, drain, outcome, page_items, post_webhook
from tests.harness import ApiHarness, AwsTestResources, cli_env, jobrelay_command, wait_until

pytestmark = pytest.mark.slow


@contextmanager
def relay_process(
    tmp_path: Path, name: str, db_dsn: str, emulator_url: str, queue_url: str, **env: str
) -> Iterator[subprocess.Popen[bytes]]:
    log = (tmp_path / f"{name}.log").open("wb")
    process = subprocess.Popen(
        [*jobrelay_command(), "relay"],
        env=cli_env(
            DATABASE_URL=db_dsn,
            JOBRELAY_AWS_ENDPOINT_URL=emulator_url,
            JOBRELAY_SQS_QUEUE_NAME=queue_url.rsplit("/", 1)[-1],
            JOBRELAY_DATA_DIR=str(tmp_path),
            JOBRELAY_RELAY_POLL_INTERVAL_S="0.2",
            **env,
        ),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


def _scalar(dsn: str, sql: str, *params: object) -> object:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()  # type: ignore[arg-type]
    return row[0] if row else None


# 18-41 s of two relay processes: in make test-long (CI runs it), keeping make test in budget.
@pytest.mark.long
async def test_two_relays_deliver_2000_items_once_each(
    api: ApiHarness,
    db_dsn: str,
    emulator_url: str,
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
    tmp_path: Path,
) -> None:
    queue = aws_resources.queues.work
    scope = await api.tenant("alice")
    # Few calls in flight, so the drain keeps the emulator's queue short.
    # Nothing consumes here: a window of all the items (fair dispatch would hold 200 back).
    gentle = {
        "JOBRELAY_RELAY_WORKERS": "2",
        "JOBRELAY_RELAY_MAX_IN_FLIGHT": "2",
        "JOBRELAY_RELAY_ORG_WINDOW": "2000",
    }
    with (
        relay_process(tmp_path, "relay-a", db_dsn, emulator_url, queue, **gentle) as a,
        relay_process(tmp_path, "relay-b", db_dsn, emulator_url, queue, **gentle) as b,
    ):
        batch = await create_batch(api, scope, page_items(2000))
        wait_until(
            lambda: _scalar(
                db_dsn,
                "SELECT count(*) = 2000 FROM batch_item WHERE dispatched_at IS NOT NULL",
            ),
            timeout_s=180,
            what="2,000 items recorded as dispatched",
        )
        for process in (a, b):
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
    # Read back after the relays stopped: everything sent is in the queue, and no send can
    # race the drain's deletes (moto drops such a send; see `drain`).
    messages = await drain(aws, queue, expect=2000, timeout_s=120)
    with psycopg.connect(db_dsn) as conn:
        stored = dict(
            conn.execute(
                "SELECT job_id, message::text FROM batch_item WHERE batch_id = %s",
                (batch["id"],),
            ).fetchall()
        )
        attempts = conn.execute("SELECT max(dispatch_attempts) FROM batch_item").fetchone()
    sends = Counter(
        (
            json.loads(m["Body"])["page_import_id"],
            m["MessageAttributes"]["dispatch_attempt"]["StringValue"],
        )
        for m in messages
    )
    assert max(sends.values()) == 1, "an item was sent twice within one attempt"
    assert attempts == (1,)
    assert len(messages) == 2000
    for message in messages:
        child = json.loads(message["Body"])["page_import_id"]
        assert message["Body"] == stored[child]
    assert {child for child, _ in sends} == set(stored)


async def test_a_relay_killed_before_recording_is_resent_with_the_same_body(
    api: ApiHarness,
    db_dsn: str,
    emulator_url: str,
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
    tmp_path: Path,
) -> None:
    queue = aws_resources.queues.work
    scope = await api.tenant("alice")
    hold = psycopg.connect(db_dsn, autocommit=True)
    # The record step of the first relay blocks on an advisory lock this test holds, so the
    # relay is killed after SQS accepted the messages and before `dispatched_at` is written.
    hold.execute(
        "CREATE FUNCTION hold_record() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "PERFORM pg_advisory_xact_lock(4242); RETURN NEW; END $$"
    )
    hold.execute(
        "CREATE TRIGGER hold_record BEFORE UPDATE ON batch_item FOR EACH ROW "
        "WHEN (OLD.dispatched_at IS NULL AND NEW.dispatched_at IS NOT NULL) "
        "EXECUTE FUNCTION hold_record()"
    )
    hold.execute("SELECT pg_advisory_lock(4242)")
    batch = await create_batch(api, scope, page_items(5))
    lease = {"JOBRELAY_RELAY_LEASE_S": "2"}
    with relay_process(tmp_path, "doomed", db_dsn, emulator_url, queue, **lease) as doomed:
        wait_until(
            # The record statement itself: claims also wait on an advisory lock (the claim
            # lock of fair dispatch), briefly, before anything is sent.
            lambda: _scalar(
                db_dsn,
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' "
                "AND position('SET dispatched_at' in query) > 0",
            ),
            timeout_s=60,
            what="the relay to block in its record step",
        )
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=30)
    hold.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'"
    )
    hold.execute("DROP TRIGGER hold_record ON batch_item")
    hold.execute("SELECT pg_advisory_unlock(4242)")
    hold.close()
    assert _scalar(db_dsn, "SELECT count(*) FROM batch_item WHERE dispatched_at IS NULL") == 5

    with relay_process(tmp_path, "successor", db_dsn, emulator_url, queue, **lease):
        wait_until(
            lambda: _scalar(
                db_dsn,
                "SELECT count(*) = 5 FROM batch_item "
                "WHERE dispatched_at IS NOT NULL AND dispatch_attempts = 2",
            ),
            timeout_s=60,
            what="the items to be sent again after the lease expired",
        )
    messages = await drain(aws, queue)
    bodies: dict[str, set[str]] = {}
    attempts: Counter[str] = Counter()
    for message in messages:
        bodies.setdefault(json.loads(message["Body"])["page_import_id"], set()).add(message["Body"])
        attempts[message["MessageAttributes"]["dispatch_attempt"]["StringValue"]] += 1
    assert len(messages) == 10
    assert attempts == {"1": 5, "2": 5}
    assert all(len(b) == 1 for b in bodies.values()), "a resend changed the body"
    for child in bodies:
        for _ in range(2):  # the worker saw each message twice
            assert (await post_webhook(api.client, outcome(child))).status_code == 200
    status = (await api.client.get(f"/v1/batches/{batch['id']}", headers=api.headers())).json()
    assert status["status"] == "1"
    assert status["counts"]["completed"] == 5
