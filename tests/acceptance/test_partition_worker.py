"""One worker cut off from the database while another stays healthy (issue 24).

Two real `jobrelay worker` processes share a database; the first reaches it through a TCP
relay whose port is black-holed (packets dropped, no RST) for longer than the lease. The cut
worker logs that it is failing within 10 s, the healthy one rescues the jobs the cut one
held once their leases expire, the cut worker's late completions are refused (fencing), and
after the heal the cut worker claims again within seconds (the figure is printed; the
target is measured by bench/chaos). Every job ends completed, exactly once.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass, field

import psycopg
import pytest

from jobrelay.bootstrap.database import bounded_dsn
from jobrelay.settings import load_settings
from tests.harness import wait_until
from tests.jobs_support import query, start_worker, stop_worker
from tests.partition import Blackhole, TcpRelay

pytestmark = pytest.mark.long

LEASE_S = 4.0
CUT_S = 12.0  # three leases
NOTICE_CEILING_S = 10.0
RECLAIM_CEILING_S = 10.0
JOBS = 24


@dataclass
class LogLines:
    """The JSON lines a process writes, each with the monotonic time it was read."""

    process: subprocess.Popen[str]
    lines: list[tuple[float, dict[str, object]]] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.raw.append(line)
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                self.lines.append((time.monotonic(), record))

    def first(self, after: float, **match: object) -> float | None:
        for at, record in list(self.lines):
            if at >= after and all(record.get(k) == v for k, v in match.items()):
                return at
        return None


def _enqueue(dsn: str, count: int, seconds: float) -> list[str]:
    payload = json.dumps({"seconds": seconds})
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "INSERT INTO jobs (id, type, payload) "
            "SELECT gen_random_uuid(), 'diag.sleep', %s::jsonb "
            "FROM generate_series(1, %s) RETURNING id",
            [payload, count],
        ).fetchall()
    return [str(row[0]) for row in rows]


def test_a_cut_worker_is_rescued_and_claims_again_after_the_heal(
    relayed: tuple[TcpRelay, str], db_dsn: str
) -> None:
    relay, relay_dsn = relayed
    env = {
        "JOBRELAY_JOBS_LEASE_S": str(LEASE_S),
        "JOBRELAY_LOG_LEVEL": "INFO",
        "JOBRELAY_LOG_FORMAT": "json",
        "JOBRELAY_WORKER_CONCURRENCY": "4",
    }
    # The DSN `bootstrap.database` hands a worker, with the settings' network timeouts.
    cut_dsn = bounded_dsn(load_settings(), relay_dsn)
    cut = start_worker(cut_dsn, read_live=True, **env)
    cut_log = LogLines(cut)
    healthy = start_worker(db_dsn, read_live=True, **env)
    try:
        cut_id = wait_until(
            lambda: next(
                (line.split()[1] for line in cut_log.raw if line.startswith("worker ")), None
            ),
            timeout_s=60,
            what="the cut worker to start",
        )
        ids = _enqueue(db_dsn, JOBS, seconds=1.5)
        held = wait_until(
            lambda: query(
                db_dsn,
                "SELECT id::text FROM all_jobs WHERE claimed_by = %s AND status = 'in_progress'",
                cut_id,
            ),
            timeout_s=30,
            what="the cut worker to hold jobs",
        )
        hole = Blackhole(relay.port)
        hole.cut()
        cut_at = time.monotonic()
        try:
            wait_until(
                lambda: cut_log.first(cut_at, event="loop.failing"),
                timeout_s=NOTICE_CEILING_S + 5,
                what="the cut worker to log that it is failing",
            )
            noticed = (cut_log.first(cut_at, event="loop.failing") or 0) - cut_at
            # Past the lease the healthy worker rescues and finishes what the cut one held.
            wait_until(
                lambda: (
                    query(
                        db_dsn,
                        "SELECT count(*) AS n FROM all_jobs WHERE id = ANY(%s::uuid[]) "
                        "AND status <> 'completed'",
                        ids,
                    )[0]["n"]
                    == 0
                ),
                timeout_s=60,
                what="every job completed while the cut lasts",
            )
            time.sleep(max(0.0, CUT_S - (time.monotonic() - cut_at)))  # the cut's length
        finally:
            hole.heal()
        healed_at = time.monotonic()
        reclaimed = wait_until(
            lambda: cut_log.first(healed_at, event="loop.recovered", loop="worker-claim"),
            timeout_s=RECLAIM_CEILING_S + 20,
            what="the cut worker to claim again",
        )
        # And it works again: new jobs that only it is left to claim are completed by it.
        stop_worker(healthy)
        more = _enqueue(db_dsn, 4, seconds=0.0)
        wait_until(
            lambda: (
                query(
                    db_dsn,
                    "SELECT count(*) AS n FROM all_jobs WHERE id = ANY(%s::uuid[]) "
                    "AND status = 'completed' AND claimed_by = %s",
                    more,
                    cut_id,
                )[0]["n"]
                == len(more)
            ),
            timeout_s=30,
            what="the cut worker to complete new jobs",
        )
    finally:
        healthy_output = stop_worker(healthy)
        cut_output = stop_worker(cut)
    print(
        f"\ncut worker: failing logged {noticed:.2f} s after the cut, claimed again "
        f"{reclaimed - healed_at:.2f} s after the heal"
    )
    assert cut.returncode == 0, cut_output
    assert healthy.returncode == 0, healthy_output
    assert noticed < NOTICE_CEILING_S, noticed
    assert reclaimed - healed_at < RECLAIM_CEILING_S, reclaimed - healed_at
    rows = query(
        db_dsn,
        "SELECT status, count(*) AS n, max(attempt_count) AS most FROM all_jobs "
        "WHERE id = ANY(%s::uuid[]) GROUP BY status",
        ids,
    )
    assert [(r["status"], r["n"]) for r in rows] == [("completed", JOBS)], rows
    # Fencing: what the cut worker held was rescued (its attempt recorded as a lost lease)
    # and completed by the healthy worker; the cut worker's late writes changed nothing.
    held_ids = [row["id"] for row in held]
    rescued = query(
        db_dsn,
        "SELECT j.id::text, j.claimed_by, a.worker_id AS lost_by FROM all_jobs AS j "
        "JOIN job_attempts AS a ON a.job_id = j.id AND a.outcome = 'lease_expired' "
        "WHERE j.id = ANY(%s::uuid[])",
        held_ids,
    )
    assert {row["id"] for row in rescued} == set(held_ids), (rescued, held_ids)
    assert all(row["lost_by"] == cut_id and row["claimed_by"] != cut_id for row in rescued)
