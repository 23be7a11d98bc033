"""Test infrastructure shared by the suites: a PostgreSQL server, template databases, the
emulator. Fixtures in `conftest.py` are thin wrappers over these helpers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx
import psycopg
from psycopg.conninfo import make_conninfo

from jobrelay.api import create_app
from jobrelay.auth.tenancy import ProjectScope, Role
from jobrelay.aws.clients import QueueUrls
from jobrelay.bootstrap import Services, build_services
from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from jobrelay.settings import load_settings

T = TypeVar("T")

# Durability is not under test in the shared server (crash tests start their own), so the
# fast settings keep `make test` well inside its budget.
FAST_SERVER_OPTIONS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


@dataclass
class PgServer:
    """A PostgreSQL server the tests may create and drop databases on."""

    admin_dsn: str
    embedded: EmbeddedPostgres | None = None
    _template: str | None = field(default=None, repr=False)

    def dsn(self, dbname: str) -> str:
        return make_conninfo(self.admin_dsn, dbname=dbname)

    def execute_admin(self, sql: str) -> None:
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def template(self) -> str:
        """The name of a database migrated to head, created once per test session."""
        if self._template is None:
            name = f"jobrelay_tpl_{os.getpid()}"
            self.execute_admin(f"DROP DATABASE IF EXISTS {name}")
            self.execute_admin(f"CREATE DATABASE {name}")
            migrate.upgrade(self.dsn(name))
            self._template = name
        return self._template

    def create_database(self, *, migrated: bool = True) -> str:
        """A fresh database (a copy of the template when `migrated`); returns its name."""
        name = f"jobrelay_t_{uuid.uuid4().hex[:16]}"
        template = f" TEMPLATE {self.template()}" if migrated else ""
        self.execute_admin(f"CREATE DATABASE {name}{template}")
        return name

    def drop_database(self, name: str) -> None:
        self.execute_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def close(self) -> None:
        if self._template:
            self.drop_database(self._template)
        if self.embedded is not None:
            self.embedded.stop()


@dataclass(frozen=True)
class AwsTestResources:
    """A test's own queue, dead-letter queue and bucket on the emulator."""

    queues: QueueUrls
    bucket: str


def start_server(tmp_root: Path) -> PgServer:
    """`DATABASE_URL` when set (it must allow CREATE DATABASE), else an embedded server."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return PgServer(admin_dsn=url)
    embedded = EmbeddedPostgres(tmp_root / "pgdata", server_options=FAST_SERVER_OPTIONS)
    return PgServer(admin_dsn=embedded.start(), embedded=embedded)


def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout_s: float = 30.0,
    interval_s: float = 0.02,
    what: str = "condition",
) -> T:
    """Poll `probe` until it returns a truthy value; fail after `timeout_s` naming `what`."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


def jobrelay_command() -> list[str]:
    """The installed `jobrelay` console script of this interpreter's environment."""
    return [str(Path(sys.executable).with_name("jobrelay"))]


def cli_env(**overrides: str | None) -> dict[str, str]:
    """The test process's environment with overrides; a None value removes the variable."""
    env = dict(os.environ)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


@dataclass
class ApiHarness:
    """The real ASGI app over a fresh database, with helpers to mint tokens and tenants.

    Use `api.client` (an httpx.AsyncClient) with `headers=api.headers("alice")`; create a
    member's organization and project with `await api.tenant("alice")`.
    """

    client: httpx.AsyncClient
    services: Services

    def token(self, sub: str = "alice", *, admin: bool = False, **claims: object) -> str:
        assert self.services.local_issuer is not None
        return self.services.local_issuer.mint(sub, admin=admin, extra=dict(claims) or None)

    def headers(self, sub: str = "alice", *, admin: bool = False) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(sub, admin=admin)}"}

    async def tenant(self, sub: str = "alice", *, role: Role = "member") -> ProjectScope:
        """A new organization with one project, `sub` a member of it."""
        tenancy = self.services.tenancy
        org = await tenancy.create_organization(f"org-of-{sub}", actor="test")
        project = await tenancy.create_project(int(org["id"]), "project", actor="test")
        await tenancy.add_member(int(org["id"]), sub, role=role, actor="test")
        return ProjectScope(
            organization_id=int(org["id"]), project_id=int(project["id"]), role=role
        )


@asynccontextmanager
async def api_harness(
    dsn: str, data_dir: Path, **settings_overrides: object
) -> AsyncIterator[ApiHarness]:
    """Services and app over `dsn`, the local issuer's keys in `data_dir`."""
    settings = load_settings(
        default_env=None, data_dir=data_dir, db_pool_min=1, db_pool_max=6, **settings_overrides
    )
    async with build_services(settings, dsn, serves_api=True) as services:
        transport = httpx.ASGITransport(app=create_app(services))
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            yield ApiHarness(client=client, services=services)


def run_cli(*args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    """Run `jobrelay ARGS` to completion with `cli_env(**env)`; output captured as text."""
    return subprocess.run(
        [*jobrelay_command(), *args],
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
