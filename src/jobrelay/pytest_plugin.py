"""pytest fixtures for your own job types, loaded by pytest wherever jobrelay is installed.

Every test that asks for one of them gets a PostgreSQL database of its own at the newest
schema (a copy of a template migrated once per session: fast), so tests never see each
other's jobs and may run in any order:

* `jobrelay_databases` (session): the server; `DATABASE_URL` when set (its role must be
  allowed to create databases), else an embedded PostgreSQL in a temporary folder.
* `jobrelay_dsn`: the DSN of the test's fresh database, dropped after the test.
* `jobrelay_job_types`: your `JobTypes`, from the `jobrelay_app` ini option (`[tool.pytest.
  ini_options] jobrelay_app = "myapp.jobs:job_types"`) or `JOBRELAY_APP`; override the
  fixture in your conftest.py to build them otherwise.
* `jobrelay_registry`: their checked registry.
* `jobrelay_pool`: an async connection pool on the test's database.
* `jobrelay_runner`: a `jobrelay.testing.JobRunner`: `await jobrelay_runner.run_job(type,
  payload)` runs one job's attempt with a real worker and returns the stored job;
  `await jobrelay_runner.drain()` runs everything there is to run now.
* `jobrelay_enqueuer`: a `jobrelay.Enqueuer` of your types, to enqueue in a transaction of
  your own (`await jobrelay_enqueuer.enqueue(conn, EnqueueRequest(...))`).
* `jobrelay_api`: a `jobrelay.testing.TestApi`: the real API over the test's database with
  your types loaded; `await jobrelay_api.http.post("/v1/jobs", json=...)` as an admin.

Async fixtures need pytest-asyncio (any mode: they are declared with its decorator).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.enqueue import DEFAULT_PAYLOAD_LIMIT_BYTES, Enqueuer
from jobrelay.jobs.loading import AppLoadError, load_app
from jobrelay.jobs.registry import Registry
from jobrelay.testing import JobRunner, TestApi, TestDatabases, open_test_api

# Loaded in every pytest run of an environment with jobrelay installed: without
# pytest-asyncio the async fixtures are simply not offered.
_HAVE_PYTEST_ASYNCIO = importlib.util.find_spec("pytest_asyncio") is not None

APP_OPTION = "jobrelay_app"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(APP_OPTION, "your job types for jobrelay's fixtures: package.module:attribute")


@pytest.fixture(scope="session")
def jobrelay_databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestDatabases]:
    """The PostgreSQL server of the session's jobrelay databases."""
    databases = TestDatabases.start(tmp_path_factory.mktemp("jobrelay-pg"))
    try:
        yield databases
    finally:
        databases.close()


@pytest.fixture
def jobrelay_dsn(jobrelay_databases: TestDatabases) -> Iterator[str]:
    """The DSN of a fresh database at jobrelay's newest schema, dropped after the test."""
    name = jobrelay_databases.create()
    try:
        yield jobrelay_databases.dsn(name)
    finally:
        jobrelay_databases.drop(name)


@pytest.fixture
def jobrelay_job_types(pytestconfig: pytest.Config) -> JobTypes:
    """The job types under test: the `jobrelay_app` ini option, else `JOBRELAY_APP`."""
    reference = pytestconfig.getini(APP_OPTION) or os.environ.get("JOBRELAY_APP")
    if not reference:
        raise pytest.UsageError(
            f"jobrelay's fixtures need your job types: set `{APP_OPTION} = "
            '"package.module:attribute"` under [tool.pytest.ini_options], or JOBRELAY_APP, '
            "or define a `jobrelay_job_types` fixture returning your JobTypes"
        )
    try:
        return load_app(str(reference))
    except AppLoadError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.fixture
def jobrelay_registry(jobrelay_job_types: JobTypes) -> Registry:
    """The checked registry of `jobrelay_job_types`."""
    return jobrelay_job_types.registry()


@pytest.fixture
def jobrelay_enqueuer(jobrelay_registry: Registry) -> Enqueuer:
    """An `Enqueuer` of the test's job types (the API's payload limit)."""
    return Enqueuer(jobrelay_registry, payload_limit_bytes=DEFAULT_PAYLOAD_LIMIT_BYTES)


if _HAVE_PYTEST_ASYNCIO:
    import pytest_asyncio
    from psycopg_pool import AsyncConnectionPool

    from jobrelay.db.pool import Connection, open_pool

    @pytest_asyncio.fixture
    async def jobrelay_pool(jobrelay_dsn: str) -> AsyncIterator[AsyncConnectionPool[Connection]]:
        """An async connection pool on the test's database."""
        pool = await open_pool(jobrelay_dsn, min_size=1, max_size=6)
        try:
            yield pool
        finally:
            await pool.close()

    @pytest_asyncio.fixture
    async def jobrelay_api(
        jobrelay_dsn: str, jobrelay_job_types: JobTypes, tmp_path: Path
    ) -> AsyncIterator[TestApi]:
        """The real API over the test's database, your types loaded; `.http` as an admin."""
        async with open_test_api(jobrelay_dsn, tmp_path / "jobrelay", jobrelay_job_types) as api:
            yield api

    @pytest_asyncio.fixture
    async def jobrelay_runner(
        jobrelay_pool: AsyncConnectionPool[Connection], jobrelay_registry: Registry
    ) -> JobRunner:
        """Runs the test's jobs with a real worker: `run_job(type, payload)`, `drain()`."""
        return JobRunner(jobrelay_pool, jobrelay_registry)
