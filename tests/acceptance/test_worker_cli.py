"""`jobrelay worker` as an operator runs it: bad slot and cap values are one clear error
(exit 2) naming the value; SIGTERM lets running jobs finish within the grace period and
releases the rest to another worker at once (long before their lease would expire)."""

from __future__ import annotations

import signal
import subprocess
import uuid

import pytest

from jobrelay.jobs.enqueue import EnqueueRequest
from tests.harness import cli_env, jobrelay_command, wait_until
from tests.jobs_support import enqueue_sync, query, start_worker, stop_worker


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--slots", "ai=two"], {}, "ai=two"),
        (["--slots", "GPU=2"], {}, "invalid concurrency class 'GPU'"),
        (["--slots", "ai=0,default=0"], {}, "ai=0,default=0"),
        (["--slots", "ai"], {}, "'ai'"),
        ([], {"JOBRELAY_JOBS_GLOBAL_CAPS": "ai=0"}, "ai=0"),
        ([], {"JOBRELAY_WORKER_SLOTS": "default=-1"}, "default=-1"),
        ([], {"JOBRELAY_JOBS_FAILPOINTS": "nowhere"}, "nowhere"),
    ],
)
def test_bad_slot_and_cap_values_are_one_clear_error(
    args: list[str], env: dict[str, str], named: str
) -> None:
    result = subprocess.run(
        [*jobrelay_command(), "worker", *args],
        env=cli_env(DATABASE_URL="postgresql://nobody@/nowhere?host=/nonexistent", **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert named in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def _rows(dsn: str, ids: list[uuid.UUID]) -> dict[uuid.UUID, dict[str, object]]:
    rows = query(dsn, "SELECT * FROM all_jobs WHERE id = ANY(%s)", ids)
    return {r["id"]: r for r in rows}


def test_sigterm_finishes_or_releases_running_jobs_and_another_worker_takes_them(
    db_dsn: str,
) -> None:
    quick, slow = (
        [e.id for e in enqueue_sync(db_dsn, [EnqueueRequest("diag.sleep", {"seconds": s})] * n)]
        for s, n in ((0.4, 3), (2.5, 2))
    )
    lease = {"JOBRELAY_JOBS_LEASE_S": "60"}  # a rescue cannot explain a quick takeover
    first = start_worker(db_dsn, "--slots", "default=8", "--grace", "1.5", **lease)
    try:
        wait_until(
            lambda: all(r["status"] == "in_progress" for r in _rows(db_dsn, quick + slow).values()),
            timeout_s=60,
            what="all five jobs running in the first worker",
        )
        first.send_signal(signal.SIGTERM)
        output = stop_worker(first)
    finally:
        stop_worker(first, sig=signal.SIGKILL)
    assert first.returncode == 0, output
    rows = _rows(db_dsn, quick + slow)
    for job_id in quick:  # finished inside the grace period
        assert rows[job_id]["status"] == "completed", rows[job_id]
    for job_id in slow:  # released: pending now, nobody's claim, the attempt undone
        assert rows[job_id]["status"] == "pending", rows[job_id]
        assert rows[job_id]["claim_token"] is None and rows[job_id]["attempt_count"] == 0
    assert not [r for r in rows.values() if r["status"] == "in_progress"]
    second = start_worker(db_dsn, "--slots", "default=8", **lease)
    try:
        done = wait_until(
            lambda: _all_completed(db_dsn, slow),
            timeout_s=30,
            what="the second worker to finish the released jobs (lease is 60 s)",
        )
    finally:
        assert stop_worker(second) is not None
    assert second.returncode == 0
    for r in done.values():
        assert r["attempt_count"] == 1 and r["failure_kind"] is None
        assert r["claimed_by"] != rows[slow[0]]["claimed_by"]


def _all_completed(dsn: str, ids: list[uuid.UUID]) -> dict[uuid.UUID, dict[str, object]] | None:
    found = _rows(dsn, ids)
    return found if all(r["status"] == "completed" for r in found.values()) else None
