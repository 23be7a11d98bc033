"""Fair claiming with two real `jobrelay worker` processes (issue 17): organization A has a
large backlog in a class; organization B enqueues 10 jobs while A drains; B's 10 jobs finish
before A is 5 % done. The assertion is on the order of events recorded in the database
(finish times), not on durations, so it holds on a loaded machine. Without fairness
(`JOBRELAY_WORKER_FAIR_CLAIMS=false`) B waits behind A's whole backlog, which shows the test
can fail."""

from __future__ import annotations

from typing import Any

import pytest

from jobrelay.jobs.enqueue import EnqueueRequest
from tests.harness import wait_until
from tests.jobs_support import enqueue_sync, query, worker_processes

_CHUNK = 10_000


def _jobs(org: str, n: int) -> list[EnqueueRequest]:
    return [EnqueueRequest("diag.sleep", {"seconds": 0, "fairnessKey": org}) for _ in range(n)]


def _completed(dsn: str, org: str) -> int:
    rows = query(
        dsn,
        "SELECT count(*) AS n FROM all_jobs WHERE fairness_key = %s AND status = 'completed'",
        org,
    )
    return int(rows[0]["n"])


def _race(dsn: str, backlog: int, **env: str) -> dict[str, Any]:
    """A enqueues `backlog` jobs (bulk enqueue, in chunks), workers start, then B enqueues
    10; returns the A jobs completed by the time B's last job completed."""
    for start in range(0, backlog, _CHUNK):
        enqueue_sync(dsn, _jobs("org-a", min(_CHUNK, backlog - start)))
    with worker_processes(dsn, 2, "--slots", "default=4", **env):
        wait_until(lambda: _completed(dsn, "org-a") >= 20, timeout_s=120, what="A draining")
        enqueue_sync(dsn, _jobs("org-b", 10))
        wait_until(lambda: _completed(dsn, "org-b") == 10, timeout_s=600, what="B's 10 jobs")
    [row] = query(
        dsn,
        "WITH b AS (SELECT min(created_at) AS arrived, max(finished_at) AS done "
        "  FROM all_jobs WHERE fairness_key = 'org-b') "
        "SELECT count(*) FILTER (WHERE a.finished_at <= b.done) AS a_done_when_b_done, "
        "  count(*) FILTER (WHERE a.finished_at > b.arrived AND a.finished_at <= b.done) "
        "    AS a_done_while_b_waited "
        "FROM all_jobs AS a, b WHERE a.fairness_key = 'org-a' AND a.status = 'completed'",
    )
    print(f"backlog {backlog}: {row}")
    return row


def test_b_finishes_before_a_is_five_percent_done(db_dsn: str) -> None:
    backlog = 5_000
    row = _race(db_dsn, backlog)
    assert row["a_done_while_b_waited"] < backlog * 0.05, row
    # B arrived while A still had most of its backlog (else the bound above says nothing).
    assert row["a_done_when_b_done"] < backlog * 0.9, row


def test_without_fairness_b_waits_behind_a(db_dsn: str) -> None:
    backlog = 1_000
    row = _race(db_dsn, backlog, JOBRELAY_WORKER_FAIR_CLAIMS="false")
    assert row["a_done_when_b_done"] >= backlog * 0.95, row


@pytest.mark.slow
def test_b_finishes_before_a_hundred_thousand_are_five_percent_done(db_dsn: str) -> None:
    backlog = 100_000
    row = _race(db_dsn, backlog)
    assert row["a_done_when_b_done"] < backlog * 0.05, row
