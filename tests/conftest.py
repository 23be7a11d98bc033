"""Session-wide fixtures: one PostgreSQL server, a migrated template database cloned per
test, the SQS/S3 emulator, and Hypothesis profiles."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from psycopg_pool import AsyncConnectionPool

from jobrelay.aws.clients import AwsEndpoint, ensure_resources
from jobrelay.aws.emulator import LocalEmulator
from jobrelay.db.pool import Connection, open_pool
from tests.harness import (
    ApiHarness,
    AwsTestResources,
    PgBouncer,
    PgServer,
    api_harness,
    start_server,
)
from tests.partition import TcpRelay, postgres_relay, unavailable

# The suite runs the local stack's defaults (embedded PostgreSQL, built-in webhook secret,
# local issuer), which `jobrelay api`, `worker`, `relay` and `sqs-worker` refuse when they
# default to production. Every process the tests start inherits this; the production tests
# override it explicitly (`cli_env(JOBRELAY_ENV=...)`).
os.environ["JOBRELAY_ENV"] = "development"

_OWN_BASETEMP: list[str] = []


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # pytest keeps only the newest three /tmp/pytest-of-<user>/pytest-N folders and prunes the
    # rest when a session starts, so concurrent sessions (worktrees, helpers) could delete a
    # running session's embedded PostgreSQL. A private base folder per session avoids that.
    if not config.option.basetemp:
        config.option.basetemp = tempfile.mkdtemp(prefix="jobrelay-pytest-")
        _OWN_BASETEMP.append(config.option.basetemp)
    # The default data directory is per user ($XDG_STATE_HOME/jobrelay): every command the
    # tests start, and every Settings they build, gets the session's own instead, so a test
    # never reads or writes the real user's stack.
    state_home = Path(tempfile.mkdtemp(prefix="jobrelay-state-"))
    _OWN_BASETEMP.append(str(state_home))
    os.environ["XDG_STATE_HOME"] = str(state_home)


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _OWN_BASETEMP:
        shutil.rmtree(folder, ignore_errors=True)


settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=25, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    server = start_server(tmp_path_factory.mktemp("pg"))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def db_dsn(pg_server: PgServer) -> Iterator[str]:
    """A DSN of a fresh database at the newest migration, dropped after the test."""
    name = pg_server.create()
    try:
        yield pg_server.dsn(name)
    finally:
        pg_server.drop(name)


@pytest.fixture
def relayed(db_dsn: str) -> Iterator[tuple[TcpRelay, str]]:
    """A TCP relay of this test's own in front of `db_dsn`'s server and the DSN through it:
    cut its port with `tests.partition.Blackhole(relay.port)` (skipped without root/tc)."""
    if (reason := unavailable()) is not None:
        pytest.skip(reason)
    relay, dsn = postgres_relay(db_dsn)
    with relay:
        yield relay, dsn


@pytest.fixture
def empty_db_dsn(pg_server: PgServer) -> Iterator[str]:
    """A DSN of a fresh, unmigrated database."""
    name = pg_server.create(migrated=False)
    try:
        yield pg_server.dsn(name)
    finally:
        pg_server.drop(name)


@pytest.fixture
async def pool(db_dsn: str) -> AsyncIterator[AsyncConnectionPool[Connection]]:
    p = await open_pool(db_dsn, min_size=1, max_size=8)
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture(scope="session")
def emulator_url() -> Iterator[str]:
    """One moto server for the session; tests isolate by using their own queue and bucket."""
    configured = os.environ.get("JOBRELAY_TEST_AWS_ENDPOINT_URL")
    if configured:
        yield configured
        return
    emulator = LocalEmulator()
    url = emulator.start()
    try:
        yield url
    finally:
        emulator.stop()


@pytest.fixture
def aws(emulator_url: str) -> AwsEndpoint:
    return AwsEndpoint(region="us-east-1", endpoint_url=emulator_url)


@pytest.fixture
async def aws_resources(aws: AwsEndpoint) -> AwsTestResources:
    """A queue (with its dead-letter queue) and a bucket of this test's own."""
    suffix = uuid.uuid4().hex[:12]
    bucket = f"results-{suffix}"
    queues = await ensure_resources(
        aws,
        queue_name=f"work-{suffix}",
        dlq_name=f"dlq-{suffix}",
        bucket=bucket,
        max_receive_count=3,
    )
    return AwsTestResources(queues=queues, bucket=bucket)


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def issuer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One local-issuer key pair for the session (RSA key generation is not free)."""
    return tmp_path_factory.mktemp("issuer")


@pytest.fixture
async def api(db_dsn: str, issuer_dir: Path) -> AsyncIterator[ApiHarness]:
    """The API over a fresh database; see `tests.harness.ApiHarness`."""
    async with api_harness(db_dsn, issuer_dir) as harness:
        yield harness


@pytest.fixture(scope="session")
def pgbouncer(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgBouncer]:
    """PgBouncer in transaction pooling mode in front of the session's server."""
    bouncer = PgBouncer(pg_server, tmp_path_factory.mktemp("pgbouncer")).start()
    try:
        yield bouncer
    finally:
        bouncer.stop()
