"""Migrations: the migrated schema equals the committed snapshot, and a populated database
goes down to base and back up to head with the same schema.

Regenerate the snapshot after an intended schema change with
`JOBRELAY_UPDATE_SCHEMA_SNAPSHOT=1 .venv/bin/pytest tests/migration`.
"""

from __future__ import annotations

import os
from pathlib import Path

import psycopg

from jobrelay.db import migrate

SNAPSHOT = Path(__file__).with_name("expected_schema.txt")

FINGERPRINT_SQL = [
    """
    SELECT 'column ' || table_name || '.' || column_name || ' ' ||
           CASE WHEN data_type = 'USER-DEFINED' THEN udt_name ELSE data_type END ||
           coalesce('(' || character_maximum_length || ')', '') ||
           CASE WHEN is_nullable = 'YES' THEN ' null' ELSE ' not null' END ||
           coalesce(' default ' || column_default, '')
    FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name <> 'alembic_version'
    """,
    """
    SELECT 'index ' || indexdef FROM pg_indexes
    WHERE schemaname = current_schema() AND tablename <> 'alembic_version'
    """,
    """
    SELECT 'constraint ' || c.conrelid::regclass || ' ' || c.conname || ' ' ||
           pg_get_constraintdef(c.oid)
    FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
    WHERE n.nspname = current_schema() AND c.conrelid <> 0
      AND c.conrelid::regclass::text <> 'alembic_version'
      -- PostgreSQL 18 also records NOT NULL as constraints (contype 'n'), 15 does not: the
      -- column lines above already say which columns are not null, on every version.
      AND c.contype <> 'n'
    """,
    """
    SELECT 'trigger ' || tgrelid::regclass || ' ' || tgname FROM pg_trigger WHERE NOT tgisinternal
    """,
    """
    SELECT 'enum ' || t.typname || ' ' || string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
    FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid GROUP BY t.typname
    """,
]


def schema_fingerprint(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        lines = [str(row[0]) for sql in FINGERPRINT_SQL for row in conn.execute(sql)]  # type: ignore[arg-type]
    return sorted(lines)


def populate(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """
            WITH org AS (
                INSERT INTO organization (name, created_by, updated_by)
                VALUES ('acme', 'alice', 'alice') RETURNING id
            ), proj AS (
                INSERT INTO project (organization_id, name, created_by, updated_by)
                SELECT id, 'web', 'alice', 'alice' FROM org RETURNING id, organization_id
            ), b AS (
                INSERT INTO batch (id, organization_id, project_id, type, created_by, updated_by)
                SELECT 'b1', organization_id, id, 'page_import', 'alice', 'alice' FROM proj
                RETURNING id, organization_id, project_id
            ), pi AS (
                INSERT INTO page_import (id, organization_id, project_id, batch_id, request,
                                         status, created_by, updated_by)
                SELECT 'p1', organization_id, project_id, id, '{}', '1', 'alice', 'alice' FROM b
                RETURNING id, organization_id, project_id
            ), item AS (
                INSERT INTO batch_item (id, batch_id, position, request, job_id, message,
                                        created_by, updated_by)
                SELECT 'i1', 'b1', 0, '{}', id, '{}', 'alice', 'alice' FROM pi
            )
            INSERT INTO code2wf (id, organization_id, project_id, page_import_id, figma_file_key,
                                 screen_id, created_by, updated_by)
            SELECT 'c1', organization_id, project_id, id, 'FILE', 'screen', 'alice', 'alice'
            FROM pi
            """
        )
        conn.execute(
            "INSERT INTO jobs (id, type, payload, dedupe_key) "
            "VALUES (gen_random_uuid(), 'diag.noop', '{}', 'k')"
        )


def test_migrated_schema_matches_the_snapshot(db_dsn: str) -> None:
    actual = schema_fingerprint(db_dsn)
    if os.environ.get("JOBRELAY_UPDATE_SCHEMA_SNAPSHOT"):
        SNAPSHOT.write_text("\n".join(actual) + "\n")
    assert actual == SNAPSHOT.read_text().splitlines()


def test_populated_database_downgrades_to_base_and_upgrades_to_head(empty_db_dsn: str) -> None:
    migrate.upgrade(empty_db_dsn)
    at_head = schema_fingerprint(empty_db_dsn)
    populate(empty_db_dsn)

    migrate.downgrade(empty_db_dsn, "base")
    assert migrate.current_revision(empty_db_dsn) is None
    assert schema_fingerprint(empty_db_dsn) == []

    migrate.upgrade(empty_db_dsn)
    assert migrate.current_revision(empty_db_dsn) == migrate.head_revision()
    assert schema_fingerprint(empty_db_dsn) == at_head
    populate(empty_db_dsn)  # the schema accepts the same data again
