"""Read-only facts about a database for `jobrelay doctor`."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg.rows import dict_row

from jobrelay.db import migrate
from jobrelay.db.errors import DatabaseUnavailable, describe_dsn
from jobrelay.db.sql import Queries

_QUERIES = Queries("jobrelay.db")


@dataclass(frozen=True)
class DatabaseReport:
    server_version: str
    database: str
    current_revision: str | None
    head_revision: str
    table_persistence: dict[str, str]

    @property
    def migrated(self) -> bool:
        return self.current_revision == self.head_revision


def database_report(dsn: str, *, timeout_s: float = 5.0) -> DatabaseReport:
    """Version, migration state and persistence of every table of the database at `dsn`."""
    try:
        conn = psycopg.connect(
            dsn,
            connect_timeout=max(1, int(timeout_s)),
            row_factory=dict_row,
            prepare_threshold=None,
        )
    except psycopg.Error as exc:
        raise DatabaseUnavailable(
            f"cannot connect to PostgreSQL at {describe_dsn(dsn)}: {str(exc).strip()}"
        ) from exc
    with conn:
        server = conn.execute(_QUERIES.server_report).fetchone()
        assert server is not None
        tables = {
            str(row["table_name"]): str(row["persistence"])
            for row in conn.execute(_QUERIES.table_persistence).fetchall()
        }
    return DatabaseReport(
        server_version=str(server["server_version"]),
        database=str(server["database"]),
        current_revision=migrate.current_revision(dsn),
        head_revision=migrate.head_revision(),
        table_persistence=tables,
    )
