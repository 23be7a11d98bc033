"""`jobrelay.client` against a real `jobrelay api` process: every call of the sync client
and the async one, problem answers as typed errors with field paths, retries through a
crash of the database (503 with Retry-After until it is back), and idempotency keys under
concurrent repeats from independent clients (one resource created)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest

from jobrelay.auth.local_issuer import LocalIssuer
from jobrelay.aws.clients import AwsEndpoint, ensure_resources, s3_client
from jobrelay.client import (
    AsyncJobrelayClient,
    Conflict,
    InvalidRequest,
    JobrelayClient,
    NotFound,
    Retries,
    Unauthorized,
)
from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from tests.batch_support import outcome, signed
from tests.e2e_support import Stack, tenant
from tests.harness import AwsTestResources, PgServer, cli_env, free_port, wait_until
from tests.integration.test_code2wf import wf_outcome

FAST = Retries(attempts=3, base_s=0.05, cap_s=0.2)


@dataclass
class RunningApi:
    """One `jobrelay api` process and its database, shared by the tests of this module
    (each works in a tenant of its own and counts its own project's rows)."""

    stack: Stack
    dsn: str
    data_dir: Path
    resources: AwsTestResources

    @property
    def url(self) -> str:
        return self.stack.base_url

    def token(self, sub: str, *, admin: bool = False) -> str:
        # The API process verifies with the keys of its data directory: mint with them.
        return LocalIssuer(self.data_dir).mint(sub, admin=admin)

    def batches(self, project_id: int) -> int:
        """The project's batches (deleted ones included)."""
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute(
                "SELECT count(*) FROM batch WHERE project_id = %s", (project_id,)
            ).fetchone()
        assert row is not None
        return int(row[0])

    def webhook(self, body: dict[str, object]) -> None:
        raw, headers = signed(body)
        answer = httpx.post(f"{self.url}/v1/webhooks/worker", content=raw, headers=headers)
        assert answer.status_code == 200, answer.text


def _api(dsn: str, emulator_url: str, resources: AwsTestResources, data_dir: Path) -> Stack:
    env = cli_env(
        DATABASE_URL=dsn,
        JOBRELAY_DATA_DIR=str(data_dir),
        JOBRELAY_ENV="development",
        JOBRELAY_AWS_ENDPOINT_URL=emulator_url,
        JOBRELAY_S3_BUCKET=resources.bucket,
        JOBRELAY_SQS_QUEUE_NAME=resources.queues.work.rsplit("/", 1)[-1],
    )
    logs = data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stack = Stack(env=env, api_port=free_port(), logs=logs)
    stack.start("api")
    return stack


async def _resources(aws: AwsEndpoint) -> AwsTestResources:
    suffix = uuid.uuid4().hex[:12]
    queues = await ensure_resources(
        aws,
        queue_name=f"work-{suffix}",
        dlq_name=f"dlq-{suffix}",
        bucket=f"results-{suffix}",
        max_receive_count=3,
    )
    return AwsTestResources(queues=queues, bucket=f"results-{suffix}")


@pytest.fixture(scope="module")
def running_api(
    pg_server: PgServer, emulator_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningApi]:
    name = pg_server.create()
    resources = asyncio.run(_resources(AwsEndpoint(region="us-east-1", endpoint_url=emulator_url)))
    data_dir = tmp_path_factory.mktemp("client-api")
    stack = _api(pg_server.dsn(name), emulator_url, resources, data_dir)
    try:
        yield RunningApi(stack, pg_server.dsn(name), data_dir, resources)
    finally:
        stack.stop_all()
        pg_server.drop(name)


def _tenant(running_api: RunningApi) -> tuple[int, str]:
    """A project of a new member (a name of its own: the database is shared)."""
    sub = f"user-{uuid.uuid4().hex[:8]}"
    return tenant(running_api.dsn, sub), sub


async def _store_result(aws: AwsEndpoint, bucket: str, key: str) -> None:
    async with s3_client(aws) as s3:
        await s3.put_object(Bucket=bucket, Key=key, Body=b'{"frames": [1]}')


def test_every_call_of_the_sync_client(running_api: RunningApi, aws: AwsEndpoint) -> None:
    project_id, sub = _tenant(running_api)
    with JobrelayClient(running_api.url, token=running_api.token(sub), retries=FAST) as alice:
        me = alice.get_me()
        assert me.sub == sub and me.organizations[0].projects[0].id == project_id

        batch = alice.create_batch(project_id, "page_import", [{"url": "https://a.test/"}])
        assert (batch.type, batch.status, batch.counts.total) == ("page_import", "0", 1)
        assert alice.get_batch(batch.id) == batch
        [item] = alice.list_batch_items(batch.id).items
        assert (item.position, item.state) == (0, "queued")
        page_import = alice.get_page_import(item.job_id)
        assert page_import.status == "0" and page_import.request == {"url": "https://a.test/"}
        running_api.webhook(outcome(item.job_id))
        assert alice.get_page_import(item.job_id).status == "1"

        designs = alice.create_batch(project_id, "code2des", [{"html": "<p>x</p>"}])
        [design_item] = alice.list_batch_items(designs.id, limit=10).items
        assert alice.get_code2des(design_item.job_id).request == {"html": "<p>x</p>"}
        assert alice.cancel_batch(designs.id).status == "3"
        alice.delete_batch(designs.id)
        with pytest.raises(NotFound):
            alice.get_batch(designs.id)

        wf = alice.create_code2wf(
            project_id, page_import_id=item.job_id, figma_file_key="FILE", screen_id="home"
        )
        assert wf.status == "0" and wf.placement_target is None
        assert alice.get_code2wf(wf.id) == wf
        with pytest.raises(Conflict):
            alice.get_code2wf_result(wf.id)  # still processing
        key = f"code2wf/{wf.id}/attempt-1/wireframe.json"
        asyncio.run(_store_result(aws, running_api.resources.bucket, key))
        running_api.webhook(wf_outcome(wf.id, resultUrl=key))
        [listed] = alice.list_code2wf(project_id, figma_file_key="FILE", status="1").items
        assert listed.id == wf.id
        assert alice.get_code2wf_result(wf.id) == b'{"frames": [1]}'
        assert alice.materialize_code2wf(wf.id).materialized_at is not None
        alice.delete_code2wf(wf.id)

        with pytest.raises(InvalidRequest) as refused:
            alice.create_batch(project_id, "page_import", [{"url": "https://ok.test/"}, {}])
        assert refused.value.field_paths == ["items.1"], refused.value
        assert running_api.batches(project_id) == 2  # nothing of the refused batch

    with JobrelayClient(
        running_api.url, token=running_api.token("ops", admin=True), retries=FAST
    ) as ops:
        enqueued = ops.enqueue_job("diag.noop", {})
        assert enqueued.outcome == "created" and enqueued.job.status == "pending"
        job = ops.get_job(enqueued.id)
        assert job.type == "diag.noop" and job.max_attempts >= 1
        assert enqueued.id in [j.id for j in ops.list_jobs(type="diag.noop").items]
        assert ops.cancel_job(enqueued.id).status == "cancelled"
        assert ops.list_job_attempts(enqueued.id) == []  # cancelled before any attempt
        assert ops.retry_job(enqueued.id).status == "pending"
        with pytest.raises(InvalidRequest) as bad_job:
            ops.enqueue_job("diag.sleep", {"seconds": "long"})
        assert bad_job.value.field_paths == ["payload.seconds"]

    with (
        JobrelayClient(running_api.url, token="not-a-token", retries=FAST) as nobody,
        pytest.raises(Unauthorized),
    ):
        nobody.get_me()


async def test_the_async_client(running_api: RunningApi) -> None:
    project_id, sub = _tenant(running_api)
    admin = running_api.token("ops", admin=True)
    async with AsyncJobrelayClient(running_api.url, token=admin, retries=FAST) as ops:
        enqueued = await ops.enqueue_job("diag.noop", {}, priority=7)
        assert (await ops.get_job(enqueued.id)).priority == 7
        assert enqueued.id in [j.id for j in (await ops.list_jobs(status="pending")).items]
        assert (await ops.cancel_job(enqueued.id)).finished
        assert (await ops.wait_for_job(enqueued.id, timeout_s=5)).status == "cancelled"
    alice_token = running_api.token(sub)
    asked: list[str] = []

    def fresh_token() -> str:  # a function: asked once per request
        asked.append(alice_token)
        return alice_token

    async with AsyncJobrelayClient(running_api.url, token=fresh_token, retries=FAST) as alice:
        batch = await alice.create_batch(project_id, "code2des", [{"html": "<b>y</b>"}])
        assert (await alice.get_batch(batch.id)).counts.queued == 1
        assert (await alice.cancel_batch(batch.id)).status == "3"
        assert (await alice.wait_for_batch(batch.id, timeout_s=5)).finished
        with pytest.raises(NotFound):
            await alice.get_code2wf(str(uuid.uuid4()))
    assert len(asked) >= 5


def test_idempotency_keys_under_concurrent_repeats(running_api: RunningApi) -> None:
    project_id, sub = _tenant(running_api)
    alice_token = running_api.token(sub)
    items = [{"url": f"https://p.test/{i}"} for i in range(20)]

    def create(_: int) -> str:
        # An independent client (its own connections) per repeat.
        with JobrelayClient(running_api.url, token=alice_token, retries=FAST) as client:
            return client.create_batch(project_id, "page_import", items, idempotency_key="k1").id

    with ThreadPoolExecutor(max_workers=6) as pool:
        ids = set(pool.map(create, range(12)))
    assert len(ids) == 1
    assert running_api.batches(project_id) == 1

    async def create_async() -> set[str]:
        async with AsyncJobrelayClient(running_api.url, token=alice_token, retries=FAST) as c:
            answers = await asyncio.gather(
                *(
                    c.create_batch(project_id, "code2des", [{"html": "z"}], idempotency_key="k2")
                    for _ in range(8)
                )
            )
        return {b.id for b in answers}

    assert len(asyncio.run(create_async())) == 1
    assert running_api.batches(project_id) == 2

    with JobrelayClient(running_api.url, token=alice_token, retries=FAST) as client:
        with pytest.raises(InvalidRequest) as reused:
            client.create_batch(project_id, "page_import", items[:1], idempotency_key="k1")
        # Without a key of yours, each call has its own: two calls, two batches.
        client.create_batch(project_id, "code2des", [{"html": "z"}])
        client.create_batch(project_id, "code2des", [{"html": "z"}])
    assert reused.value.field_paths == ["Idempotency-Key"]
    assert running_api.batches(project_id) == 4


def test_retries_ride_out_a_database_crash(
    tmp_path: Path, emulator_url: str, aws_resources: AwsTestResources
) -> None:
    server = EmbeddedPostgres(tmp_path / "pgdata")  # this test's own server: it crashes it
    dsn = server.start()
    migrate.upgrade(dsn)
    stack = _api(dsn, emulator_url, aws_resources, tmp_path / "data")
    answers: list[int] = []
    try:
        project_id = tenant(dsn, "alice")
        http = httpx.Client(
            base_url=stack.base_url,
            timeout=10,
            event_hooks={"response": [lambda response: answers.append(response.status_code)]},
        )
        patient = Retries(attempts=60, base_s=0.1, cap_s=0.5, max_retry_after_s=1.0)
        client = JobrelayClient(
            token=LocalIssuer(tmp_path / "data").mint("alice"), retries=patient, http=http
        )
        server.stop(mode="immediate")  # a crash: the API answers 503 with Retry-After
        created: list[str] = []
        creating = threading.Thread(
            target=lambda: created.append(
                client.create_batch(project_id, "page_import", [{"url": "https://x.test/"}]).id
            )
        )
        creating.start()
        wait_until(lambda: answers.count(503) >= 2, timeout_s=60, what="503s while down")
        server.start()
        creating.join(timeout=120)
        assert not creating.is_alive()
        with client:
            assert client.get_batch(created[0]).counts.total == 1
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT count(*) FROM batch").fetchone()
    finally:
        stack.stop_all()
        server.stop()
    # Down: 503s; back: the creation's 201 (then the read's 200). One batch.
    assert answers.count(503) >= 2 and answers[-2:] == [201, 200], answers
    assert row == (1,)
