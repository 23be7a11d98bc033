"""`Idempotency-Key` on the POSTs that create: a repeat returns the first answer, concurrent
repeats (each on its own pooled connection) create one resource, another request with the
key is a 422 naming the header, a failed creation keeps nothing, keys are per caller and
expire after 24 hours."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from jobrelay.idempotency import purge_expired
from tests.batch_support import page_items
from tests.harness import ApiHarness
from tests.integration.test_code2wf import completed_page_import, count, request


async def _post(
    api: ApiHarness, path: str, body: dict[str, Any], key: str | None, sub: str = "alice"
) -> httpx.Response:
    headers = {**api.headers(sub, admin=True), **({"Idempotency-Key": key} if key else {})}
    return await api.client.post(path, json=body, headers=headers)


async def test_a_repeated_batch_creation_returns_the_first_answer(api: ApiHarness) -> None:
    scope = await api.tenant("alice")
    path = f"/v1/projects/{scope.project_id}/batches"
    body = {"type": "page_import", "items": page_items(3)}
    first = await _post(api, path, body, "k-1")
    again = await _post(api, path, body, "k-1")
    assert first.status_code == again.status_code == 201, again.text
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert await count(api, "SELECT count(*) FROM batch") == 1
    assert await count(api, "SELECT count(*) FROM batch_item") == 3
    # Without a key every POST creates, as before.
    assert (await _post(api, path, body, None)).status_code == 201
    assert (await _post(api, path, body, None)).status_code == 201
    assert await count(api, "SELECT count(*) FROM batch") == 3


async def test_concurrent_repeats_create_one_resource(api: ApiHarness) -> None:
    scope = await api.tenant("alice")
    path = f"/v1/projects/{scope.project_id}/batches"
    body = {"type": "page_import", "items": page_items(50)}
    answers = await asyncio.gather(*(_post(api, path, body, "same") for _ in range(8)))
    assert {a.status_code for a in answers} == {201}, [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert sum(a.headers.get("Idempotent-Replayed") == "true" for a in answers) == 7
    assert await count(api, "SELECT count(*) FROM batch") == 1
    assert await count(api, "SELECT count(*) FROM batch_item") == 50


async def test_another_request_with_the_key_is_a_422_naming_the_header(api: ApiHarness) -> None:
    scope = await api.tenant("alice")
    path = f"/v1/projects/{scope.project_id}/batches"
    assert (await _post(api, path, {"type": "page_import", "items": page_items(1)}, "k")).is_success
    other = await _post(api, path, {"type": "page_import", "items": page_items(2)}, "k")
    assert other.status_code == 422
    assert other.headers["content-type"].startswith("application/problem+json")
    [error] = other.json()["errors"]
    assert error["path"] == "Idempotency-Key"
    assert "another method, path or body" in error["message"]
    # The same key on another operation is another request too.
    job = await _post(api, "/v1/jobs", {"type": "diag.noop", "payload": {}}, "k")
    assert job.status_code == 422 and job.json()["errors"][0]["path"] == "Idempotency-Key"
    assert await count(api, "SELECT count(*) FROM batch") == 1
    assert await count(api, "SELECT count(*) FROM all_jobs") == 0


async def test_a_failed_creation_keeps_nothing(api: ApiHarness) -> None:
    scope = await api.tenant("alice")
    path = f"/v1/projects/{scope.project_id}/batches"
    bad = await _post(api, path, {"type": "page_import", "items": [{"url": "nope"}]}, "k")
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"].startswith("items.0")
    assert await count(api, "SELECT count(*) FROM idempotency_key") == 0
    fixed = await _post(api, path, {"type": "page_import", "items": page_items(1)}, "k")
    assert fixed.status_code == 201, fixed.text


async def test_keys_belong_to_their_caller_and_expire(api: ApiHarness) -> None:
    body = {"type": "diag.noop", "payload": {}}
    alices = await _post(api, "/v1/jobs", body, "shared", sub="alice")
    bobs = await _post(api, "/v1/jobs", {**body, "priority": 3}, "shared", sub="bob")
    assert alices.status_code == 201 and bobs.status_code == 201, bobs.text
    async with api.services.pool.connection() as conn:
        await conn.execute("UPDATE idempotency_key SET expires_at = now() - interval '1 s'")
    # Expired: the key is free again, for another request too.
    later = await _post(api, "/v1/jobs", {**body, "priority": 5}, "shared", sub="alice")
    assert later.status_code == 201 and "Idempotent-Replayed" not in later.headers
    assert later.json()["job"]["priority"] == 5


async def test_job_and_code2wf_creation_replay(api: ApiHarness) -> None:
    job_body = {"type": "diag.sleep", "payload": {"seconds": 0.01}}
    first = await _post(api, "/v1/jobs", job_body, "job-1")
    again = await _post(api, "/v1/jobs", job_body, "job-1")
    assert again.json()["id"] == first.json()["id"] and again.status_code == 201
    assert await count(api, "SELECT count(*) FROM all_jobs") == 1

    scope, page_import_id = await completed_page_import(api)
    path = f"/v1/projects/{scope.project_id}/code2wf"
    made = await _post(api, path, request(page_import_id), "wf-1")
    repeated = await _post(api, path, request(page_import_id), "wf-1")
    assert made.status_code == repeated.status_code == 201, repeated.text
    assert made.json()["id"] == repeated.json()["id"] == made.json()["code2wfId"]
    # Code2WF has no request dedupe: without the key a second POST makes a second row.
    assert await count(api, "SELECT count(*) FROM code2wf") == 1


async def test_the_header_is_documented_on_each_creating_operation(api: ApiHarness) -> None:
    document = (await api.client.get("/openapi.json")).json()
    creating = {
        ("/v1/jobs", "post"),
        ("/v1/projects/{projectId}/batches", "post"),
        ("/v1/projects/{projectId}/code2wf", "post"),
    }
    for path, method in creating:
        names = [p["name"] for p in document["paths"][path][method]["parameters"]]
        assert "Idempotency-Key" in names, (method, path)


async def test_the_sweep_deletes_expired_keys_only(api: ApiHarness) -> None:
    for key in ("old", "new"):
        assert (await _post(api, "/v1/jobs", {"type": "diag.noop", "payload": {}}, key)).is_success
    async with api.services.pool.connection() as conn:
        await conn.execute(
            "UPDATE idempotency_key SET expires_at = now() - interval '1 s' WHERE key = 'old'"
        )
    assert await purge_expired(api.services.pool) == 1
    assert await count(api, "SELECT count(*) FROM idempotency_key WHERE key = 'new'") == 1
    assert await count(api, "SELECT count(*) FROM idempotency_key") == 1
