"""The jobs list's filters (`GET /v1/jobs` and /ui/jobs) on real PostgreSQL: each filter
keeps exactly the jobs built to match it, pages are keyset pages that keep the filter, bad
input is a 422 problem+json with field paths (JSON) or a 422 page with the message (console),
never a 500; and the list's plans use indexes on a table of many finished jobs."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from jobrelay.domain.jobs import FailureKind
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims
from jobrelay.jobs.claims import Done
from jobrelay.jobs.service import _QUERIES, uuid7_floor
from tests.harness import ApiHarness
from tests.integration import test_console_ui
from tests.integration.test_console import _enqueue, _sql
from tests.integration.test_console_ui import Login, _page

login = test_console_ui.login  # the fixture: a client logged in through the login form


async def _ids(api: ApiHarness, **params: Any) -> list[str]:
    response = await api.client.get(
        "/v1/jobs", params=params, headers=api.headers("ops", admin=True)
    )
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


async def _finish(api: ApiHarness, job_id: uuid.UUID, *, fail: bool = False) -> None:
    async with api.services.pool.connection() as conn:
        [claimed] = await claims.claim(
            conn, QueueLimits(lease_s=60.0, total=1, slots={"default": 1}), worker_id="w-filter"
        )
        assert claimed.id == job_id
        if fail:
            await claims.fail(conn, claimed, kind=FailureKind.PERMANENT, error="bad")
        else:
            await claims.complete_many(conn, [Done(claimed)])


async def test_each_filter_keeps_the_matching_jobs(api: ApiHarness) -> None:
    noop = await _enqueue(api)
    await _finish(api, noop)
    failed = await _enqueue(api)
    await _finish(api, failed, fail=True)
    keyed = await _enqueue(api, "diag.sleep", payload={"seconds": 1, "sourceKey": "src:1"})
    # No diagnostic type declares a dedupe key: give this one a key as a product type would.
    await _sql(api, "UPDATE jobs SET dedupe_key = 'd:1' WHERE id = %s", keyed)
    ai = await _enqueue(api, "diag.sleep", payload={"seconds": 1, "concurrencyClass": "ai"})
    # A job created three days ago: its UUIDv7 carries that time too.
    three_days_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=3)
    old = uuid.UUID(bytes=uuid7_floor(three_days_ago).bytes[:6] + uuid.uuid4().bytes[6:])
    await _sql(
        api,
        "UPDATE jobs SET id = %s, created_at = %s WHERE id = %s",
        old,
        three_days_ago,
        await _enqueue(api),
    )
    await _sql(
        api,
        "UPDATE finished_jobs SET finished_at = timestamptz '2026-01-02 00:00Z' WHERE id = %s",
        noop,
    )

    assert await _ids(api) == [str(j) for j in (ai, keyed, failed, noop, old)]
    assert await _ids(api, type="diag.sleep") == [str(ai), str(keyed)]
    assert await _ids(api, status="failed") == [str(failed)]
    assert await _ids(api, **{"class": "ai"}) == [str(ai)]
    assert await _ids(api, sourceKey="src:1") == [str(keyed)]
    assert await _ids(api, dedupeKey="d:1") == [str(keyed)]
    assert await _ids(api, sourceKey="src:2") == []
    assert await _ids(api, type="diag.sleep", **{"class": "default"}) == [str(keyed)]

    now = dt.datetime.now(dt.UTC)
    day_ago = (now - dt.timedelta(days=1)).isoformat()
    assert await _ids(api, createdTo=day_ago) == [str(old)]
    assert str(old) not in await _ids(api, createdFrom=day_ago)
    assert len(await _ids(api, createdFrom=day_ago)) == 4
    # Naive times are UTC; the finished range keeps only finished jobs.
    assert await _ids(api, finishedFrom="2026-01-01T00:00", finishedTo="2026-01-03T00:00") == [
        str(noop)
    ]
    assert await _ids(api, finishedFrom=day_ago) == [str(failed)]


async def test_pages_are_keyset_pages_that_keep_the_filter(api: ApiHarness, login: Login) -> None:
    sleeps = [
        await _enqueue(api, "diag.fail", payload={"kind": "permanent", "times": n})
        for n in range(5)
    ]
    await _enqueue(api)  # a noop between them must not appear
    sleeps.append(await _enqueue(api, "diag.fail", payload={"kind": "permanent", "times": 5}))
    newest_first = [str(j) for j in reversed(sleeps)]
    admin = api.headers("ops", admin=True)
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params = {"type": "diag.fail", "limit": 4, **({"cursor": cursor} if cursor else {})}
        body = (await api.client.get("/v1/jobs", params=params, headers=admin)).json()
        seen += [item["id"] for item in body["items"]]
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert seen == newest_first

    client = await login("ops", admin=True)
    first = _page(await client.get("/ui/jobs", params={"type": "diag.fail"}))
    assert [a.text() for a in first.css("table#jobs a")] == newest_first  # one page of 50
    assert first.css_first("a#next") is None
    form = first.css_first("form#filters input[name=type]")
    assert form is not None and form.attributes["value"] == "diag.fail"


async def test_bad_filters_are_422_with_field_paths_never_500(
    api: ApiHarness, login: Login
) -> None:
    admin = api.headers("ops", admin=True)

    async def problem(**params: Any) -> list[str]:
        response = await api.client.get("/v1/jobs", params=params, headers=admin)
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        return [e["path"] for e in response.json()["errors"]]

    assert await problem(status="bogus") == ["status"]
    assert await problem(createdFrom="yesterday") == ["createdFrom"]
    assert await problem(cursor="not-a-uuid") == ["cursor"]
    assert await problem(limit=10**12) == ["limit"]
    assert await problem(sourceKey="k" * 1001) == ["sourceKey"]
    assert await problem(createdFrom="2026-12-02T00:00Z", createdTo="2026-12-01T00:00Z") == [
        "createdTo"
    ]
    # Every bad field of the service's checks is named at once.
    assert await problem(status="x", dedupeKey="k" * 1001) == ["status", "dedupeKey"]

    client = await login("ops", admin=True)
    for params, expected in (
        ({"status": "bogus"}, "unknown status 'bogus'"),
        ({"createdFrom": "yesterday"}, "createdFrom: not a time"),
        ({"finishedTo": "2026-12-01T25:00"}, "finishedTo: not a time"),
        ({"before": "not-a-uuid"}, "before"),
        ({"before": "9" * 400}, "before"),
        ({"createdFrom": "2026-12-02T00:00", "createdTo": "2026-12-01T00:00"}, "createdTo"),
    ):
        response = await client.get("/ui/jobs", params=params)
        assert response.status_code == 422, (params, response.text)
        assert expected in _page(response).text(), (params, response.text)
    # A datetime-local value (no seconds, no zone) is accepted.
    ok = await client.get("/ui/jobs", params={"createdFrom": "2026-12-01T15:04"})
    assert ok.status_code == 200
    # Huge page numbers on the paged console lists are a 422 page too.
    huge = await client.get("/ui/projects/1/batches", params={"page": 10**30})
    assert huge.status_code == 422 and "page" in huge.text


# Finished jobs in bulk: UUIDv7-shaped ids carrying their creation time, one in 50 failed,
# one in 10 with a source key and a dedupe key, one in 20 of class ai.
_BULK = """
INSERT INTO jobs (id, type, status, payload, dedupe_key, source_key, concurrency_class,
                  attempt_count, failure_kind, last_error, created_at, updated_at,
                  available_at, finished_at)
SELECT (lpad(to_hex((extract(epoch FROM t) * 1000)::bigint), 12, '0')
        || '7' || substr(md5(g::text), 1, 19))::uuid,
       'bulk.' || (g %% 4), CASE WHEN g %% 50 = 0 THEN 'failed' ELSE 'completed' END, '{}',
       CASE WHEN g %% 10 = 0 THEN 'd:' || g END, CASE WHEN g %% 10 = 0 THEN 's:' || g END,
       CASE WHEN g %% 20 = 0 THEN 'ai' ELSE 'default' END, 1,
       CASE WHEN g %% 50 = 0 THEN 'permanent' END, CASE WHEN g %% 50 = 0 THEN 'bad' END,
       t, t, t, t + interval '1 second'
FROM generate_series(1, %s) AS g,
     LATERAL (SELECT now() - make_interval(secs => (%s - g) * 10) AS t) AS at
"""


def _plan_nodes(plan: dict[str, Any]) -> list[tuple[str, str]]:
    nodes = [(str(plan["Node Type"]), str(plan.get("Index Name", plan.get("Relation Name"))))]
    for child in plan.get("Plans", []):
        nodes += _plan_nodes(child)
    return nodes


async def test_the_list_reads_indexes_not_the_whole_history(api: ApiHarness) -> None:
    rows = 30_000
    await _sql(api, _BULK, rows, rows)
    await _sql(api, "ANALYZE jobs")
    newest = await _sql(api, "SELECT id FROM all_jobs ORDER BY id DESC OFFSET 100 LIMIT 1")
    base = {
        k: None
        for k in [
            "type",
            "status",
            "class",
            "source_key",
            "dedupe_key",
            "created_from",
            "created_to",
            "finished_from",
            "finished_to",
            "id_floor",
            "id_ceiling",
            "before",
        ]
    }
    now = dt.datetime.now(dt.UTC)
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "no filter": ({}, "jobs_pkey"),
        "a page further": ({"before": newest[0]["id"]}, "jobs_pkey"),
        "source key": ({"source_key": "s:1230"}, "jobs_source_key_idx"),
        "dedupe key": ({"dedupe_key": "d:1230"}, "jobs_dedupe_key_idx"),
        "a class no job has": ({"class": "gpu"}, "jobs_class_idx"),
        "created long ago": (
            {
                "created_to": now - dt.timedelta(days=2),
                "id_ceiling": uuid7_floor(now - dt.timedelta(days=2, hours=-1)),
            },
            "jobs_pkey",
        ),
        "finished in a minute": (
            {
                "finished_from": now - dt.timedelta(hours=30),
                "finished_to": now - dt.timedelta(hours=30) + dt.timedelta(minutes=1),
            },
            "jobs_finished_at_idx",
        ),
    }
    async with api.services.pool.connection() as conn:  # the service's statement, unprepared
        for name, (params, index) in cases.items():
            cursor = await conn.execute(
                "EXPLAIN (FORMAT JSON) " + _QUERIES.list_jobs,
                {**base, **params, "limit": 51},
                prepare=False,
            )
            [row] = await cursor.fetchall()
            nodes = _plan_nodes(row["QUERY PLAN"][0]["Plan"])
            assert ("Seq Scan", "jobs") not in nodes, (name, nodes)
            assert index in {n[1] for n in nodes}, (name, nodes)
        # Rare statuses and classes: no sequential scan either (skip scan or index order).
        for params in (
            {"status": "failed"},
            {"status": "cancelled"},
            {"type": "bulk.2", "status": "failed"},
            {"class": "ai"},
            {"class": "default"},
        ):
            cursor = await conn.execute(
                "EXPLAIN (FORMAT JSON) " + _QUERIES.list_jobs,
                {**base, **params, "limit": 51},
                prepare=False,
            )
            [row] = await cursor.fetchall()
            nodes = _plan_nodes(row["QUERY PLAN"][0]["Plan"])
            assert ("Seq Scan", "jobs") not in nodes, (params, nodes)

    # And the answers are right on the bulk table.
    failed = await _ids(api, status="failed", limit=500)
    assert len(failed) == 500
    assert await _ids(api, sourceKey="s:1230") == await _ids(api, dedupeKey="d:1230")
    assert len(await _ids(api, sourceKey="s:1230")) == 1
