"""The workflows API over real PostgreSQL (admin role): create with an Idempotency-Key, read
with step pages, list with filters and cursors, cancel and retry with their conflicts,
and bad input answered 422 with field paths, storing nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobrelay.jobs.worker import WorkerConfig
from tests.harness import ApiHarness, api_harness
from tests.jobs_support import eventually

APP = "tests.apps.steps:job_types"


@pytest.fixture
async def wf_api(db_dsn: str, issuer_dir: Path) -> AsyncIterator[ApiHarness]:
    async with api_harness(
        db_dsn, issuer_dir, jobs={"app": [APP], "workflows_max_steps": 5}
    ) as harness:
        yield harness


def _diamond(name: str = "diamond") -> dict[str, Any]:
    return {
        "name": name,
        "steps": [
            {"name": "a", "type": "wf.emit", "payload": {"value": 1}},
            {"name": "b", "type": "wf.emit", "payload": {"value": 2}, "after": ["a"]},
            {"name": "c", "type": "wf.emit", "payload": {"value": 3}, "after": ["a"]},
            {"name": "d", "type": "wf.sum", "after": ["b", "c"], "onDependencyFailure": "run"},
        ],
    }


async def _stored(api: ApiHarness) -> tuple[int, int]:
    async with api.services.pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT (SELECT count(*) FROM workflows) AS w, (SELECT count(*) FROM jobs) AS j"
        )
        row = await cursor.fetchone()
    assert row is not None
    return int(row["w"]), int(row["j"])


async def test_create_read_and_page_through_the_steps(wf_api: ApiHarness) -> None:
    admin = wf_api.headers("ops", admin=True)
    created = await wf_api.client.post("/v1/workflows", json=_diamond(), headers=admin)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["status"] == "running" and body["stepCount"] == 4
    assert body["counts"] == {"pending": 1, "held": 3}
    steps = {s["name"]: s for s in body["steps"]}
    assert steps["d"]["after"] == ["b", "c"] and steps["d"]["onDependencyFailure"] == "run"
    assert steps["a"]["state"] == "pending" and steps["b"]["state"] == "held"

    first = await wf_api.client.get(
        f"/v1/workflows/{body['id']}", params={"stepLimit": 3}, headers=admin
    )
    page = first.json()
    assert [s["name"] for s in page["steps"]] == ["a", "b", "c"]
    assert page["nextStepCursor"] == "c"
    rest = await wf_api.client.get(
        f"/v1/workflows/{body['id']}",
        params={"stepLimit": 3, "stepsAfter": "c"},
        headers=admin,
    )
    assert [s["name"] for s in rest.json()["steps"]] == ["d"]
    assert rest.json()["nextStepCursor"] is None

    member = await wf_api.client.get(f"/v1/workflows/{body['id']}", headers=wf_api.headers("m"))
    assert member.status_code == 403
    missing = await wf_api.client.get(
        "/v1/workflows/0190a4b2-0000-7000-8000-000000000000", headers=admin
    )
    assert missing.status_code == 404


async def test_the_same_idempotency_key_creates_one_workflow(wf_api: ApiHarness) -> None:
    headers = {**wf_api.headers("ops", admin=True), "Idempotency-Key": "wf-1"}
    first = await wf_api.client.post("/v1/workflows", json=_diamond(), headers=headers)
    again = await wf_api.client.post("/v1/workflows", json=_diamond(), headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert again.json()["id"] == first.json()["id"]
    assert await _stored(wf_api) == (1, 4)


def _bad(change: Any) -> dict[str, Any]:
    body = _diamond()
    change(body)
    return body


@pytest.mark.parametrize(
    ("body", "paths"),
    [
        (_bad(lambda b: b["steps"][0].update(after=["d"])), ["steps.0.after"]),  # a cycle
        (_bad(lambda b: b["steps"][1].update(after=["nope"])), ["steps.1.after.0"]),
        (_bad(lambda b: b["steps"][2].update(name="b")), ["steps.2.name", "steps.3.after.1"]),
        (_bad(lambda b: b["steps"][0].update(type="wf.nope")), ["steps.0.type"]),
        (_bad(lambda b: b["steps"][1].update(payload={"value": "x"})), ["steps.1.payload.value"]),
        (
            _bad(lambda b: b["steps"][3].update(onDependencyFailure="maybe")),
            ["steps.3.onDependencyFailure"],
        ),
        (
            _bad(
                lambda b: b["steps"].extend({"name": f"x{i}", "type": "wf.emit"} for i in range(2))
            ),
            ["steps"],
        ),
        (_bad(lambda b: b.update(steps=[])), ["steps"]),
    ],
    ids=[
        "cycle",
        "unknown dependency",
        "duplicate name",
        "unknown type",
        "bad payload",
        "unknown policy",
        "over the size limit",
        "no steps",
    ],
)
async def test_bad_input_is_a_422_with_field_paths_and_stores_nothing(
    wf_api: ApiHarness, body: dict[str, Any], paths: list[str]
) -> None:
    answer = await wf_api.client.post(
        "/v1/workflows", json=body, headers=wf_api.headers("ops", admin=True)
    )
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    found = [e["path"] for e in answer.json()["errors"]]
    assert all(
        any(f == p or f.endswith("." + p) or f.startswith(p) for f in found) for p in paths
    ), found
    assert await _stored(wf_api) == (0, 0)


async def test_list_filters_by_name_and_status_and_pages_with_a_cursor(wf_api: ApiHarness) -> None:
    admin = wf_api.headers("ops", admin=True)
    ids = []
    for name in ["one", "two", "one", "one"]:
        answer = await wf_api.client.post("/v1/workflows", json=_diamond(name), headers=admin)
        ids.append(answer.json()["id"])
    await wf_api.client.post(f"/v1/workflows/{ids[1]}/cancel", headers=admin)

    page = (await wf_api.client.get("/v1/workflows", params={"limit": 2}, headers=admin)).json()
    assert [w["id"] for w in page["items"]] == [ids[3], ids[2]]  # newest first
    rest = await wf_api.client.get(
        "/v1/workflows", params={"limit": 2, "cursor": page["nextCursor"]}, headers=admin
    )
    assert [w["id"] for w in rest.json()["items"]] == [ids[1], ids[0]]
    named = await wf_api.client.get("/v1/workflows", params={"name": "one"}, headers=admin)
    assert [w["id"] for w in named.json()["items"]] == [ids[3], ids[2], ids[0]]
    cancelled = await wf_api.client.get(
        "/v1/workflows", params={"status": "cancelled"}, headers=admin
    )
    assert [(w["id"], w["cancelledBy"]) for w in cancelled.json()["items"]] == [(ids[1], "ops")]
    unknown = await wf_api.client.get("/v1/workflows", params={"status": "lost"}, headers=admin)
    assert unknown.status_code == 422
    assert [e["path"] for e in unknown.json()["errors"]] == ["status"]


async def test_cancel_and_retry_through_http_with_their_conflicts(wf_api: ApiHarness) -> None:
    admin = wf_api.headers("ops", admin=True)
    body = (await wf_api.client.post("/v1/workflows", json=_diamond(), headers=admin)).json()
    retry_running = await wf_api.client.post(f"/v1/workflows/{body['id']}/retry", headers=admin)
    assert retry_running.status_code == 409, retry_running.text

    cancelled = await wf_api.client.post(f"/v1/workflows/{body['id']}/cancel", headers=admin)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["counts"] == {"cancelled": 4}
    again = await wf_api.client.post(f"/v1/workflows/{body['id']}/cancel", headers=admin)
    assert (
        again.status_code == 200 and again.json()["cancelledAt"] == cancelled.json()["cancelledAt"]
    )

    retried = await wf_api.client.post(f"/v1/workflows/{body['id']}/retry", headers=admin)
    assert retried.status_code == 200, retried.text
    assert retried.json()["status"] == "running" and retried.json()["retries"] == 1
    assert retried.json()["counts"] == {"pending": 1, "held": 3}
    twice = await wf_api.client.post(f"/v1/workflows/{body['id']}/retry", headers=admin)
    assert twice.status_code == 200 and twice.json()["retries"] == 1

    worker = wf_api.services.jobs.worker(WorkerConfig(concurrency=4, poll_interval_s=0.01))
    await worker.start()
    try:

        async def done() -> dict[str, Any] | None:
            read = (await wf_api.client.get(f"/v1/workflows/{body['id']}", headers=admin)).json()
            return read if read["status"] == "completed" else None

        final = await eventually(done, timeout_s=60, what="the retried workflow to complete")
    finally:
        await worker.stop()
    assert {s["name"]: s["result"] for s in final["steps"]}["d"]["value"] == 5
    assert final["finishedAt"] is not None
    completed_cancel = await wf_api.client.post(f"/v1/workflows/{body['id']}/cancel", headers=admin)
    assert completed_cancel.status_code == 409
    assert "completed" in completed_cancel.json()["detail"]
    unknown = await wf_api.client.post(
        "/v1/workflows/0190a4b2-0000-7000-8000-000000000000/retry", headers=admin
    )
    assert unknown.status_code == 404
