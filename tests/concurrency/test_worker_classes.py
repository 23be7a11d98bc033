"""Invariants 10 and 11 with two real `jobrelay worker` processes: a global cap per class
holds across workers, and one source never runs two jobs at once while other sources
progress in parallel. Overlaps are computed from recorded start/end times (the database's
claim and finish times, and the handlers' own clocks)."""

from __future__ import annotations

from jobrelay.jobs.enqueue import EnqueueRequest
from tests.harness import wait_until
from tests.jobs_support import enqueue_sync, max_overlap, query, worker_processes

_SLEEP_S = 0.004


def _finished(dsn: str, total: int) -> list[dict[str, object]] | None:
    rows = query(
        dsn,
        "SELECT status, claimed_by, extract(epoch FROM claimed_at)::float8 AS claimed, "
        "extract(epoch FROM finished_at)::float8 AS finished, source_key, result "
        "FROM all_jobs",
    )
    done = [r for r in rows if r["status"] in ("completed", "failed", "cancelled")]
    return rows if len(done) == total else None


def _intervals(rows: list[dict[str, object]]) -> tuple[list[tuple[float, float]], ...]:
    database = [(float(r["claimed"]), float(r["finished"])) for r in rows]  # type: ignore[arg-type]
    handlers = [(r["result"]["startedAt"], r["result"]["endedAt"]) for r in rows]  # type: ignore[index]
    return database, handlers


def test_a_global_ai_cap_of_two_holds_across_two_worker_processes(db_dsn: str) -> None:
    jobs = [
        # 200 x 20 ms under a cap of 2: 2 s of work, so a process that starts later than the
        # other on a loaded machine still gets some (4 ms jobs were 0.4 s: one took them all).
        EnqueueRequest("diag.sleep", {"seconds": 0.02, "concurrencyClass": "ai"})
        for _ in range(200)
    ]
    enqueue_sync(db_dsn, jobs)
    # Each process alone would run 3 ai jobs at once; the cluster-wide cap is 2.
    with worker_processes(db_dsn, 2, "--slots", "ai=3,default=2", JOBRELAY_JOBS_GLOBAL_CAPS="ai=2"):
        rows = wait_until(lambda: _finished(db_dsn, 200), timeout_s=120, what="200 ai jobs")
    assert {r["status"] for r in rows} == {"completed"}
    assert len({r["claimed_by"] for r in rows}) == 2, "both processes took ai jobs"
    database, handlers = _intervals(rows)
    assert max_overlap(database) <= 2, "claim..finish intervals in database time"
    assert max_overlap(handlers) <= 2, "handler start..end in the workers' clocks"
    assert max_overlap(handlers) == 2, "the cap is used, not just respected"


def test_one_source_never_runs_twice_at_once_and_sources_progress_in_parallel(
    db_dsn: str,
) -> None:
    # Grouped by source (all of s0 first): a claim that only looked at the oldest pending
    # jobs would run s0 alone and starve s1 and s2.
    jobs = [
        EnqueueRequest("diag.sleep", {"seconds": _SLEEP_S, "sourceKey": f"s{source}"})
        for source in range(3)
        for _ in range(100)
    ]
    enqueue_sync(db_dsn, jobs)
    # Two slots per process for three sources: whenever all three run at once (asserted
    # below), both processes are running one of them.
    with worker_processes(db_dsn, 2, "--slots", "default=2"):
        rows = wait_until(lambda: _finished(db_dsn, 300), timeout_s=120, what="300 jobs")
    assert {r["status"] for r in rows} == {"completed"}
    by_source: dict[str, list[dict[str, object]]] = {}
    for r in rows:
        by_source.setdefault(str(r["source_key"]), []).append(r)
    assert sorted(by_source) == ["s0", "s1", "s2"]
    for source, runs in by_source.items():
        database, handlers = _intervals(runs)
        assert max_overlap(database) == 1, f"{source}: two claims overlapped"
        assert max_overlap(handlers) == 1, f"{source}: two handlers overlapped"
    # Parallel progress: at some instant all three sources were running a job.
    firsts = {s: min(h[0] for h in _intervals(r)[1]) for s, r in by_source.items()}
    lasts = {s: max(h[1] for h in _intervals(r)[1]) for s, r in by_source.items()}
    assert max(firsts.values()) < min(lasts.values()), (firsts, lasts)
    _, handlers = _intervals(rows)
    assert max_overlap(handlers) == 3
    assert len({r["claimed_by"] for r in rows}) == 2, "both processes took part"
