"""Jobs over HTTP: admin only, camelCase JSON, problem+json errors naming the field."""

from __future__ import annotations

from jobrelay.api.routes.jobs import DiagnosisOut
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims, presence
from tests.harness import ApiHarness


async def test_jobs_endpoints_need_the_admin_role(api: ApiHarness) -> None:
    assert (await api.client.get("/v1/jobs")).status_code == 401
    member = await api.client.get("/v1/jobs", headers=api.headers("bob"))
    assert member.status_code == 403


async def test_enqueue_read_list_cancel_retry(api: ApiHarness) -> None:
    h = api.headers("root", admin=True)
    body = {"type": "source.sync", "payload": {"sourceId": "s", "syncKind": "full", "revision": 1}}
    created = await api.client.post("/v1/jobs", json=body, headers=h)
    assert created.status_code == 201, created.text
    job = created.json()
    assert job["outcome"] == "created" and job["job"]["dedupeKey"] == "s/full"
    again = await api.client.post("/v1/jobs", json=body, headers=h)
    assert again.status_code == 200 and again.json()["outcome"] == "deduplicated"
    newer = {**body, "payload": {**body["payload"], "revision": 2}}
    superseded = await api.client.post("/v1/jobs", json=newer, headers=h)
    assert superseded.json()["outcome"] == "superseded"
    job_id = job["id"]
    got = (await api.client.get(f"/v1/jobs/{job_id}", headers=h)).json()
    assert got["status"] == "pending" and got["payload"]["revision"] == 2
    for _ in range(3):
        await api.client.post("/v1/jobs", json={"type": "diag.noop"}, headers=h)
    page1 = (await api.client.get("/v1/jobs?type=diag.noop&limit=2", headers=h)).json()
    assert len(page1["items"]) == 2 and page1["nextCursor"]
    page2 = (
        await api.client.get(
            f"/v1/jobs?type=diag.noop&limit=2&cursor={page1['nextCursor']}", headers=h
        )
    ).json()
    assert len(page2["items"]) == 1 and page2["nextCursor"] is None
    ids = [j["id"] for j in page1["items"] + page2["items"]]
    assert len(set(ids)) == 3 and ids == sorted(ids, reverse=True)
    cancelled = await api.client.post(f"/v1/jobs/{job_id}/cancel", headers=h)
    assert cancelled.json()["status"] == "cancelled"
    retried = await api.client.post(f"/v1/jobs/{job_id}/retry", headers=h)
    assert retried.json()["status"] == "pending" and retried.json()["attemptCount"] == 0
    conflict = await api.client.post(f"/v1/jobs/{job_id}/retry", headers=h)
    assert conflict.status_code == 409
    assert conflict.headers["content-type"].startswith("application/problem+json")
    missing = await api.client.get("/v1/jobs/00000000-0000-0000-0000-000000000000", headers=h)
    assert missing.status_code == 404


async def test_bad_input_is_a_422_naming_the_field_and_stores_nothing(api: ApiHarness) -> None:
    h = api.headers("root", admin=True)
    cases = [
        ({"type": "nope"}, "type"),
        (
            {
                "type": "media.process",
                "payload": {"mediaId": "m", "revision": "x", "sourceId": "s"},
            },
            "payload.revision",
        ),
        ({"type": "diag.noop", "payload": {"blob": "x" * (256 * 1024)}}, "payload"),
        ({"type": "diag.noop", "priority": -1}, "priority"),
    ]
    for body, path in cases:
        response = await api.client.post("/v1/jobs", json=body, headers=h)
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        assert path in [e["path"] for e in response.json()["errors"]], response.json()
    listed = (await api.client.get("/v1/jobs", headers=h)).json()
    assert listed["items"] == []


async def test_media_status_per_id(api: ApiHarness) -> None:
    h = api.headers("root", admin=True)
    for revision in (1, 2):
        payload = {"mediaId": "m1", "revision": revision, "sourceId": "s"}
        await api.client.post(
            "/v1/jobs", json={"type": "media.process", "payload": payload}, headers=h
        )
    response = await api.client.get(
        "/v1/media/status?mediaIds[]=m1&mediaIds[]=m2&mediaIds[]=m1", headers=h
    )
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert [(i["mediaId"], i["status"]) for i in items] == [("m1", "pending"), ("m2", "none")]
    assert items[0]["revision"] == 2
    empty = await api.client.get("/v1/media/status", headers=h)
    assert empty.status_code == 422


async def test_diagnosis_names_the_job_running_on_the_same_source(api: ApiHarness) -> None:
    h = api.headers("root", admin=True)
    sleep = {"type": "diag.sleep", "payload": {"seconds": 1, "sourceKey": "source:9"}}
    first = (await api.client.post("/v1/jobs", json=sleep, headers=h)).json()["id"]
    second = (await api.client.post("/v1/jobs", json=sleep, headers=h)).json()["id"]
    async with api.services.pool.connection() as conn:
        await presence.announce(
            conn, worker_id="w-api", class_slots={"default": 2}, global_caps={}, interval_s=10
        )
        [claimed] = await claims.claim(conn, QueueLimits(lease_s=30, total=1), worker_id="w-api")
    assert str(claimed.id) == first
    got = await api.client.get(f"/v1/jobs/{second}/diagnosis", headers=h)
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["reason"] == "source_busy" and body["jobId"] == second
    assert [(b["id"], b["status"], b["claimedBy"]) for b in body["blockingJobs"]] == [
        (first, "in_progress", "w-api")
    ]
    assert first in body["message"] and body["workers"]["live"] == ["w-api"]
    assert set(body) == {f.alias for f in DiagnosisOut.model_fields.values()}
    running = (await api.client.get(f"/v1/jobs/{first}/diagnosis", headers=h)).json()
    assert running["reason"] == "running" and running["holderAlive"] is True
    missing = await api.client.get(
        "/v1/jobs/00000000-0000-0000-0000-000000000000/diagnosis", headers=h
    )
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
    member = await api.client.get(f"/v1/jobs/{second}/diagnosis", headers=api.headers("bob"))
    assert member.status_code == 403
