"""A class rate limit held by three real `jobrelay worker` processes (issue 17), checked from
the recorded start times (the jobs' `claimed_at`, database time): never more than the limit
in any window of the period, and the limit is used (at least 25 of 30 per window) while work
waits. The workers have more slots than the rate allows, so only the rate holds them back."""

from __future__ import annotations

import datetime as dt

import pytest

from jobrelay.jobs.enqueue import EnqueueRequest
from tests.harness import wait_until
from tests.jobs_support import enqueue_sync, query, worker_processes


def _starts(dsn: str) -> list[dt.datetime]:
    rows = query(dsn, "SELECT claimed_at FROM all_jobs WHERE claimed_at IS NOT NULL")
    return sorted(r["claimed_at"] for r in rows)


def _most_in_any_window(starts: list[dt.datetime], period: dt.timedelta) -> int:
    """The most starts in a half-open window [t, t + period): the fullest window begins at a
    start, so checking those is checking all."""
    most, j = 0, 0
    for i, start in enumerate(starts):
        while j < len(starts) and starts[j] < start + period:
            j += 1
        most = max(most, j - i)
    return most


def _run(dsn: str, *, limit: int, period_s: float, windows: int, used: int) -> None:
    period = dt.timedelta(seconds=period_s)
    # Twice what the rate lets start in the observed windows: work waits throughout.
    jobs = 2 * limit * windows + 50
    enqueue_sync(dsn, [EnqueueRequest("diag.sleep", {"seconds": 0.05}) for _ in range(jobs)])
    with worker_processes(
        dsn, 3, "--slots", "default=8", JOBRELAY_JOBS_RATES=f"default={limit}/{period_s:g}s"
    ):

        def ran_long_enough() -> bool:
            [row] = query(
                dsn,
                "SELECT clock_timestamp() - min(claimed_at) >= %s AS done FROM all_jobs",
                period * windows,
            )
            return bool(row["done"])

        wait_until(ran_long_enough, timeout_s=period_s * windows + 120, interval_s=0.2)
    starts = _starts(dsn)
    first = starts[0]
    observed = [s for s in starts if s < first + period * windows]
    pending = query(dsn, "SELECT count(*) AS n FROM all_jobs WHERE attempt_count = 0")
    assert pending[0]["n"] > 0, "work waited the whole time"
    assert _most_in_any_window(starts, period) <= limit
    per_window = [
        sum(1 for s in observed if first + period * k <= s < first + period * (k + 1))
        for k in range(windows)
    ]
    assert all(n >= used for n in per_window), per_window
    print(f"{limit}/{period_s:g}s over {windows} windows: starts per window {per_window}")


def test_a_rate_of_ten_per_two_seconds_holds_across_three_workers(db_dsn: str) -> None:
    _run(db_dsn, limit=10, period_s=2, windows=3, used=8)


@pytest.mark.slow
@pytest.mark.long
def test_a_rate_of_thirty_per_ten_seconds_holds_across_three_workers_for_a_minute(
    db_dsn: str,
) -> None:
    _run(db_dsn, limit=30, period_s=10, windows=6, used=25)
