"""Schedules with real `jobrelay worker` processes: a schedule every second ticked by three
workers enqueues exactly one job per tick and misses none while they run; with every
worker stopped for 10 s and restarted, the catch-up policy holds (`one`: exactly one job
for the missed ticks; `skip`: none). A bad schedule stops the worker at startup with one
line naming it (exit 2): here an invalid cron expression and an unknown job type (every
kind of bad schedule is named by the registry: tests/unit/test_schedules.py)."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import subprocess
from typing import Any

import pytest

from tests.harness import cli_env, jobrelay_command, wait_until
from tests.jobs_support import query, worker_processes

GRACE_S = 5.0
SCHEDULES = [
    {"name": name, "cron": "* * * * * *", "jobType": "diag.noop", "catchUp": policy}
    for name, policy in (("tick-one", "one"), ("tick-skip", "skip"))
]
ENV = {
    "JOBRELAY_SCHEDULES": json.dumps(SCHEDULES),
    "JOBRELAY_SCHEDULES_GRACE_S": str(GRACE_S),
    "JOBRELAY_WORKER_CONCURRENCY": "2",
}
SECOND = dt.timedelta(seconds=1)


def ticked(dsn: str, name: str) -> list[dict[str, Any]]:
    """The schedule's jobs, by tick: tick (from the dedupe key), created_at (the database
    time of the pass that enqueued it, the `now` of its plan)."""
    rows = query(
        dsn,
        "SELECT dedupe_key, created_at FROM all_jobs WHERE dedupe_key LIKE %s ORDER BY dedupe_key",
        f"schedule:{name}:%",
    )
    return [
        {
            "tick": dt.datetime.fromisoformat(str(r["dedupe_key"]).split(":", 2)[2]),
            "created_at": r["created_at"],
        }
        for r in rows
    ]


def db_now(dsn: str) -> dt.datetime:
    now: dt.datetime = query(dsn, "SELECT clock_timestamp() AS now")[0]["now"]
    return now


def last_tick(dsn: str, name: str) -> dt.datetime | None:
    jobs = ticked(dsn, name)
    return jobs[-1]["tick"] if jobs else None


def assert_every_tick_once(jobs: list[dict[str, Any]]) -> None:
    ticks = [j["tick"] for j in jobs]
    assert len(set(ticks)) == len(ticks), "a tick was enqueued twice"
    gaps = [(a, b) for a, b in itertools.pairwise(ticks) if b - a != SECOND]
    assert gaps == [], f"ticks missed between {gaps[:3]}"
    late = [j for j in jobs if j["created_at"] - j["tick"] > dt.timedelta(seconds=GRACE_S)]
    assert late == [], f"ticks enqueued as missed while workers ran: {late[:3]}"


@pytest.mark.slow
@pytest.mark.long
def test_three_workers_tick_every_second_once_and_catch_up_after_downtime(db_dsn: str) -> None:
    names = [s["name"] for s in SCHEDULES]
    with worker_processes(db_dsn, 3, **ENV):
        first = wait_until(
            lambda: all(last_tick(db_dsn, n) for n in names) and db_now(db_dsn),
            timeout_s=60,
            what="the first ticks",
        )
        wait_until(
            lambda: all(
                (t := last_tick(db_dsn, n)) is not None and t >= first + 30 * SECOND for n in names
            ),
            timeout_s=120,
            what="30 s of ticks",
        )
    # All three workers stopped (worker_processes waited for their exit).
    before = {n: ticked(db_dsn, n) for n in names}
    for name, jobs in before.items():
        assert len(jobs) >= 30, name
        assert_every_tick_once(jobs)
    stopped = max(j[-1]["tick"] for j in before.values())
    wait_until(
        lambda: db_now(db_dsn) >= stopped + 10 * SECOND, timeout_s=60, what="10 s of downtime"
    )
    with worker_processes(db_dsn, 3, **ENV):
        restarted = db_now(db_dsn)
        wait_until(
            lambda: all(
                (t := last_tick(db_dsn, n)) is not None and t >= restarted + 5 * SECOND
                for n in names
            ),
            timeout_s=120,
            what="ticks after the restart",
        )
    for name, policy in (("tick-one", "one"), ("tick-skip", "skip")):
        jobs = ticked(db_dsn, name)
        last_before = before[name][-1]["tick"]
        assert jobs[: len(before[name])] == before[name]
        after = jobs[len(before[name]) :]
        # The first pass after the restart ran at `caught`: ticks older than the grace
        # then were missed (no worker ran), younger ones were on time.
        caught = min(j["created_at"] for j in after)
        missed_from = caught - dt.timedelta(seconds=GRACE_S)
        missed = [j for j in after if j["tick"] < missed_from]
        on_time = [j for j in after if j["tick"] >= missed_from]
        missed_ticks = (missed_from - last_before) // SECOND
        assert missed_ticks >= 5, "the scenario must have missed ticks"
        if policy == "one":
            assert len(missed) == 1, missed
            # it stands for the latest missed tick
            assert missed_from - SECOND <= missed[0]["tick"] < missed_from
            assert missed[0]["created_at"] == caught
        else:
            assert missed == [], missed
        assert_every_tick_once(on_time)
        assert on_time[0]["tick"] - missed_from < SECOND  # the first on-time tick ran
        assert len(on_time) >= 5
    stored = query(db_dsn, "SELECT name, last_tick_at, next_tick_at FROM job_schedules")
    assert {r["name"] for r in stored} == set(names)
    for r in stored:
        assert r["last_tick_at"] == last_tick(db_dsn, r["name"])
        assert r["next_tick_at"] == r["last_tick_at"] + SECOND


@pytest.mark.parametrize(
    ("schedule", "named"),
    [
        ({"cron": "61 * * * *"}, "schedule 'bad': invalid cron expression '61 * * * *'"),
        ({"jobType": "no.such"}, "schedule 'bad': unknown job type 'no.such'"),
    ],
)
def test_a_bad_schedule_stops_the_worker_with_one_line_naming_it(
    schedule: dict[str, Any], named: str
) -> None:
    entry = {"name": "bad", "cron": "0 3 * * *", "jobType": "diag.noop", **schedule}
    result = subprocess.run(
        [*jobrelay_command(), "worker"],
        env=cli_env(
            DATABASE_URL="postgresql://nobody@/nowhere?host=/nonexistent",
            JOBRELAY_SCHEDULES=json.dumps([{k: v for k, v in entry.items() if v is not None}]),
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert named in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def _cli(dsn: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*jobrelay_command(), *args],
        env=cli_env(DATABASE_URL=dsn, **env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_schedules_list_shows_declared_and_stored_schedules(db_dsn: str) -> None:
    query(
        db_dsn,
        "INSERT INTO job_schedules (name, cron, timezone, job_type, catch_up, next_tick_at,"
        " last_tick_at) VALUES ('retired', '0 4 * * *', 'UTC', 'diag.noop', 'skip',"
        " '2030-01-01T04:00:00Z', '2029-12-31T04:00:00Z') RETURNING name",
    )
    env = {"JOBRELAY_SCHEDULES": json.dumps(SCHEDULES[:1])}
    listed = _cli(db_dsn, "schedules", "list", "--json", **env)
    assert listed.returncode == 0, listed.stderr
    items = {i["name"]: i for i in json.loads(listed.stdout)["items"]}
    assert set(items) == {"tick-one", "retired"}
    assert items["tick-one"]["declared"] and not items["tick-one"]["stored"]
    assert items["retired"]["nextTickAt"].startswith("2030-01-01T04:00:00")
    assert not items["retired"]["declared"] and items["retired"]["catchUp"] == "skip"
    table = _cli(db_dsn, "schedules", "list", **env, COLUMNS="200")
    assert table.returncode == 0, table.stderr
    assert "retired (not declared)" in table.stdout and "2030-01-01T04:00:00+00:00" in table.stdout
    assert "* * * * * *" in table.stdout and "tick-one" in table.stdout


def test_jobs_enqueue_takes_a_run_time_with_an_offset(db_dsn: str) -> None:
    created = _cli(db_dsn, "jobs", "enqueue", "diag.noop", "--run-at", "2030-06-01T03:00:00+02:00")
    assert created.returncode == 0, created.stderr
    (row,) = query(
        db_dsn, "SELECT available_at FROM all_jobs WHERE id = %s", json.loads(created.stdout)["id"]
    )
    assert row["available_at"] == dt.datetime.fromisoformat("2030-06-01T01:00:00+00:00")
    for args in (["--run-at", "2030-06-01T03:00:00"],):
        bad = _cli(db_dsn, "jobs", "enqueue", "diag.noop", *args)
        assert bad.returncode == 2 and "--run-at" in bad.stderr, bad.stderr
    both = _cli(
        db_dsn, "jobs", "enqueue", "diag.noop", "--run-at", "2030-06-01T03:00:00Z", "--delay", "5"
    )
    assert both.returncode == 2 and "not both" in both.stderr
