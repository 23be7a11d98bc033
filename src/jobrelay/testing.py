"""Test your own job types against a real PostgreSQL: a database per test, a worker per test.

With jobrelay installed, pytest loads its plugin (`jobrelay.pytest_plugin`, the `pytest11`
entry point), whose fixtures are built from the pieces here:

* `TestDatabases`: a PostgreSQL server for a test session (`DATABASE_URL` when set, whose
  role may create databases, else an embedded server in a temporary folder), a template
  database migrated once, and a fresh copy of it per test (copying a template is fast).
* `JobRunner`: runs the jobs of one test with a real worker of the engine: `run_job` enqueues
  one job exactly as the API would and runs it until its attempt has ended; `drain` runs
  every job the test enqueued (and their children) until none is left to run now. Handlers,
  fenced outputs, retries and timeouts all run for real::

    async def test_greet(jobrelay_runner):
        job = await jobrelay_runner.run_job("example.greet", {"name": "ada"})
        assert job.status == "completed" and job.result == {"greeting": "hello ada"}

`run_job(registry, dsn, type, payload)` does the same without the plugin, on a database you
migrated yourself (`jobrelay migrate`, or `jobrelay.testing.migrate(dsn)`).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from jobrelay.db import migrate as _migrate
from jobrelay.db.embedded import EmbeddedPostgres
from jobrelay.db.pool import Connection, open_pool
from jobrelay.domain.jobs import JobStatus
from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.enqueue import enqueue
from jobrelay.jobs.models import Job
from jobrelay.jobs.registry import Registry
from jobrelay.jobs.service import get_job
from jobrelay.jobs.worker import Worker, WorkerConfig

if TYPE_CHECKING:  # the API is imported only by the tests that ask for it
    import httpx

    from jobrelay.bootstrap import Services
    from jobrelay.client import AsyncJobrelayClient

__all__ = ["JobRunner", "TestApi", "TestDatabases", "migrate", "open_test_api", "run_job"]

# Durability is not under test in a throwaway server, and these keep a suite fast.
FAST_SERVER_OPTIONS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def migrate(dsn: str) -> None:
    """Bring the database at `dsn` to jobrelay's newest schema."""
    _migrate.upgrade(dsn)


class TestDatabases:
    """A PostgreSQL server for tests: `create()` gives a fresh database at the newest schema
    (a copy of a template migrated once), `drop(name)` removes it, `close()` ends it all."""

    __test__ = False  # not a test class, whatever pytest's name rules say

    def __init__(self, admin_dsn: str, *, server: Any | None = None) -> None:
        self.admin_dsn = admin_dsn
        self.server = server  # what `close()` stops: an embedded or system server, or None
        self._template: str | None = None

    @classmethod
    def start(cls, folder: Path) -> TestDatabases:
        """`DATABASE_URL` when set (its role must create databases), else an embedded
        server with its data in `folder`."""
        url = os.environ.get("DATABASE_URL")
        if url:
            return cls(url)
        server = EmbeddedPostgres(folder / "pgdata", server_options=FAST_SERVER_OPTIONS)
        return cls(server.start(), server=server)

    def dsn(self, dbname: str) -> str:
        """The DSN of database `dbname` on this server."""
        return psycopg.conninfo.make_conninfo(self.admin_dsn, dbname=dbname)

    def execute_admin(self, statement: str | sql.Composable) -> None:
        """Run one statement on the server's admin connection (autocommit)."""
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(statement)  # type: ignore[arg-type]

    def template(self) -> str:
        """The name of the database migrated to the newest schema, made once per session."""
        if self._template is None:
            name = f"jobrelay_tpl_{os.getpid()}"
            self.execute_admin(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
            self.execute_admin(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            _migrate.upgrade(self.dsn(name))
            self._template = name
        return self._template

    def create(self, *, migrated: bool = True) -> str:
        """A fresh database (a copy of the template when `migrated`); returns its name."""
        name = f"jobrelay_t_{uuid.uuid4().hex[:16]}"
        if migrated:
            statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(self.template())
            )
        else:
            statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        self.execute_admin(statement)
        return name

    def drop(self, name: str) -> None:
        """Drop database `name`, closing whatever is still connected to it."""
        self.execute_admin(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    def close(self) -> None:
        """Drop the template and stop the server this object started."""
        if self._template:
            self.drop(self._template)
            self._template = None
        if self.server is not None:
            self.server.stop()


class JobRunner:
    """Runs jobs of `registry` in the database of `pool` with a real worker, one call at a
    time: `run_job` for one job's attempt, `drain` for everything there is to run now."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        registry: Registry,
        *,
        poll_interval_s: float = 0.02,
    ) -> None:
        self.pool = pool
        self.registry = registry
        self._poll_s = poll_interval_s

    async def enqueue(self, type: str, payload: Mapping[str, Any]) -> Job:
        """Enqueue one job as the API would (validated, deduplicated); returns it as stored."""
        async with self.pool.connection() as conn:
            enqueued = await enqueue(conn, self.registry, type, payload)
            return await get_job(conn, enqueued.id)

    async def run_job(
        self, type: str, payload: Mapping[str, Any], *, timeout_s: float = 30.0
    ) -> Job:
        """Enqueue one `type` job and run it once; returns the stored job after the attempt.

        A completed or failed job is returned as it ended; a retried one is returned pending
        with `last_error` and `attempt_count == 1`. Raises `TimeoutError` when the attempt
        has not ended within `timeout_s`, and `InvalidInput` when the payload does not
        validate.
        """
        job = await self.enqueue(type, payload)
        async with self._worker([job.concurrency_class], timeout_s):
            deadline = time.monotonic() + timeout_s
            while not _attempt_ended(job):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"job {job.id} ({type}) did not end within {timeout_s} s")
                await asyncio.sleep(self._poll_s)
                async with self.pool.connection() as conn:
                    job = await get_job(conn, job.id)
        return job

    async def drain(self, *, timeout_s: float = 30.0) -> list[Job]:
        """Run jobs until none is pending and available now, nor running; returns every job
        of the database, oldest first. Jobs waiting for a later time (a retry's backoff, a
        delay) stay pending. Raises `TimeoutError` naming what is left after `timeout_s`."""
        classes = sorted({*self.registry.classes, *(t.concurrency_class for t in self.registry)})
        async with self._worker(classes, timeout_s):
            deadline = time.monotonic() + timeout_s
            while (left := await self._runnable()) > 0:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{left} jobs still to run after {timeout_s} s")
                await asyncio.sleep(self._poll_s)
        async with self.pool.connection() as conn:
            cursor = await conn.execute("SELECT * FROM all_jobs ORDER BY created_at, id")
            return [Job.from_row(row) for row in await cursor.fetchall()]

    async def _runnable(self) -> int:
        # clock_timestamp(), not now(): now() is the transaction's start, taken before this
        # statement's snapshot, so a retry committed in between (available at its own
        # clock_timestamp()) would look "later" and end the drain with the job pending.
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT count(*) AS n FROM jobs WHERE status = 'in_progress' OR (status ="
                " 'pending' AND role <> 'parent' AND available_at <= clock_timestamp())"
            )
            row = await cursor.fetchone()
        return int(str(row["n"])) if row else 0

    def _worker(self, classes: Sequence[str], timeout_s: float) -> _RunningWorker:
        config = WorkerConfig(
            slots=dict.fromkeys(classes, 4),
            poll_interval_s=self._poll_s,
            listen=False,
            retention_s=None,
            shutdown_grace_s=timeout_s,
        )
        return _RunningWorker(Worker(pool=self.pool, registry=self.registry, config=config))


class _RunningWorker:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def __aenter__(self) -> Worker:
        await self.worker.start()
        return self.worker

    async def __aexit__(self, *exc: object) -> None:
        await self.worker.stop()


async def run_job(
    registry: Registry,
    dsn: str,
    type: str,
    payload: Mapping[str, Any],
    *,
    timeout_s: float = 30.0,
) -> Job:
    """Enqueue one `type` job in the (migrated) database at `dsn` and run it once; see
    `JobRunner.run_job`."""
    pool = await open_pool(dsn, min_size=1, max_size=4)
    try:
        return await JobRunner(pool, registry).run_job(type, payload, timeout_s=timeout_s)
    finally:
        await pool.close()


def _attempt_ended(job: Job) -> bool:
    if job.status is JobStatus.IN_PROGRESS:
        return False
    return job.status is not JobStatus.PENDING or job.attempt_count >= 1


@dataclass
class TestApi:
    """jobrelay's real API (the ASGI app, no port) over a test's database, with your job
    types loaded beside the product's. `http` is an `httpx.AsyncClient` on it that sends an
    admin's token; `token()` and `headers()` mint others from the local issuer."""

    __test__ = False

    http: httpx.AsyncClient
    services: Services

    def token(self, sub: str = "tester", *, admin: bool = False) -> str:
        """A bearer token of the local issuer for `sub` (in the admin group when `admin`)."""
        assert self.services.local_issuer is not None
        return self.services.local_issuer.mint(sub, admin=admin)

    def headers(self, sub: str = "tester", *, admin: bool = False) -> dict[str, str]:
        """`Authorization` for `sub`, to pass as `headers=` of one request."""
        return {"Authorization": f"Bearer {self.token(sub, admin=admin)}"}

    def client(self) -> AsyncJobrelayClient:
        """The typed client (`jobrelay.client`) on this API, as the admin of `http`; it
        shares `http`, which the fixture closes."""
        from jobrelay.client import AsyncJobrelayClient

        return AsyncJobrelayClient(http=self.http)


@asynccontextmanager
async def open_test_api(
    dsn: str, data_dir: Path, job_types: JobTypes | None = None
) -> AsyncIterator[TestApi]:
    """The API over the migrated database at `dsn` (local auth, its issuer's keys in
    `data_dir`), with `job_types` loaded; closed with the block."""
    import httpx

    from jobrelay.api import create_app
    from jobrelay.bootstrap import build_services
    from jobrelay.settings import load_settings

    # Development defaults whatever the environment says, and no JOBRELAY_APP: the job
    # types are the ones given here (naming them twice would be refused).
    settings = load_settings(
        env="development", data_dir=data_dir, db={"pool_min": 1, "pool_max": 4}, jobs={"app": []}
    )
    apps = [job_types] if job_types is not None else []
    async with build_services(settings, dsn, serves_api=True, apps=apps) as services:
        assert services.local_issuer is not None  # local auth: settings above
        admin = services.local_issuer.mint("tester", admin=True)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(services)),
            base_url="http://jobrelay.test",
            headers={"Authorization": f"Bearer {admin}"},
        ) as http:
            yield TestApi(http=http, services=services)
