"""Schedules and delayed enqueue over HTTP: `GET /v1/schedules` (admin), `POST /v1/jobs`
with `runAt` or `delay`, and 422s naming the field."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from jobrelay.bootstrap import StartupError
from jobrelay.jobs.ticker import sync_schedules
from tests.harness import ApiHarness, api_harness

SCHEDULES = [
    {
        "name": "nightly",
        "cron": "0 3 * * *",
        "jobType": "diag.noop",
        "timezone": "Europe/Paris",
        "catchUp": "skip",
    }
]


async def test_schedules_need_the_admin_role(api: ApiHarness) -> None:
    assert (await api.client.get("/v1/schedules")).status_code == 401
    member = await api.client.get("/v1/schedules", headers=api.headers("bob"))
    assert member.status_code == 403
    empty = await api.client.get("/v1/schedules", headers=api.headers("root", admin=True))
    assert empty.status_code == 200 and empty.json() == {"items": []}


async def test_declared_schedules_are_listed_with_their_ticks_once_a_worker_stored_them(
    db_dsn: str, issuer_dir: Path
) -> None:
    async with api_harness(db_dsn, issuer_dir, jobs={"schedules": json.dumps(SCHEDULES)}) as api:
        h = api.headers("root", admin=True)
        (declared,) = (await api.client.get("/v1/schedules", headers=h)).json()["items"]
        assert declared["name"] == "nightly" and declared["timezone"] == "Europe/Paris"
        assert declared["catchUp"] == "skip" and declared["jobType"] == "diag.noop"
        assert declared["declared"] and not declared["stored"]
        assert declared["nextTickAt"] is None
        async with api.services.pool.connection() as conn:  # what a worker does at start
            await sync_schedules(conn, api.services.jobs.registry.schedules)
        (stored,) = (await api.client.get("/v1/schedules", headers=h)).json()["items"]
        assert stored["stored"] and stored["lastTickAt"] is None
        next_tick = dt.datetime.fromisoformat(stored["nextTickAt"])
        local = next_tick.astimezone(ZoneInfo("Europe/Paris"))
        assert (local.hour, local.minute, local.second) == (3, 0, 0)
    # Another deployment that does not declare it still lists it, as not declared.
    async with api_harness(db_dsn, issuer_dir) as other:
        (row,) = (
            await other.client.get("/v1/schedules", headers=other.headers("root", admin=True))
        ).json()["items"]
        assert row["name"] == "nightly" and row["stored"] and not row["declared"]


async def test_a_job_enqueued_with_run_at_becomes_available_then(api: ApiHarness) -> None:
    h = api.headers("root", admin=True)
    plus_two = dt.timezone(dt.timedelta(hours=2))
    soon = dt.datetime.now(plus_two).replace(microsecond=0) + dt.timedelta(days=30)
    run_at = soon.isoformat()
    created = await api.client.post(
        "/v1/jobs", json={"type": "diag.noop", "runAt": run_at}, headers=h
    )
    assert created.status_code == 201, created.text
    available = dt.datetime.fromisoformat(created.json()["job"]["availableAt"])
    assert available == dt.datetime.fromisoformat(run_at)
    past = await api.client.post(
        "/v1/jobs", json={"type": "diag.noop", "runAt": "2020-01-01T00:00:00Z"}, headers=h
    )
    job = past.json()["job"]
    assert job["availableAt"].startswith("2020-01-01")  # due at once
    diagnosis = (await api.client.get(f"/v1/jobs/{job['id']}/diagnosis", headers=h)).json()
    assert diagnosis["waitSeconds"] == 0


async def test_a_job_enqueued_with_a_delay_waits_that_long_in_database_time(
    api: ApiHarness,
) -> None:
    h = api.headers("root", admin=True)
    created = await api.client.post("/v1/jobs", json={"type": "diag.noop", "delay": 90}, headers=h)
    assert created.status_code == 201, created.text
    job = created.json()["job"]
    wait = dt.datetime.fromisoformat(job["availableAt"]) - dt.datetime.fromisoformat(
        job["createdAt"]
    )
    # available_at = the database's clock at the insert + 90 s; created_at is the start of
    # the same transaction: the two differ by the delay plus the statement's own time.
    assert dt.timedelta(seconds=90) <= wait < dt.timedelta(seconds=150)


async def test_bad_run_at_or_delay_is_a_422_naming_the_field_and_stores_nothing(
    api: ApiHarness,
) -> None:
    h = api.headers("root", admin=True)
    cases = [
        ({"runAt": "2026-06-01T03:00:00+02:00", "delay": 5}, "delay"),
        ({"delay": 5, "delaySeconds": 5}, "delaySeconds"),
        ({"delay": -1}, "delay"),
        ({"delay": 400 * 86400}, "delay"),
        ({"runAt": "2030-06-01T03:00:00"}, "runAt"),
        ({"runAt": "2030-06-01"}, "runAt"),
        ({"runAt": 1900000000}, "runAt"),
        ({"runAt": "tomorrow"}, "runAt"),
        ({"runAt": "2099-01-01T00:00:00Z"}, "runAt"),
    ]
    for extra, path in cases:
        response = await api.client.post("/v1/jobs", json={"type": "diag.noop", **extra}, headers=h)
        assert response.status_code == 422, (extra, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")
        paths = [e["path"] for e in response.json()["errors"]]
        assert paths == [path], (extra, paths)
    page = (await api.client.get("/v1/jobs", headers=h)).json()
    assert page["items"] == []


async def test_an_api_with_a_bad_schedule_does_not_start_and_names_it(
    db_dsn: str, issuer_dir: Path
) -> None:
    bad = [{"name": "nightly", "cron": "0 3 * * *", "jobType": "diag.noop", "timezone": "Nowhere"}]
    with pytest.raises(StartupError, match="schedule 'nightly': unknown time zone 'Nowhere'"):
        async with api_harness(db_dsn, issuer_dir, jobs={"schedules": json.dumps(bad)}):
            pass
