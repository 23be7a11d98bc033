"""The migrated schema matches the seed table definitions column by column (seeds 000, 004)."""

from __future__ import annotations

import psycopg
import pytest

# (column, type, max length, nullable, default) exactly as the seeds define them.
BATCH_ITEM = [
    ("id", "character varying", 255, False, None),
    ("batch_id", "character varying", 255, False, None),
    ("position", "integer", None, False, None),
    ("request", "jsonb", None, False, None),
    ("job_id", "character varying", 255, True, None),
    ("message", "jsonb", None, True, None),
    ("dispatched_at", "timestamp with time zone", None, True, None),
    ("lease_until", "timestamp with time zone", None, True, None),
    ("dispatch_attempts", "integer", None, False, "0"),
    ("error_message", "text", None, True, None),
    ("cancelled_at", "timestamp with time zone", None, True, None),
    ("created_at", "timestamp with time zone", None, False, "CURRENT_TIMESTAMP"),
    ("updated_at", "timestamp with time zone", None, False, "CURRENT_TIMESTAMP"),
    ("deleted_at", "timestamp with time zone", None, True, None),
    ("created_by", "character varying", 50, False, None),
    ("updated_by", "character varying", 50, False, None),
    ("deleted_by", "character varying", 50, True, None),
    # Not in the seed (migration 0011): set when the child is terminal, so the relay counts
    # an organization's items in flight from batch_item alone (fair dispatch, issue 17).
    ("settled_at", "timestamp with time zone", None, True, None),
]

CODE2WF = [
    ("id", "character varying", 255, False, None),
    ("organization_id", "bigint", None, False, None),
    ("project_id", "bigint", None, False, None),
    ("page_import_id", "character varying", 255, False, None),
    ("figma_file_key", "character varying", 255, False, None),
    ("screen_id", "character varying", 255, False, None),
    ("placement_target", "character varying", 255, True, None),
    ("status", "wf2des_status", None, False, "'0'::wf2des_status"),
    ("attempt", "integer", None, False, "1"),
    ("flag_count", "integer", None, True, None),
    ("result_url", "character varying", 500, True, None),
    ("error_message", "text", None, True, None),
    ("materialized_at", "timestamp with time zone", None, True, None),
    ("created_at", "timestamp with time zone", None, False, "CURRENT_TIMESTAMP"),
    ("updated_at", "timestamp with time zone", None, False, "CURRENT_TIMESTAMP"),
    ("deleted_at", "timestamp with time zone", None, True, None),
    ("created_by", "character varying", 50, False, None),
    ("updated_by", "character varying", 50, False, None),
    ("deleted_by", "character varying", 50, True, None),
]

INDEXES = {
    "batch_item": {
        "batch_item_pkey": "(id)",
        "batch_item_batch_idx": '(batch_id, "position")',
        "batch_item_dispatch_idx": "(dispatched_at, lease_until)",
        # Not in the seed (migration 0003): the relay's claim reads only undispatched items.
        "batch_item_due_idx": (
            "(id) WHERE ((dispatched_at IS NULL) AND (cancelled_at IS NULL) AND "
            "(error_message IS NULL) AND (deleted_at IS NULL))"
        ),
        # Not in the seed (migration 0011): fair dispatch's in-flight count and its skip scan
        # over the batches with waiting items.
        "batch_item_in_flight_idx": (
            "(batch_id) INCLUDE (dispatched_at, lease_until) WHERE ((lease_until IS NOT NULL) "
            "AND (settled_at IS NULL) AND (cancelled_at IS NULL) AND (error_message IS NULL) "
            "AND (deleted_at IS NULL))"
        ),
        "batch_item_waiting_idx": (
            "(batch_id, id) WHERE ((dispatched_at IS NULL) AND (cancelled_at IS NULL) AND "
            "(error_message IS NULL) AND (deleted_at IS NULL))"
        ),
        # Not in the seed (migration 0003): the derived-status aggregate's index-only scan.
        "batch_item_status_idx": (
            "(batch_id, job_id) INCLUDE (dispatched_at, cancelled_at, error_message)"
        ),
    },
    "code2wf": {
        "code2wf_pkey": "(id)",
        "code2wf_project_id_deleted_at_idx": "(project_id, deleted_at)",
        "code2wf_project_status_idx": "(project_id, status)",
        "code2wf_org_project_file_status_idx": (
            "(organization_id, project_id, figma_file_key, status)"
        ),
        "code2wf_page_import_id_idx": "(page_import_id)",
    },
}

FOREIGN_KEYS = {
    "batch_item": {("batch_id", "batch", "id", "CASCADE")},
    "code2wf": {
        ("organization_id", "organization", "id", "NO ACTION"),
        ("project_id", "project", "id", "NO ACTION"),
        ("page_import_id", "page_import", "id", "NO ACTION"),
    },
}


def _columns(dsn: str, table: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            """
            SELECT column_name,
                   CASE WHEN data_type = 'USER-DEFINED' THEN udt_name ELSE data_type END,
                   character_maximum_length, is_nullable = 'YES', column_default
            FROM information_schema.columns
            WHERE table_schema = current_schema() AND table_name = %s
            ORDER BY ordinal_position
            """,
            (table,),
        ).fetchall()
    return [tuple(r) for r in rows]


@pytest.mark.parametrize(("table", "expected"), [("batch_item", BATCH_ITEM), ("code2wf", CODE2WF)])
def test_columns_follow_the_seed(
    db_dsn: str, table: str, expected: list[tuple[object, ...]]
) -> None:
    assert _columns(db_dsn, table) == expected


@pytest.mark.parametrize("table", sorted(INDEXES))
def test_every_named_index_exists_on_the_seed_columns(db_dsn: str, table: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        rows = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = current_schema() AND tablename = %s",
            (table,),
        ).fetchall()
    actual = {name: definition[definition.index("(") :] for name, definition in rows}
    assert actual == INDEXES[table]


@pytest.mark.parametrize("table", sorted(FOREIGN_KEYS))
def test_foreign_keys_follow_the_seed(db_dsn: str, table: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        rows = conn.execute(
            """
            SELECT kcu.column_name, ccu.table_name, ccu.column_name, rc.delete_rule
            FROM information_schema.referential_constraints rc
            JOIN information_schema.key_column_usage kcu
              ON kcu.constraint_name = rc.constraint_name
            JOIN information_schema.constraint_column_usage ccu
              ON ccu.constraint_name = rc.constraint_name
            WHERE kcu.table_name = %s AND kcu.table_schema = current_schema()
            """,
            (table,),
        ).fetchall()
    assert {tuple(r) for r in rows} == FOREIGN_KEYS[table]


def test_wf2des_status_enum_values(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        rows = conn.execute(
            "SELECT e.enumlabel FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid "
            "WHERE t.typname = 'wf2des_status' ORDER BY e.enumsortorder"
        ).fetchall()
    assert [r[0] for r in rows] == ["0", "1", "2", "3", "4"]


def test_every_table_is_logged_and_jobs_has_the_dedupe_index(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        persistence = conn.execute(
            "SELECT DISTINCT relpersistence FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'"
        ).fetchall()
        dedupe = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'jobs_active_dedupe_key'"
        ).fetchone()
    assert persistence == [("p",)]
    assert dedupe is not None
    assert "UNIQUE" in dedupe[0]
    assert "(type, dedupe_key)" in dedupe[0]
    assert "'pending'" in dedupe[0] and "'in_progress'" in dedupe[0]


def test_updated_at_is_maintained_by_the_database(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO organization (name, created_by, updated_by, updated_at) "
            "VALUES ('o', 'a', 'a', '2000-01-01')"
        )
        conn.execute("UPDATE organization SET name = 'p', updated_by = 'b'")
        row = conn.execute(
            "SELECT updated_at > '2001-01-01'::timestamptz FROM organization"
        ).fetchone()
    assert row == (True,)
