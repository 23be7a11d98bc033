"""What a migration calls to add a job column: `jobs`, `finished_jobs` and `all_jobs` follow.

A job lives in `jobs` while active and in `finished_jobs` (its columns plus `purge_on`) once
it ended; `all_jobs` is the two of them, column for column. A finished row is built by name
(`jobrelay_finished_job_v1`), so a column that both tables have is carried over without a
change there. What must not be forgotten is the other table and the view: `add_job_column`
and `drop_job_column` do all three, in the migration's transaction.

A column of the enqueue row also needs the next version of the input type,
`create_input_type`: the previous version's fields plus the new ones, so a process of the
previous release keeps its own type during a rolling deploy. AGENTS.md has the recipe.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

ALL_JOBS_COMMENT = "Every job: the active ones (jobs) and the finished ones (finished_jobs)."


def add_job_column(name: str, definition: str, *, comment: str | None = None) -> None:
    """Add column `name` (`definition`: its type and constraints, e.g. `text` or `integer
    NOT NULL DEFAULT 0`) to `jobs` and `finished_jobs`, and list it last in `all_jobs`.

    Nullable columns and constant defaults need no table rewrite (PostgreSQL 11+)."""
    for table in ("jobs", "finished_jobs"):
        op.execute(f"ALTER TABLE {table} ADD COLUMN {_name(name)} {definition}")
    if comment is not None:
        op.execute(f"COMMENT ON COLUMN jobs.{_name(name)} IS {_literal(comment)}")
    # A column added last comes last in the view too, which CREATE OR REPLACE VIEW allows
    # (readers name their columns).
    op.execute(f"CREATE OR REPLACE VIEW all_jobs AS {_all_jobs_query(job_columns())}")


def drop_job_column(name: str) -> None:
    """Drop column `name` from `all_jobs`, `jobs` and `finished_jobs` (a downgrade's step)."""
    kept = [c for c in job_columns() if c != name]
    op.execute("DROP VIEW all_jobs")
    for table in ("jobs", "finished_jobs"):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {_name(name)}")
    op.execute(f"CREATE VIEW all_jobs AS {_all_jobs_query(kept)}")
    op.execute(f"COMMENT ON VIEW all_jobs IS {_literal(ALL_JOBS_COMMENT)}")


def create_input_type(name: str, *, base: str, added: Sequence[tuple[str, str]]) -> None:
    """Create the enqueue row type `name`: the fields of type `base` in their order, then
    `added` ((field, SQL type) pairs). `base` stays for the processes still using it."""
    fields = [*_attributes(base), *added]
    listed = ", ".join(f"{_name(field)} {sql_type}" for field, sql_type in fields)
    op.execute(f"CREATE TYPE {_name(name)} AS ({listed})")


def job_columns() -> list[str]:
    """The columns of `jobs`, in their order."""
    return [field for field, _ in _attributes("jobs")]


def _attributes(relation: str) -> list[tuple[str, str]]:
    """The columns of a table or the fields of a composite type, with their SQL types."""
    rows = op.get_bind().execute(
        sa.text(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = CAST(CAST(:relation AS text) AS regclass) "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
        ),
        {"relation": relation},
    )
    found = [(str(r[0]), str(r[1])) for r in rows]
    if not found:
        raise ValueError(f"{relation} has no columns")
    return found


def _all_jobs_query(columns: Sequence[str]) -> str:
    listed = ", ".join(map(_name, columns))
    return f"SELECT {listed} FROM jobs UNION ALL SELECT {listed} FROM finished_jobs"  # noqa: S608


def _name(identifier: str) -> str:
    """`identifier` quoted; a name a migration spells is checked, never taken from input."""
    if not identifier.replace("_", "").isalnum() or not identifier.isascii():
        raise ValueError(f"not a plain SQL name: {identifier!r}")
    return f'"{identifier}"'


def _literal(text: str) -> str:
    """`text` as an SQL string literal, its colons escaped for `sqlalchemy.text` (which
    `op.execute` wraps a string in), where `:word` would be a bind parameter."""
    return "'" + text.replace("'", "''").replace(":", "\\:") + "'"
