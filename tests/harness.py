"""Test infrastructure shared by the suites: a PostgreSQL server, template databases, the
emulator. Fixtures in `conftest.py` are thin wrappers over these helpers."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx
import psycopg
from psycopg.conninfo import conninfo_to_dict

from jobrelay.api import create_app
from jobrelay.auth.tenancy import ProjectScope, Role
from jobrelay.aws.clients import QueueUrls
from jobrelay.bootstrap import Services, build_services
from jobrelay.db.embedded import EmbeddedPostgres, EmbeddedPostgresError
from jobrelay.settings import load_settings
from jobrelay.testing import FAST_SERVER_OPTIONS, TestDatabases

T = TypeVar("T")


# The suite's server is the one jobrelay's pytest plugin offers users (template database
# migrated once, a copy per test); the suite only adds the choice of server below.
PgServer = TestDatabases


@dataclass(frozen=True)
class AwsTestResources:
    """A test's own queue, dead-letter queue and bucket on the emulator."""

    queues: QueueUrls
    bucket: str


# `JOBRELAY_TEST_PG=15` runs the suite on Debian's PostgreSQL 15 server (package
# postgresql-15) over loopback TCP instead of the embedded PostgreSQL 18 on a Unix socket.
TEST_PG_ENV = "JOBRELAY_TEST_PG"
SYSTEM_PG_ROOT = Path("/usr/lib/postgresql")
SYSTEM_USER = "postgres"  # created by Debian's postgresql-common; the server refuses root


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_server_user() -> dict[str, object]:
    """subprocess arguments that drop root to the `postgres` system user (no-op otherwise)."""
    if os.geteuid() != 0:
        return {}
    return {"user": SYSTEM_USER, "group": SYSTEM_USER, "extra_groups": []}


def _give_to_server_user(path: Path) -> None:
    """Create `path`, owned by the server user when root, reachable through its parents."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return
    user = pwd.getpwnam(SYSTEM_USER)
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)
    os.chown(path, user.pw_uid, user.pw_gid)


@dataclass
class SystemPostgres:
    """A distribution PostgreSQL server (e.g. Debian's postgresql-15) in its own data
    directory, listening on a loopback TCP port only. Same interface as `EmbeddedPostgres`
    (`start`, `stop(mode)`, `dsn`), so crash tests run on either."""

    pgdata: Path
    version: str = "15"
    server_options: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)

    @property
    def bin_dir(self) -> Path:
        return SYSTEM_PG_ROOT / self.version / "bin"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> str:
        if not (self.bin_dir / "postgres").exists():
            raise EmbeddedPostgresError(
                f"PostgreSQL {self.version} is not installed ({self.bin_dir} is missing): "
                f"apt-get install -y postgresql-{self.version}, or unset {TEST_PG_ENV}"
            )
        _give_to_server_user(self.pgdata)
        self.pgdata.chmod(0o700)
        if not (self.pgdata / "PG_VERSION").exists():
            self._run(
                "initdb",
                "-D",
                str(self.pgdata),
                "--auth=trust",
                "--encoding=UTF8",
                "--no-instructions",
                "-U",
                "postgres",
            )
        options = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": "''",
            "max_connections": "200",
            **self.server_options,
        }
        option_text = " ".join(f"-c {k}={v}" for k, v in options.items())
        log = self.pgdata / "server.log"
        self._run(
            "pg_ctl",
            "-D",
            str(self.pgdata),
            "-l",
            str(log),
            "-w",
            "-t",
            "60",
            "-o",
            option_text,
            "start",
        )
        return self.dsn()

    def stop(self, mode: str = "fast") -> None:
        if not (self.pgdata / "postmaster.pid").exists():
            return
        self._run("pg_ctl", "-D", str(self.pgdata), "-m", mode, "-w", "-t", "60", "stop")

    def _run(self, program: str, *args: str) -> None:
        result = subprocess.run(  # type: ignore[call-overload]
            [str(self.bin_dir / program), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            **_as_server_user(),
        )
        if result.returncode != 0:
            raise EmbeddedPostgresError(
                f"{program} failed for {self.pgdata} (exit {result.returncode}): "
                f"{result.stdout.strip()} {result.stderr.strip()}"
            )


@dataclass
class PgBouncer:
    """Debian's `pgbouncer` in front of a test server, on a loopback port, in `pool_mode`.

    Every database of the server is reachable through it under its own name; `dsn(name)` is
    the URL a client uses instead of the server's."""

    server: PgServer
    workdir: Path
    pool_mode: str = "transaction"
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    def dsn(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> PgBouncer:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(binary).exists():
            raise AssertionError(
                "pgbouncer is not installed: apt-get install -y pgbouncer (.ci/run does)"
            )
        _give_to_server_user(self.workdir)
        target = conninfo_to_dict(self.server.admin_dsn)
        host, port = target.get("host") or "127.0.0.1", target.get("port") or "5432"
        (self.workdir / "users.txt").write_text('"postgres" ""\n')
        ini = self.workdir / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host={host} port={port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.workdir / 'users.txt'}\n"
            f"pool_mode = {self.pool_mode}\n"
            "max_client_conn = 1000\n"
            "default_pool_size = 40\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            "admin_users = postgres\n"
            f"logfile = {self.workdir / 'pgbouncer.log'}\n"
        )
        for path in (ini, self.workdir / "users.txt"):
            path.chmod(0o644)
        self.process = subprocess.Popen(  # type: ignore[call-overload]
            [binary, str(ini)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **_as_server_user(),
        )
        wait_until(self._accepts, timeout_s=30, what=f"pgbouncer on port {self.port}")
        return self

    def _accepts(self) -> bool:
        assert self.process is not None and self.process.poll() is None, self.log()
        try:
            with psycopg.connect(self.dsn("postgres"), connect_timeout=1, prepare_threshold=None):
                return True
        except psycopg.OperationalError:
            return False

    def log(self) -> str:
        path = self.workdir / "pgbouncer.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def own_server(pgdata: Path) -> EmbeddedPostgres | SystemPostgres:
    """A server of the kind under test, for tests that crash or restart their own."""
    version = os.environ.get(TEST_PG_ENV)
    if version:
        return SystemPostgres(pgdata, version=version)
    return EmbeddedPostgres(pgdata)


def start_server(tmp_root: Path) -> PgServer:
    """`DATABASE_URL` when set (it must allow CREATE DATABASE); else the distribution server
    named by `JOBRELAY_TEST_PG` (e.g. 15), else an embedded server."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return TestDatabases(url)
    version = os.environ.get(TEST_PG_ENV)
    server: EmbeddedPostgres | SystemPostgres
    if version:
        server = SystemPostgres(
            tmp_root / "pgdata", version=version, server_options=FAST_SERVER_OPTIONS
        )
    else:
        server = EmbeddedPostgres(tmp_root / "pgdata", server_options=FAST_SERVER_OPTIONS)
    return TestDatabases(server.start(), server=server)


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


def wait_healthy(process: subprocess.Popen[str], base_url: str, *, what: str) -> None:
    """Poll `base_url/healthz` until a started `jobrelay api` process answers 200; fail with
    its output if it exits first."""

    def healthy() -> bool:
        assert process.poll() is None, process.communicate()[0]
        try:
            return httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, timeout_s=60, what=what)


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
    """Services and app over `dsn`, the local issuer's keys in `data_dir`; the overrides
    are `load_settings`'s (a group as a dict, `auth={"mode": "cognito"}`)."""
    db = settings_overrides.pop("db", {})
    assert isinstance(db, dict)
    settings = load_settings(
        default_env=None,
        data_dir=data_dir,
        db={"pool_min": 1, "pool_max": 6, **db},
        **settings_overrides,
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
