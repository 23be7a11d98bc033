"""Test infrastructure shared by the suites: a PostgreSQL server, template databases, the
emulator. Fixtures in `conftest.py` are thin wrappers over these helpers."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import psycopg
from psycopg.conninfo import make_conninfo

from jobrelay.aws.clients import QueueUrls
from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres

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
