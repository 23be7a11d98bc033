"""In production a process does not migrate at start (issue 24): `jobrelay migrate` is a
step of its own before a rollout. A database behind this release stops `api`, `worker`
and `relay` with one line naming the command to run (exit 2); a database ahead of it (the
next release migrated it, expand/contract) is fine; in development processes still
migrate by themselves."""

from __future__ import annotations

import psycopg
import pytest

from jobrelay.bootstrap.database import database
from jobrelay.bootstrap.errors import StartupError
from jobrelay.db import migrate
from jobrelay.settings import load_settings
from tests.harness import run_cli


def _revision(dsn: str) -> str | None:
    return migrate.current_revision(dsn)


def _stamp(dsn: str, revision: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = %s", (revision,))


# What production refuses to default for the API (see tests/unit/test_production_settings).
API_PRODUCTION = {
    "JOBRELAY_WEBHOOK_SECRETS": "whsec_cHJvZHVjdGlvbi1zZWNyZXQ=",
    "JOBRELAY_AUTH_MODE": "cognito",
    "JOBRELAY_COGNITO_USER_POOL_ID": "eu-west-1_AbC123",
    "JOBRELAY_AUTH_CLIENT_IDS": "client1",
    "JOBRELAY_UI_SESSION_SECRET": "a-real-console-session-secret",
    "JOBRELAY_UI_COGNITO_DOMAIN": "https://jobrelay.auth.eu-west-1.amazoncognito.com",
    "JOBRELAY_UI_COGNITO_CLIENT_ID": "console-client",
    "JOBRELAY_UI_COGNITO_REDIRECT_URL": "https://jobrelay.example.invalid/ui/auth/callback",
}


@pytest.mark.parametrize("process", ["worker", "relay", "api"])
def test_a_process_on_a_database_one_migration_behind_refuses_to_start(
    empty_db_dsn: str, process: str
) -> None:
    migrate.upgrade(empty_db_dsn, "0015")
    extra = API_PRODUCTION if process == "api" else {}
    result = run_cli(process, DATABASE_URL=empty_db_dsn, JOBRELAY_ENV="production", **extra)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "at revision 0015" in lines[0] and "run `jobrelay migrate`" in lines[0], lines
    assert _revision(empty_db_dsn) == "0015", "nothing was migrated"


def test_production_checks_and_development_migrates(empty_db_dsn: str, db_dsn: str) -> None:
    production = load_settings(default_env=None, env="production", db={"url": empty_db_dsn})
    with pytest.raises(StartupError, match="not migrated"), database(production):
        pass
    development = load_settings(default_env=None, env="development", db={"url": empty_db_dsn})
    with database(development):
        pass
    assert _revision(empty_db_dsn) == migrate.head_revision()
    # A revision this code does not ship: a newer release migrated it; this one runs.
    _stamp(db_dsn, "9999_next_release")
    ahead = load_settings(default_env=None, env="production", db={"url": db_dsn})
    with database(ahead) as dsn:
        assert dsn
    assert migrate.schema_state(db_dsn) == ("ahead", "9999_next_release")
