"""Settings -> database: `DATABASE_URL` or the embedded server, migrated before use."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog

from jobrelay.bootstrap.errors import StartupError
from jobrelay.db import migrate
from jobrelay.db.embedded import (
    POSTGRES_BIN_PATH,
    SYSTEM_USER,
    EmbeddedPostgres,
    EmbeddedPostgresError,
    owner_name,
    user_name,
)
from jobrelay.db.network import NetworkTimeouts
from jobrelay.db.pool import check_connection, check_transaction_pooler
from jobrelay.loops import wait_or_stop
from jobrelay.settings import Settings

log = structlog.get_logger("jobrelay.database")


def listen_conninfo(settings: Settings, component: str) -> str | None:
    """The session connection `component` LISTENs on: the direct URL when set, None for the
    pool's own connection string, "" for none (poll only: logged here, once per component).
    """
    if settings.db.url and settings.db.direct_url:
        return bounded_dsn(settings, settings.db.direct_url)
    if settings.db.through_transaction_pooler:
        log.warning(
            "database.listen_unavailable",
            component=component,
            detail=(
                "DATABASE_URL goes through a transaction pooler, which cannot LISTEN, and "
                "JOBRELAY_DATABASE_DIRECT_URL is unset: polling instead"
            ),
        )
        return ""
    return None


def bounded_dsn(settings: Settings, dsn: str) -> str:
    """`dsn` with the settings' TCP keepalives, user timeout and connect timeout, so that
    every connection made from it notices a silent network within seconds (what the DSN
    sets itself wins)."""
    return NetworkTimeouts(**settings.db.network_options()).conninfo(dsn)


@contextmanager
def database(
    settings: Settings, *, run_migrations: bool | None = None, own_stack: bool = False
) -> Iterator[str]:
    """Yield the DSN to use: `DATABASE_URL`, or the embedded server of `data_dir`, with the
    network timeouts of the settings (`bounded_dsn`).

    The embedded server is started here and stopped on exit, unless a running `jobrelay up`
    already owns it (its pid in `data_dir/up.pid`): then commands such as `admin`, `ops` and
    `demo` attach to it and leave it running. `own_stack=True` is how `up` claims it.

    `run_migrations`: True migrates to the newest schema (`jobrelay migrate`), False leaves
    the schema alone; None (every other command) migrates in development, and in production
    (`JOBRELAY_ENV=production`, where `jobrelay migrate` is a step of its own before a
    rollout) only checks: a database behind this release stops the process with one line
    naming the command to run; one ahead of it (the next release migrated it) is fine.
    """
    if settings.db.url:
        if settings.db.through_transaction_pooler:
            asyncio.run(
                check_transaction_pooler(settings.db.url, timeout_s=settings.db.connect_timeout_s)
            )
        # DDL and the version table want a session: the direct URL.
        session_dsn = bounded_dsn(settings, settings.db.direct_url or settings.db.url)
        if run_migrations or (run_migrations is None and settings.env != "production"):
            _migrate(session_dsn, settings)
        elif run_migrations is None:
            _require_migrated(session_dsn, settings)
        yield bounded_dsn(settings, settings.db.url)
        return
    server = EmbeddedPostgres(settings.pgdata_dir)
    owner_file = settings.data_dir.resolve() / "up.pid"
    require_own_data_dir(settings)
    try:
        attach = not own_stack and server.running_pid() is not None
    except EmbeddedPostgresError as exc:
        raise StartupError(str(exc)) from exc
    if attach and _alive_pid_in(owner_file):
        yield bounded_dsn(settings, server.dsn())
        return
    if not own_stack:
        # Never silently: a command run from another folder, or while `up` is down, would
        # otherwise write to a database the stack and its console never see.
        print(
            f"note: no `jobrelay up` runs for the data directory {settings.data_dir.resolve()}; "
            "starting its embedded PostgreSQL for this command only (start the stack with "
            "`make up`, or set JOBRELAY_DATA_DIR to the stack's data directory)",
            file=sys.stderr,
        )
    try:
        dsn = server.start()
    except EmbeddedPostgresError as exc:
        raise StartupError(str(exc)) from exc
    try:
        if own_stack:
            owner_file.write_text(str(os.getpid()))
        if run_migrations is not False:  # the local stack migrates itself
            _migrate(dsn, settings)
        yield bounded_dsn(settings, dsn)
    finally:
        if own_stack:
            owner_file.unlink(missing_ok=True)
        server.stop()


def require_own_data_dir(settings: Settings) -> None:
    """Raise `StartupError` (one line) when the data directory, or its cluster, is closed
    to this user: another user's stack holds it, and nothing of it is ours to use."""
    data_dir = settings.data_dir.resolve()
    for path in (data_dir, settings.pgdata_dir, data_dir / "issuer"):
        if _present(path) and not os.access(path, os.R_OK | os.W_OK | os.X_OK):
            raise StartupError(
                f"the data directory {data_dir} belongs to user {owner_name(path)} and is "
                f"closed to user {user_name(os.geteuid())}: set JOBRELAY_DATA_DIR to a "
                "directory of your own (the default is per user), or set DATABASE_URL"
            )


def _present(path: Path) -> bool:
    try:
        return path.exists()
    except PermissionError:  # a parent closed to us: there is something, not ours
        return True


def _alive_pid_in(pid_file: Path) -> bool:
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def _require_migrated(dsn: str, settings: Settings) -> None:
    asyncio.run(check_connection(dsn, timeout_s=settings.db.connect_timeout_s))
    state, revision = migrate.schema_state(dsn)
    if state in ("behind", "empty"):
        at = f"at revision {revision}" if revision else "not migrated"
        raise StartupError(
            f"the database is {at}, this release needs revision {migrate.head_revision()}: "
            "run `jobrelay migrate` (with this release) before starting its processes"
        )


def _migrate(dsn: str, settings: Settings) -> None:
    asyncio.run(check_connection(dsn, timeout_s=settings.db.connect_timeout_s))
    migrate.upgrade(dsn)


def migrate_database(dsn: str) -> None:
    """Bring the database at `dsn` to the newest schema."""
    migrate.upgrade(dsn)


async def keep_embedded_running(
    settings: Settings,
    stop: asyncio.Event,
    *,
    say: Callable[[str], None],
    interval_s: float = 0.5,
) -> None:
    """While `stop` is unset, restart the embedded server of `settings` whenever it is not
    running (crashed, killed, stopped by hand): `jobrelay up` rides out its own database
    dying. Raises `StartupError` with one line when it cannot be started again.

    The restarted server listens on the same socket, so every pool reconnects by itself.
    """
    server = EmbeddedPostgres(settings.pgdata_dir)
    while not stop.is_set():
        if server.running_pid() is None:
            say("embedded PostgreSQL is not running; starting it again")
            try:
                await asyncio.to_thread(server.start)
            except EmbeddedPostgresError as exc:
                first = str(exc).strip().splitlines()[0]
                raise StartupError(
                    f"the embedded PostgreSQL in {settings.pgdata_dir} stopped and could not "
                    f"be started again: {first}"
                ) from exc
            say(f"embedded PostgreSQL is running again (pid {server.running_pid()})")
        await wait_or_stop(stop, interval_s)


def embedded_pg_ctl(settings: Settings) -> str | None:
    """The `pg_ctl` command line that controls the embedded server of `settings` by hand
    (run as the server's system user), or None when `DATABASE_URL` is set."""
    if settings.db.url:
        return None
    pg_ctl = f"{POSTGRES_BIN_PATH / 'pg_ctl'} -D {settings.pgdata_dir}"
    # As root the server runs as its own system user (PostgreSQL refuses root).
    return f"runuser -u {SYSTEM_USER} -- {pg_ctl}" if os.geteuid() == 0 else pg_ctl
