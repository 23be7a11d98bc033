"""Run the Alembic migrations (SQL inside) against a libpq DSN (URL or key=value form).

Alembic is synchronous; these functions are called from the CLI, `bootstrap` and the test
harness before any async pool exists.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Literal

import psycopg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, create_engine, pool


def _config() -> Config:
    config = Config()
    config.set_main_option(
        "script_location", str(Path(str(resources.files("jobrelay.migrations"))))
    )
    return config


@contextmanager
def _connection(dsn: str) -> Iterator[Connection]:
    # `creator` lets libpq parse the DSN, so socket paths and key=value strings work as-is.
    engine = create_engine(
        "postgresql+psycopg://",
        creator=lambda: psycopg.connect(dsn, prepare_threshold=None),
        poolclass=pool.NullPool,
    )
    try:
        with engine.begin() as connection:
            yield connection
    finally:
        engine.dispose()


def upgrade(dsn: str, revision: str = "head") -> None:
    """Migrate the database at `dsn` up to `revision`."""
    config = _config()
    with _connection(dsn) as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def downgrade(dsn: str, revision: str = "base") -> None:
    """Migrate the database at `dsn` down to `revision`."""
    config = _config()
    with _connection(dsn) as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def head_revision() -> str:
    """The newest revision shipped with this code."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(dsn: str) -> str | None:
    """The revision the database at `dsn` is at (None before the first migration)."""
    with _connection(dsn) as connection:
        return MigrationContext.configure(connection).get_current_revision()


SchemaState = Literal["current", "behind", "ahead", "empty"]


def schema_state(dsn: str) -> tuple[SchemaState, str | None]:
    """Where the database at `dsn` stands against this code, and its revision: `current`
    (at this code's head), `behind` (an older revision of this code: run the migrations
    first), `ahead` (a revision this code does not ship: a newer release migrated it, which
    expand/contract lets this code run against) or `empty` (never migrated)."""
    current = current_revision(dsn)
    if current is None:
        return "empty", None
    if current == head_revision():
        return "current", current
    known = {script.revision for script in ScriptDirectory.from_config(_config()).walk_revisions()}
    return ("behind" if current in known else "ahead"), current
