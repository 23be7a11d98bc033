"""Code2WF (issue 7) against real PostgreSQL and the SQS/S3 emulator: creation rules, one
transaction for row and dispatch job, dispatch retries, the attempt-fenced webhook,
discovery, result download, materialization, soft delete."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiobotocore.session import AioSession

from jobrelay import content
from jobrelay.aws.clients import AwsEndpoint, s3_client
from jobrelay.aws.sender import MessageSender, OutgoingMessage, SendResult
from jobrelay.aws.sqs_sender import SqsSender
from jobrelay.domain.retry import RetryPolicy
from jobrelay.generations import code2wf_dispatch
from jobrelay.generations.code2wf import Code2WfService, NewGeneration, fail_orphaned_generations
from jobrelay.jobs.worker import Worker, WorkerConfig
from tests.batch_support import create_batch, drain, outcome, page_items, post_webhook
from tests.harness import ApiHarness, AwsTestResources, api_harness
from tests.jobs_support import eventually

FAST_RETRY = RetryPolicy(max_attempts=3, base_s=0.01, cap_s=0.05)


@pytest.fixture
async def api(
    db_dsn: str, issuer_dir: Path, emulator_url: str, aws_resources: AwsTestResources
) -> AsyncIterator[ApiHarness]:
    async with api_harness(
        db_dsn,
        issuer_dir,
        aws={"endpoint_url": emulator_url, "s3_bucket": aws_resources.bucket},
        sqs={"queue_name": aws_resources.queues.work.rsplit("/", 1)[-1]},
    ) as harness:
        yield harness


@asynccontextmanager
async def dispatching(api: ApiHarness, send: MessageSender | None = None) -> AsyncIterator[None]:
    """A jobs worker whose Code2WF dispatch sends with `send` (default: the test queue)."""
    settings = api.services.settings
    queue = SqsSender(api.services.aws, queue_name=settings.sqs.queue_name)
    group = content.job_types()
    group.include(code2wf_dispatch.job_types(send or queue, retry=FAST_RETRY))
    registry = group.registry()
    worker = Worker(
        pool=api.services.pool,
        registry=registry,
        config=WorkerConfig(concurrency=2, poll_interval_s=0.01, lease_s=10.0),
    )
    await worker.start()
    try:
        yield
    finally:
        await worker.stop()
        await queue.aclose()


async def completed_page_import(api: ApiHarness, sub: str = "alice") -> tuple[Any, str]:
    scope = await api.tenant(sub)
    return scope, await page_import_in(api, scope, sub=sub)


async def page_import_in(
    api: ApiHarness, scope: Any, *, sub: str, status: str = "completed"
) -> str:
    batch = await create_batch(api, scope, page_items(1), sub=sub)
    items = await api.client.get(f"/v1/batches/{batch['id']}/items", headers=api.headers(sub))
    page_import_id = str(items.json()["items"][0]["jobId"])
    if status != "processing":
        answer = await post_webhook(api.client, outcome(page_import_id, status))
        assert answer.status_code == 200, answer.text
    return page_import_id


def request(page_import_id: str, **extra: Any) -> dict[str, Any]:
    return {"pageImportId": page_import_id, "figmaFileKey": "FILE1", "screenId": "desktop", **extra}


async def count(api: ApiHarness, sql: str) -> int:
    async with api.services.pool.connection() as conn:
        row = await (await conn.execute(sql)).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return int(str(next(iter(row.values()))))


async def generation(api: ApiHarness, code2wf_id: str, sub: str = "alice") -> dict[str, Any]:
    response = await api.client.get(f"/v1/code2wf/{code2wf_id}", headers=api.headers(sub))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_valid_post_creates_row_and_job_and_the_message_carries_id_and_attempt(
    api: ApiHarness, aws: AwsEndpoint, aws_resources: AwsTestResources
) -> None:
    scope, page_import_id = await completed_page_import(api)
    created = await api.client.post(
        f"/v1/projects/{scope.project_id}/code2wf",
        json=request(page_import_id, placementTarget="12:34"),
        headers=api.headers("alice"),
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["status"], body["attempt"], body["createdBy"]) == ("0", 1, "alice")
    assert await count(api, "SELECT count(*) FROM all_jobs WHERE type = 'code2wf.dispatch'") == 1

    async with dispatching(api):
        messages = await drain(aws, aws_resources.queues.work, expect=1, timeout_s=20)
    (message,) = [json.loads(m["Body"]) for m in messages]
    assert message["code2wf_id"] == body["code2wfId"]
    assert message["attempt"] == 1
    assert message["kind"] == "code2wf"
    assert message["page_import_id"] == page_import_id
    assert message["placement_target"] == "12:34"
    assert message["page_import_result_url"] == f"results/{page_import_id}/manifest.json"


async def test_two_identical_posts_make_two_rows_and_two_messages(
    api: ApiHarness, aws: AwsEndpoint, aws_resources: AwsTestResources
) -> None:
    scope, page_import_id = await completed_page_import(api)
    ids = []
    for _ in range(2):
        response = await api.client.post(
            f"/v1/projects/{scope.project_id}/code2wf",
            json=request(page_import_id),
            headers=api.headers("alice"),
        )
        assert response.status_code == 201
        ids.append(response.json()["code2wfId"])
    assert len(set(ids)) == 2
    async with dispatching(api):
        messages = await drain(aws, aws_resources.queues.work, expect=2, timeout_s=20)
    assert sorted(json.loads(m["Body"])["code2wf_id"] for m in messages) == sorted(ids)


async def test_a_failure_after_the_insert_leaves_neither_row_nor_job(api: ApiHarness) -> None:
    scope, page_import_id = await completed_page_import(api)

    async def explode(code2wf_id: str) -> None:
        raise RuntimeError(f"injected after inserting {code2wf_id}")

    service = Code2WfService(api.services.pool, api.services.jobs, failpoint=explode)

    with pytest.raises(RuntimeError, match="injected"):
        await service.create(
            scope, NewGeneration(page_import_id, "FILE1", "desktop"), actor="alice"
        )
    assert await count(api, "SELECT count(*) FROM code2wf") == 0
    assert await count(api, "SELECT count(*) FROM all_jobs WHERE type = 'code2wf.dispatch'") == 0


@pytest.mark.parametrize("state", ["processing", "failed", "deleted", "other project"])
async def test_creation_needs_a_completed_visible_page_import_of_the_project(
    api: ApiHarness, state: str
) -> None:
    scope = await api.tenant("alice")
    status = {"processing": "processing", "failed": "failed"}.get(state, "completed")
    page_import_id = await page_import_in(api, scope, sub="alice", status=status)
    target_project = scope.project_id
    if state == "deleted":
        async with api.services.pool.connection() as conn:
            await conn.execute(
                "UPDATE page_import SET deleted_at = now(), deleted_by = 'x' WHERE id = %s",
                (page_import_id,),
            )
    if state == "other project":
        other = await api.services.tenancy.create_project(scope.organization_id, "p2", actor="t")
        target_project = int(other["id"])
    response = await api.client.post(
        f"/v1/projects/{target_project}/code2wf",
        json=request(page_import_id),
        headers=api.headers("alice"),
    )
    assert response.status_code == (409 if state in {"processing", "failed"} else 422)
    assert response.headers["content-type"] == "application/problem+json"
    if response.status_code == 422:
        assert response.json()["errors"][0]["path"] == "pageImportId"
    assert await count(api, "SELECT count(*) FROM code2wf") == 0
    assert await count(api, "SELECT count(*) FROM all_jobs WHERE type = 'code2wf.dispatch'") == 0


async def test_a_page_import_of_another_organization_is_not_visible(api: ApiHarness) -> None:
    _, theirs = await completed_page_import(api, "eve")
    mine = await api.tenant("alice")
    response = await api.client.post(
        f"/v1/projects/{mine.project_id}/code2wf",
        json=request(theirs),
        headers=api.headers("alice"),
    )
    assert response.status_code == 422
    assert await count(api, "SELECT count(*) FROM code2wf") == 0


async def test_dispatch_failing_until_retries_are_used_up_fails_the_row(api: ApiHarness) -> None:
    scope, page_import_id = await completed_page_import(api)
    sends = 0

    class Unavailable:
        async def send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult:
            nonlocal sends
            sends += 1
            raise ConnectionError("SQS is down")

    failed_id = (
        await api.client.post(
            f"/v1/projects/{scope.project_id}/code2wf",
            json=request(page_import_id),
            headers=api.headers("alice"),
        )
    ).json()["code2wfId"]
    async with dispatching(api, Unavailable()):

        async def failed() -> dict[str, Any] | None:
            row = await generation(api, failed_id)
            return row if row["status"] == "2" else None

        row = await eventually(failed, what="the generation to fail")
    max_attempts = await count(
        api, "SELECT max_attempts FROM all_jobs WHERE type = 'code2wf.dispatch'"
    )
    assert sends == max_attempts, "every attempt tried to send, then it gave up"
    assert f"dispatch failed after {max_attempts} attempts" in row["errorMessage"]
    assert "SQS is down" not in row["errorMessage"], "a safe message, not the raw error"
    assert row["updatedBy"] == "worker", "a backend write carries its actor name"

    retried = await api.client.post(
        f"/v1/projects/{scope.project_id}/code2wf",
        json=request(page_import_id),
        headers=api.headers("alice"),
    )
    assert retried.status_code == 201
    assert retried.json()["code2wfId"] != failed_id
    assert (await generation(api, failed_id))["status"] == "2", "the failed row stays as it was"


async def _created(api: ApiHarness, scope: Any, page_import_id: str, **extra: Any) -> str:
    response = await api.client.post(
        f"/v1/projects/{scope.project_id}/code2wf",
        json=request(page_import_id, **extra),
        headers=api.headers("alice"),
    )
    assert response.status_code == 201, response.text
    return str(response.json()["code2wfId"])


def wf_outcome(code2wf_id: str, result: str = "completed", **extra: Any) -> dict[str, Any]:
    body = {**outcome(code2wf_id, result, kind="code2wf"), "attempt": 1, **extra}
    if result == "completed":
        body.setdefault("flagCount", 2)
    return body


async def test_webhook_attempt_fence_materialize_and_result(
    api: ApiHarness, aws: AwsEndpoint, aws_resources: AwsTestResources
) -> None:
    scope, page_import_id = await completed_page_import(api)
    code2wf_id = await _created(api, scope, page_import_id)

    wrong_attempt = await post_webhook(api.client, wf_outcome(code2wf_id, attempt=2))
    assert wrong_attempt.status_code == 409
    assert "attempt 2" in wrong_attempt.json()["detail"]
    assert (await generation(api, code2wf_id))["status"] == "0", "nothing changed"

    early = await api.client.post(
        f"/v1/code2wf/{code2wf_id}/materialize", headers=api.headers("alice")
    )
    assert early.status_code == 409
    not_yet = await api.client.get(f"/v1/code2wf/{code2wf_id}/result", headers=api.headers("alice"))
    assert not_yet.status_code == 409

    key = f"code2wf/{code2wf_id}/attempt-1/wireframe.json"
    async with s3_client(aws) as s3:
        await s3.put_object(Bucket=aws_resources.bucket, Key=key, Body=b'{"frames": [1, 2]}')
    done = await post_webhook(api.client, wf_outcome(code2wf_id, resultUrl=key, flagCount=3))
    assert done.status_code == 200, done.text
    again = await post_webhook(api.client, wf_outcome(code2wf_id, resultUrl=key, flagCount=3))
    assert again.status_code == 200 and again.json()["changed"] is False
    conflicting = await post_webhook(api.client, wf_outcome(code2wf_id, "failed"))
    assert conflicting.status_code == 409
    row = await generation(api, code2wf_id)
    assert (row["status"], row["flagCount"], row["resultUrl"]) == ("1", 3, key)
    assert (row["createdBy"], row["updatedBy"]) == ("alice", "webhook")

    result = await api.client.get(f"/v1/code2wf/{code2wf_id}/result", headers=api.headers("alice"))
    assert result.status_code == 200
    assert result.json() == {"frames": [1, 2]}

    first = await api.client.post(
        f"/v1/code2wf/{code2wf_id}/materialize", headers=api.headers("alice")
    )
    second = await api.client.post(
        f"/v1/code2wf/{code2wf_id}/materialize", headers=api.headers("alice")
    )
    assert first.status_code == second.status_code == 200
    assert first.json()["materializedAt"] is not None
    assert first.json()["materializedAt"] == second.json()["materializedAt"]

    foreign = await api.client.get(f"/v1/code2wf/{code2wf_id}", headers=api.headers("eve"))
    assert foreign.status_code == 404
    deleted = await api.client.delete(f"/v1/code2wf/{code2wf_id}", headers=api.headers("alice"))
    assert deleted.status_code == 204
    gone = await api.client.get(f"/v1/code2wf/{code2wf_id}", headers=api.headers("alice"))
    assert gone.status_code == 404


async def test_discovery_returns_exactly_the_matching_visible_rows_across_pages(
    api: ApiHarness,
) -> None:
    scope, page_import_id = await completed_page_import(api)
    matching = [await _created(api, scope, page_import_id) for _ in range(7)]
    other_file = await api.client.post(
        f"/v1/projects/{scope.project_id}/code2wf",
        json={**request(page_import_id), "figmaFileKey": "FILE2"},
        headers=api.headers("alice"),
    )
    assert other_file.status_code == 201
    done = matching.pop()
    assert (await post_webhook(api.client, wf_outcome(done))).status_code == 200
    removed = matching.pop()
    await api.client.delete(f"/v1/code2wf/{removed}", headers=api.headers("alice"))

    async def pages(**query: Any) -> list[str]:
        found: list[str] = []
        after: str | None = None
        while True:
            params = {"figmaFileKey": "FILE1", "limit": 2, **query}
            if after:
                params["after"] = after
            response = await api.client.get(
                f"/v1/projects/{scope.project_id}/code2wf",
                params=params,
                headers=api.headers("alice"),
            )
            assert response.status_code == 200, response.text
            body = response.json()
            found += [item["code2wfId"] for item in body["items"]]
            after = body["nextAfter"]
            if after is None:
                return found

    assert await pages(status="0") == sorted(matching)
    assert await pages(status="1") == [done]
    assert await pages() == sorted([*matching, done])


async def test_discovery_is_served_by_the_org_project_file_status_index(api: ApiHarness) -> None:
    scope, page_import_id = await completed_page_import(api)
    async with api.services.pool.connection() as conn:
        await conn.execute(
            """
            INSERT INTO code2wf (id, organization_id, project_id, page_import_id, figma_file_key,
                                 screen_id, created_by, updated_by)
            SELECT gen_random_uuid()::text, %s, %s, %s, 'FILE' || (g %% 200), 's', 'a', 'a'
            FROM generate_series(1, 5000) AS g
            """,
            (scope.organization_id, scope.project_id, page_import_id),
        )
        await conn.execute("ANALYZE code2wf")
        plan = await (
            await conn.execute(
                "EXPLAIN (FORMAT JSON) SELECT * FROM code2wf WHERE organization_id = %s "
                "AND project_id = %s AND figma_file_key = 'FILE7' AND status = '0' "
                "AND deleted_at IS NULL ORDER BY id LIMIT 51",
                (scope.organization_id, scope.project_id),
            )
        ).fetchone()
    assert plan is not None
    assert "code2wf_org_project_file_status_idx" in json.dumps(plan)


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"figmaFileKey": "F", "screenId": "s"}, "pageImportId"),
        ({"pageImportId": "p", "screenId": "s"}, "figmaFileKey"),
        ({"pageImportId": "p", "figmaFileKey": "F" * 256, "screenId": "s"}, "figmaFileKey"),
        ({"pageImportId": "p", "figmaFileKey": "F", "screenId": ""}, "screenId"),
        ({"pageImportId": "p", "figmaFileKey": "F", "screenId": "s" * 256}, "screenId"),
    ],
)
async def test_bad_bodies_are_422_naming_the_field(
    api: ApiHarness, body: dict[str, Any], path: str
) -> None:
    scope = await api.tenant("alice")
    response = await api.client.post(
        f"/v1/projects/{scope.project_id}/code2wf", json=body, headers=api.headers("alice")
    )
    assert response.status_code == 422
    assert path in [e["path"] for e in response.json()["errors"]]


async def test_unknown_status_filter_is_422(api: ApiHarness) -> None:
    scope = await api.tenant("alice")
    response = await api.client.get(
        f"/v1/projects/{scope.project_id}/code2wf",
        params={"figmaFileKey": "F", "status": "9"},
        headers=api.headers("alice"),
    )
    assert response.status_code == 422
    assert "status" in [e["path"] for e in response.json()["errors"]]


async def test_a_generation_whose_dispatch_job_died_is_failed_by_the_sweep(
    api: ApiHarness,
) -> None:
    scope, page_import_id = await completed_page_import(api)
    code2wf_id = await _created(api, scope, page_import_id)
    async with api.services.pool.connection() as conn:
        await conn.execute(
            "UPDATE jobs SET status = 'failed', failure_kind = 'lease_expired', "
            "finished_at = now() WHERE type = 'code2wf.dispatch'"
        )
    assert await fail_orphaned_generations(api.services.pool) == [code2wf_id]
    row = await generation(api, code2wf_id)
    assert row["status"] == "2"
    assert row["errorMessage"] == "dispatch did not complete (failed)"
    assert await fail_orphaned_generations(api.services.pool) == []


async def test_the_dispatch_of_many_generations_opens_one_sqs_client(
    api: ApiHarness,
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The process's own wiring (build_services): every dispatch sends through one client.
    opened: list[str] = []
    create_client = AioSession.create_client

    def counting(self: AioSession, service_name: str, *args: Any, **kwargs: Any) -> Any:
        opened.append(service_name)
        return create_client(self, service_name, *args, **kwargs)

    monkeypatch.setattr(AioSession, "create_client", counting)
    scope, page_import_id = await completed_page_import(api)
    created = [await _created(api, scope, page_import_id, screenId=f"s{n}") for n in range(4)]
    worker = api.services.jobs.worker(
        WorkerConfig(concurrency=2, poll_interval_s=0.01, lease_s=10.0)
    )
    await worker.start()
    try:

        async def dispatched() -> int:
            done = await count(
                api,
                "SELECT count(*) FROM all_jobs WHERE type = 'code2wf.dispatch' "
                "AND status = 'completed' AND (result ->> 'dispatched')::boolean",
            )
            return done if done == len(created) else 0

        await eventually(dispatched, what="every generation dispatched")
    finally:
        await worker.stop()
    assert opened.count("sqs") == 1, opened
    messages = await drain(aws, aws_resources.queues.work, expect=len(created), timeout_s=20)
    assert sorted(json.loads(m["Body"])["code2wf_id"] for m in messages) == sorted(created)
    assert all("MessageAttributes" not in m for m in messages), "no dispatch_attempt attribute"
