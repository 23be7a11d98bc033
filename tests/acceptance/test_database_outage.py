"""A database outage under HTTP load (issue 13): PostgreSQL is really crashed with
`pg_ctl stop -m immediate` while clients enqueue through a real `jobrelay api` process, and
a real worker, relay and SQS worker run beside it. While it is down every answer is a 503
problem with Retry-After, never a 500 and never a hang; afterwards every job the API
acknowledged is there and the worker claims again. The time from the database accepting
connections to the first claim is measured and printed."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from tests.e2e_support import running_stack
from tests.harness import AwsTestResources, run_cli, wait_until

CLIENTS = 4
CLIENT_TIMEOUT_S = 2.0  # "no request left without an answer for more than 2 s"


@dataclass
class Load:
    """Clients enqueueing `diag.noop` jobs over HTTP until stopped; every answer recorded."""

    base_url: str
    token: str
    stop: threading.Event = field(default_factory=threading.Event)
    # (status, seconds to answer, job id, Retry-After, monotonic time of the answer)
    answers: list[tuple[int, float, str | None, str | None, float]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # timeouts, refused connections
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.base_url, timeout=CLIENT_TIMEOUT_S) as client:
            while not self.stop.is_set():
                marker = uuid.uuid4().hex
                started = time.monotonic()
                try:
                    response = client.post(
                        "/v1/jobs",
                        json={"type": "diag.noop", "payload": {"marker": marker}, "priority": 5},
                        headers=headers,
                    )
                except httpx.HTTPError as exc:
                    with self.lock:
                        self.failures.append(
                            f"{type(exc).__name__} after {time.monotonic() - started:.2f}s"
                        )
                    continue
                job_id = response.json().get("id") if response.status_code < 300 else None
                with self.lock:
                    self.answers.append(
                        (
                            response.status_code,
                            time.monotonic() - started,
                            job_id,
                            response.headers.get("retry-after"),
                            time.monotonic(),
                        )
                    )
                if response.status_code == 503:
                    time.sleep(0.05)  # a polite client backs off (Retry-After says 1 s)

    def count(self, status: int) -> int:
        with self.lock:
            return sum(1 for answer in self.answers if answer[0] == status)


def _accepting(dsn: str) -> psycopg.Connection[dict[str, object]] | None:
    try:
        return psycopg.connect(dsn, autocommit=True, row_factory=dict_row, connect_timeout=1)
    except psycopg.OperationalError:
        return None


@pytest.mark.long
def test_a_database_crash_under_load_is_503s_then_everything_resumes(
    tmp_path: Path, emulator_url: str, aws_resources: AwsTestResources
) -> None:
    server = EmbeddedPostgres(tmp_path / "pgdata")  # this test's own server: it crashes it
    dsn = server.start()
    migrate.upgrade(dsn)
    data_dir = tmp_path / "data"
    try:
        with running_stack(
            dsn,
            emulator_url,
            aws_resources,
            data_dir,
            JOBRELAY_WORKER_POLL_INTERVAL_S="0.25",
            JOBRELAY_LOG_LEVEL="INFO",
        ) as stack:
            # Every process past its start-up (which refuses an unreachable database, by
            # design): the worker's and the relay's LISTEN connections are open.
            wait_until(lambda: _listeners(dsn) >= 2, timeout_s=60, what="worker and relay up")
            minted = run_cli("token", "--sub", "ops", "--admin", JOBRELAY_DATA_DIR=str(data_dir))
            assert minted.returncode == 0, minted.stderr
            load = Load(stack.base_url, minted.stdout.strip())
            clients = [threading.Thread(target=load.run) for _ in range(CLIENTS)]
            for client in clients:
                client.start()
            try:
                wait_until(lambda: load.count(201) >= 20, timeout_s=60, what="load before")
                server.stop(mode="immediate")  # a crash: no checkpoint, recovery on start
                wait_until(lambda: load.count(503) >= 10, timeout_s=60, what="503s while down")
                server.start()
                conn = wait_until(lambda: _accepting(dsn), timeout_s=60, what="the restart")
                with conn:
                    accepted_mono = time.monotonic()
                    accepted_at = conn.execute("SELECT clock_timestamp() AS t").fetchone()["t"]  # type: ignore[index]
                after = load.count(201)
                wait_until(lambda: load.count(201) >= after + 20, timeout_s=60, what="load after")
            finally:
                load.stop.set()
                for client in clients:
                    client.join(timeout=30)
            first_claim = wait_until(
                lambda: _first_claim_after(dsn, accepted_at), timeout_s=60, what="a claim"
            )
            acknowledged = {job_id for _, _, job_id, _, _ in load.answers if job_id}
            wait_until(
                lambda: _all_completed(dsn, acknowledged), timeout_s=120, what="every job done"
            )
            for name in ("api", "worker", "relay", "sqs-worker"):
                assert stack.processes[name].poll() is None, (name, stack.log(name))
            worker_log = stack.log("worker")
    finally:
        server.stop()

    statuses = {status for status, _, _, _, _ in load.answers}
    slowest = max(elapsed for _, elapsed, _, _, _ in load.answers)
    api_back_s = (
        min(t for status, _, _, _, t in load.answers if status == 201 and t > accepted_mono)
        - accepted_mono
    )
    claim_s = (first_claim - accepted_at).total_seconds()
    print(
        f"\nanswers {len(load.answers)} ({load.count(201)} created, {load.count(503)} 503), "
        f"slowest answer {slowest:.2f}s; after the database accepted connections again: "
        f"first 201 in {api_back_s:.2f}s, first claim in {claim_s:.2f}s"
    )
    assert load.failures == [], load.failures  # no hang past 2 s, no refused connection
    assert statuses <= {200, 201, 503}, statuses  # never a 500
    assert all(retry_after == "1" for status, _, _, retry_after, _ in load.answers if status == 503)
    assert claim_s < 10, f"the worker took {claim_s:.2f}s to claim again"
    assert worker_log.count("loop.failing") <= 4, "one line per state change, not per retry"


def _listeners(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM pg_stat_activity "
            "WHERE query LIKE '%%LISTEN jobrelay%%' AND pid <> pg_backend_pid()"
        ).fetchone()
    return 0 if row is None else int(row["n"])  # type: ignore[call-overload]


def _first_claim_after(dsn: str, moment: object) -> object | None:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        row = conn.execute(
            "SELECT min(claimed_at) AS t FROM all_jobs WHERE claimed_at > %s", (moment,)
        ).fetchone()
    return None if row is None else row["t"]


def _all_completed(dsn: str, ids: set[str]) -> bool:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT id::text AS id, status FROM all_jobs WHERE id = ANY(%s::uuid[])", (list(ids),)
        ).fetchall()
    found = {str(r["id"]): r["status"] for r in rows}
    assert set(found) == ids, f"{len(ids - set(found))} acknowledged jobs are missing"
    return all(status == "completed" for status in found.values())
