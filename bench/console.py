"""The console on big data (issue 14): 1,000,000 finished jobs and a 10,000-item batch in the
database, then the pages timed through HTTP against a real `jobrelay api` process, beside two
baselines measured in the same run: `GET /healthz` (no database) and `GET /readyz` (one
database round trip). Targets: each page under 300 ms, one /metrics scrape under 100 ms.

    .venv/bin/python -m bench.console               # N=30 requests per URL
    BENCH_CONSOLE_N=50 BENCH_CONSOLE_JOBS=200000 .venv/bin/python -m bench.console

Prints median and p95 per URL (ms), their ratio to /readyz, the load average, and the plans
of the statements that could grow with the history (list_jobs filters, processing_batches).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from psycopg_pool import AsyncConnectionPool

from bench.batches_common import environment
from jobrelay.auth.tenancy import Tenancy
from jobrelay.batches.creation import BatchLimits
from jobrelay.batches.service import _SQL as BATCH_SQL
from jobrelay.batches.service import BatchService
from jobrelay.db.pool import Connection
from jobrelay.jobs.service import _QUERIES as JOBS_SQL

JOBS = int(os.environ.get("BENCH_CONSOLE_JOBS", "1000000"))
ITEMS = int(os.environ.get("BENCH_CONSOLE_ITEMS", "10000"))
N = int(os.environ.get("BENCH_CONSOLE_N", "30"))
METRICS_TOKEN = "bench-metrics-" + "x" * 20

# Finished jobs over the last 7 days, UUIDv7-shaped ids carrying their creation time: four
# types, one in 50 failed (with an attempt row), one in 10 with a source key and a dedupe key,
# one in 20 of class ai. Loaded in chunks of 100,000 rows into `finished_jobs` (where a job
# that ends goes, migration 0017), each in the partition of its purge day under the default
# retention (job_retention `*`), as the pruner lays them out (PARTITIONS creates them first).
PARTITIONS = """
SELECT jobrelay_finished_partition_v1(day) AS name
FROM (
    SELECT DISTINCT ((now() - make_interval(days => d) + make_interval(secs => kept.retention_s))
                     AT TIME ZONE 'UTC')::date AS day
    FROM generate_series(-1, 8) AS d, job_retention AS kept
    WHERE kept.type = '*' AND kept.retention_s IS NOT NULL
) AS days
"""
BULK_JOBS = """
INSERT INTO finished_jobs (id, type, status, payload, dedupe_key, source_key, concurrency_class,
                           attempt_count, failure_kind, last_error, result, created_at,
                           updated_at, available_at, claimed_by, claimed_at, finished_at,
                           purge_on)
SELECT (lpad(to_hex((extract(epoch FROM t) * 1000)::bigint), 12, '0')
        || '7' || substr(md5(g::text), 1, 19))::uuid,
       'bulk.' || (g %% 4), CASE WHEN g %% 50 = 0 THEN 'failed' ELSE 'completed' END,
       jsonb_build_object('n', g),
       CASE WHEN g %% 10 = 0 THEN 'd:' || g END, CASE WHEN g %% 10 = 0 THEN 's:' || g END,
       CASE WHEN g %% 20 = 0 THEN 'ai' ELSE 'default' END, 1,
       CASE WHEN g %% 50 = 0 THEN 'permanent' END,
       CASE WHEN g %% 50 = 0 THEN 'the page was gone' END,
       CASE WHEN g %% 50 <> 0 THEN jsonb_build_object('ok', true) END,
       t, t, t, 'bench-worker', t, t + interval '50 milliseconds',
       ((t + interval '50 milliseconds' + make_interval(secs => kept.retention_s))
        AT TIME ZONE 'UTC')::date
FROM generate_series(%(low)s::int, %(high)s::int) AS g,
     LATERAL (
         SELECT now() - make_interval(secs => (%(total)s::int - g) * %(spacing)s::float8) AS t
     ) AS at,
     (SELECT retention_s FROM job_retention WHERE type = '*') AS kept
"""
BULK_ATTEMPTS = """
INSERT INTO job_attempts (job_id, claim_token, attempt, worker_id, started_at, ended_at,
                          outcome, error)
SELECT id, gen_random_uuid(), 1, claimed_by, claimed_at, finished_at, 'permanent', last_error
FROM all_jobs WHERE status = 'failed'
"""


def _ms(samples: list[float]) -> tuple[float, float]:
    ms = sorted(s * 1000 for s in samples)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return statistics.median(ms), p95


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


async def main() -> None:
    started = time.perf_counter()
    print(
        f"date {dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%MZ}, commit {_commit()}, "
        f"cpus {os.cpu_count()}, load average {os.getloadavg()}"
    )
    async with environment() as env:
        pool = env.pool
        # -- data ----------------------------------------------------------------------
        spacing = 7 * 86400 / JOBS
        chunk = 100_000
        async with pool.connection() as conn:
            await conn.execute(PARTITIONS)
            for low in range(1, JOBS + 1, chunk):
                await conn.execute(
                    BULK_JOBS,
                    {
                        "low": low,
                        "high": min(JOBS, low + chunk - 1),
                        "total": JOBS,
                        "spacing": spacing,
                    },
                )
            await conn.execute(BULK_ATTEMPTS)
            # A little live work: pending jobs and one running job.
            await conn.execute(
                "INSERT INTO jobs (id, type, payload) SELECT gen_random_uuid(), 'diag.noop', "
                "jsonb_build_object('n', g) FROM generate_series(1, 200) AS g"
            )
        service = BatchService(pool, BatchLimits(max_items=ITEMS, message_limit_bytes=262_144))
        batch = await service.create(
            organization_id=env.organization_id,
            project_id=env.project_id,
            batch_type="page_import",
            items=[{"url": f"https://example.com/page/{i}"} for i in range(ITEMS)],
            actor="bench",
        )
        async with pool.connection() as conn:
            await conn.execute(
                "UPDATE batch_item SET dispatched_at = now(), dispatch_attempts = 1 "
                "WHERE batch_id = %s AND position %% 10 <> 0",
                (batch.id,),
            )
            await conn.execute(
                "UPDATE page_import SET status = CASE WHEN random() < 0.6 THEN '1'::wf2des_status "
                "WHEN random() < 0.1 THEN '2'::wf2des_status ELSE status END "
                "WHERE batch_id = %s",
                (batch.id,),
            )
            for statement in (
                "VACUUM ANALYZE jobs",
                "VACUUM ANALYZE finished_jobs",
                "VACUUM ANALYZE job_attempts",
                "VACUUM ANALYZE batch",
                "VACUUM ANALYZE batch_item",
                "VACUUM ANALYZE page_import",
            ):
                await conn.execute(statement)
            row = await (
                await conn.execute(
                    "SELECT id FROM all_jobs WHERE status = 'failed' ORDER BY id DESC LIMIT 1"
                )
            ).fetchone()
            assert row is not None
            failed_job = row["id"]
            total = await (await conn.execute("SELECT count(*) AS n FROM all_jobs")).fetchone()
            assert total is not None
        await Tenancy(pool).add_member(env.organization_id, "ops", role="admin", actor="bench")
        print(
            f"loaded {total['n']} jobs and a {ITEMS}-item batch in "
            f"{time.perf_counter() - started:.0f} s"
        )

        # -- plans -----------------------------------------------------------------------
        async with pool.connection() as conn:
            plan = await (
                await conn.execute(
                    "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY ON) "
                    + BATCH_SQL.processing_batches,
                    {"limit": 50},
                )
            ).fetchall()
        print("processing_batches plan:")
        print("\n".join("  " + str(r["QUERY PLAN"]) for r in plan))
        await _list_plans(pool, failed_job)

        # -- the API ---------------------------------------------------------------------
        with tempfile.TemporaryDirectory() as data_dir:
            dsn = str(pool.conninfo)
            env_vars: dict[str, str] = {
                **os.environ,
                "DATABASE_URL": dsn,
                "JOBRELAY_ENV": "development",
                "JOBRELAY_AUTH_MODE": "local",
                "JOBRELAY_DATA_DIR": str(Path(data_dir)),
                "JOBRELAY_API_METRICS_TOKEN": METRICS_TOKEN,
                "JOBRELAY_LOG_LEVEL": "warning",
            }
            port = _free_port()
            process = _start_api(env_vars, port)
            base = f"http://127.0.0.1:{port}"
            try:
                await _wait_healthy(process, base)
                async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                    await _log_in(client)
                    await _measure(client, batch.id, str(failed_job), data_dir)
            finally:
                process.terminate()
                process.wait(timeout=30)
    print(f"load average after {os.getloadavg()}")


async def _list_plans(pool: AsyncConnectionPool[Connection], failed_job: object) -> None:
    """The plan of the jobs list (all_jobs) for some filters: the nodes that read jobs or a
    partition of finished_jobs, and the time."""
    base: dict[str, object] = dict.fromkeys(
        [
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
    )
    cases: dict[str, dict[str, object]] = {
        "no filter": {},
        "status=failed": {"status": "failed"},
        "type=bulk.1 status=completed": {"type": "bulk.1", "status": "completed"},
        "class=ai": {"class": "ai"},
        "status=cancelled (none)": {"status": "cancelled"},
        "class=gpu (none)": {"class": "gpu"},
        "type=bulk.2 status=failed": {"type": "bulk.2", "status": "failed"},
        "sourceKey": {"source_key": "s:123450"},
        "page after a failed job": {"before": failed_job},
    }
    print("list_jobs plans (the nodes reading jobs and finished_jobs):")
    async with pool.connection() as conn:
        for name, params in cases.items():
            cursor = await conn.execute(
                "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY ON) " + JOBS_SQL.list_jobs,
                {**base, **params, "limit": 51},
                prepare=False,
            )
            lines = [str(r["QUERY PLAN"]) for r in await cursor.fetchall()]
            nodes = [
                ln.strip()
                for ln in lines
                if " on jobs" in ln or " on finished_jobs" in ln or "Execution" in ln
            ]
            print(f"  {name}: " + " | ".join(nodes))


def _start_api(env_vars: dict[str, str], port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(Path(sys.executable).with_name("jobrelay")), "api", "--port", str(port)],
        env=env_vars,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _wait_healthy(process: subprocess.Popen[str], base: str) -> None:
    deadline = time.monotonic() + 120
    async with httpx.AsyncClient(base_url=base, timeout=2) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(
                    f"the API exited: {process.stderr.read() if process.stderr else ''}"
                )
            try:
                if (await client.get("/healthz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError("the API did not answer /healthz in 120 s")


async def _log_in(client: httpx.AsyncClient) -> None:
    form = await client.get("/ui/login")
    match = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert match, form.text
    answer = await client.post(
        "/ui/login", data={"csrf": match.group(1), "subject": "ops", "admin": "on", "next": "/ui/"}
    )
    assert answer.status_code == 303, answer.text


async def _measure(
    client: httpx.AsyncClient, batch_id: str, failed_job: str, data_dir: str
) -> None:
    week_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(days=6)).strftime("%Y-%m-%dT%H:%M")
    metrics = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    urls: list[tuple[str, str, dict[str, str]]] = [
        ("baseline GET /healthz (no database)", "/healthz", {}),
        ("baseline GET /readyz (one round trip)", "/readyz", {}),
        ("overview /ui/overview", "/ui/overview", {}),
        ("overview fragment /ui/overview/live", "/ui/overview/live", {}),
        ("jobs /ui/jobs", "/ui/jobs", {}),
        ("jobs status=failed", "/ui/jobs?status=failed", {}),
        ("jobs type+status", "/ui/jobs?type=bulk.1&status=completed", {}),
        ("jobs class=ai", "/ui/jobs?class=ai", {}),
        ("jobs status=cancelled (none)", "/ui/jobs?status=cancelled", {}),
        ("jobs class=gpu (none)", "/ui/jobs?class=gpu", {}),
        ("jobs type=bulk.2&status=failed", "/ui/jobs?type=bulk.2&status=failed", {}),
        ("jobs sourceKey", "/ui/jobs?sourceKey=s:123450", {}),
        ("jobs dedupeKey", "/ui/jobs?dedupeKey=d:123450", {}),
        ("jobs created before 6 days ago", f"/ui/jobs?createdTo={week_ago}", {}),
        ("jobs finished from 6 days ago", f"/ui/jobs?finishedFrom={week_ago}", {}),
        ("JSON /v1/jobs?status=failed&limit=50", "/v1/jobs?status=failed&limit=50", {}),
        ("job page (failed job)", f"/ui/jobs/{failed_job}", {}),
        ("batch page (10,000 items)", f"/ui/batches/{batch_id}", {}),
        ("batch fragment /live", f"/ui/batches/{batch_id}/live", {}),
        ("GET /metrics (one scrape)", "/metrics", metrics),
    ]
    api_token = None
    results: list[tuple[str, float, float]] = []
    for name, url, headers in urls:
        if url.startswith("/v1/"):
            if api_token is None:
                api_token = _mint_token(data_dir)
            headers = {"Authorization": f"Bearer {api_token}"}
        first = await client.get(url, headers=headers)  # warm-up, and a check
        assert first.status_code == 200, (url, first.status_code, first.text[:500])
        samples = []
        for _ in range(N):
            start = time.perf_counter()
            response = await client.get(url, headers=headers)
            samples.append(time.perf_counter() - start)
            assert response.status_code == 200, url
        median, p95 = _ms(samples)
        results.append((name, median, p95))
    readyz = results[1][1]
    print(f"\n{N} sequential requests per URL; ms (ratio of the median to /readyz's)")
    print(f"{'what':<42} {'median':>8} {'p95':>8} {'ratio':>7}")
    for name, median, p95 in results:
        print(f"{name:<42} {median:8.1f} {p95:8.1f} {median / readyz:7.1f}")


def _mint_token(data_dir: str) -> str:
    """An admin JWT of the API's local issuer (the `jobrelay token` command)."""
    out = subprocess.run(
        [str(Path(sys.executable).with_name("jobrelay")), "token", "--sub", "ops", "--admin"],
        env={**os.environ, "JOBRELAY_DATA_DIR": data_dir, "JOBRELAY_AUTH_MODE": "local"},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


if __name__ == "__main__":
    asyncio.run(main())
