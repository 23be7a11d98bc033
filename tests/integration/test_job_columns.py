"""A job column is declared once (`jobs.enqueue_row`): everything else that lists the columns
agrees with the declaration, or one of these tests names what misses it. The migration
helpers (`migrations.job_columns`) keep `finished_jobs` and `all_jobs` with `jobs`."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations

from jobrelay.db.sql import load_query
from jobrelay.domain.jobs import JobRole
from jobrelay.jobs import enqueue_row
from jobrelay.jobs.enqueue_row import COPY_NAMES, ENGINE_COLUMNS, INPUT_FIELDS, INPUT_TYPE, NAMES
from jobrelay.jobs.registry import JobType
from jobrelay.migrations import job_columns

# The statements that insert an enqueue row into `jobs`; each lists the columns it fills.
_INSERTS = ("enqueue_one", "enqueue_new", "enqueue_ignore", "enqueue_update")
# The input fields that are not columns of `jobs`: they compute `available_at`.
_TIMING = {f.name for f in INPUT_FIELDS if not f.copied}


def _attributes(dsn: str, relation: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (relation,),
        ).fetchall()
    return [(str(name), str(sql_type)) for name, sql_type in rows]


def _names(dsn: str, relation: str) -> list[str]:
    return [name for name, _ in _attributes(dsn, relation)]


def _insert_columns(sql: str) -> list[str]:
    found = re.search(r"INSERT INTO jobs(?: AS \w+)?\s*\(([^)]*)\)", sql)
    assert found is not None, sql
    return [c.strip() for c in found.group(1).split(",")]


def test_the_input_type_in_the_database_is_the_declaration(db_dsn: str) -> None:
    declared = [(f.name, f.sql_type) for f in INPUT_FIELDS]
    assert _attributes(db_dsn, INPUT_TYPE) == declared


def test_every_input_field_but_the_timing_is_a_column_and_every_other_column_is_the_engines(
    db_dsn: str,
) -> None:
    columns = set(_names(db_dsn, "jobs"))
    inputs = set(NAMES) - _TIMING
    assert inputs <= columns, f"input fields that are no column of jobs: {inputs - columns}"
    undeclared = columns - inputs - ENGINE_COLUMNS
    assert not undeclared, f"columns of jobs neither input fields nor engine columns: {undeclared}"
    assert columns >= ENGINE_COLUMNS, f"engine columns jobs lacks: {ENGINE_COLUMNS - columns}"


def test_finished_jobs_and_all_jobs_have_the_columns_of_jobs(db_dsn: str) -> None:
    """A finished row is built by name (`jobrelay_finished_job_v1`): `finished_jobs` has
    every column of `jobs` with its type, in the order they were added, and `purge_on`."""
    jobs = _attributes(db_dsn, "jobs")
    finished = _attributes(db_dsn, "finished_jobs")
    assert dict(finished) == {**dict(jobs), "purge_on": "date"}
    assert _attributes(db_dsn, "all_jobs") == jobs


@pytest.mark.parametrize("statement", _INSERTS)
def test_each_insert_statement_fills_every_input_column(statement: str) -> None:
    sql = load_query("jobrelay.jobs", statement)
    listed = _insert_columns(sql)
    expected = [*(n for n in COPY_NAMES if n != "dedupe_key"), "available_at"]
    missing = set(expected) - set(listed)
    assert not missing, f"{statement}.sql does not insert {sorted(missing)}"
    if statement != "enqueue_one":  # a single job without a dedupe key leaves it NULL
        assert "dedupe_key" in listed, f"{statement}.sql does not insert dedupe_key"
    assert INPUT_TYPE in sql or statement == "enqueue_one", f"{statement}.sql reads another type"


def test_the_single_insert_names_every_field_as_a_parameter() -> None:
    sql = load_query("jobrelay.jobs", "enqueue_one")
    parameters = set(re.findall(r"%\((\w+)\)s", sql))
    assert parameters == set(NAMES) - {"dedupe_key"}


def test_the_copy_statement_lists_the_copied_fields_in_their_order() -> None:
    sql = load_query("jobrelay.jobs", "enqueue_copy")
    found = re.search(r"COPY jobs\s*\(([^)]*)\)", sql)
    assert found is not None
    assert tuple(c.strip() for c in found.group(1).split(",")) == COPY_NAMES


def test_the_copy_line_and_the_document_carry_each_field_under_its_name() -> None:
    """Every field gets a value of its own, so a value in the wrong cell or key shows."""
    job_type: JobType[Any] = JobType("diag.columns", dict, None)
    row = enqueue_row.EnqueueRow(
        id=uuid.UUID(int=1),
        job_type=job_type,
        payload=None,
        dedupe_key="key\twith a tab",
        revision=7,
        source_key="source",
        concurrency_class="cls",
        priority=3,
        max_attempts=4,
        delay_s=0.5,
        parent_id=uuid.UUID(int=2),
        payload_json='{"a":"b\\\\c"}',
        fairness_key="fair",
        traceparent="00-trace",
    )
    values = dict(zip(NAMES, row.fields(), strict=True))
    assert set(values) == set(NAMES)
    cells = enqueue_row.copy_line(row).removesuffix("\n").split("\t")
    assert len(cells) == len(COPY_NAMES)
    by_name = dict(zip(COPY_NAMES, cells, strict=True))
    assert by_name["dedupe_key"] == "key\\twith a tab"  # escaped, one cell
    assert by_name["payload"] == '{"a":"b\\\\\\\\c"}'
    assert by_name["id"] == str(uuid.UUID(int=1)) and by_name["parent_id"] == str(uuid.UUID(int=2))
    assert (by_name["revision"], by_name["priority"], by_name["max_attempts"]) == ("7", "3", "4")
    assert (by_name["type"], by_name["role"]) == ("diag.columns", str(JobRole.JOB))
    assert (by_name["fairness_key"], by_name["traceparent"]) == ("fair", "00-trace")
    assert enqueue_row.parameters(row) == values
    assert enqueue_row.document([row]).count('"payload":{"a":"b\\\\c"}') == 1


@contextmanager
def _operations(dsn: str) -> Iterator[None]:
    """Alembic's `op` on `dsn`, in one transaction, as a migration sees it."""
    engine = sa.create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=sa.pool.NullPool
    )
    try:
        with (
            engine.begin() as connection,
            Operations.context(MigrationContext.configure(connection)),
        ):
            yield
    finally:
        engine.dispose()


def test_a_column_added_with_the_helper_is_in_jobs_finished_jobs_and_all_jobs(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO jobs (id, type, payload, concurrency_class, role) "
            "VALUES (gen_random_uuid(), 'diag.noop', '{}', 'default', 'job')"
        )
    with _operations(db_dsn):
        job_columns.add_job_column("step_name", "text", comment="The step: a colon, 'quoted'.")
        job_columns.create_input_type(
            "jobrelay_job_input_test", base=INPUT_TYPE, added=[("step_name", "text")]
        )
    assert _names(db_dsn, "jobs")[-1] == "step_name"
    assert _attributes(db_dsn, "finished_jobs")[-1] == ("step_name", "text")
    assert _names(db_dsn, "all_jobs") == _names(db_dsn, "jobs")
    assert _attributes(db_dsn, "jobrelay_job_input_test") == [
        *((f.name, f.sql_type) for f in INPUT_FIELDS),
        ("step_name", "text"),
    ]
    with psycopg.connect(db_dsn) as conn:
        comment = conn.execute(
            "SELECT col_description('jobs'::regclass, attnum) FROM pg_attribute "
            "WHERE attrelid = 'jobs'::regclass AND attname = 'step_name'"
        ).fetchone()
        assert comment == ("The step: a colon, 'quoted'.",)
        unset = conn.execute("SELECT count(*) FROM all_jobs WHERE step_name IS NULL").fetchone()
        assert unset == (1,)

    with _operations(db_dsn):
        job_columns.drop_job_column("step_name")
    assert "step_name" not in _names(db_dsn, "jobs") + _names(db_dsn, "finished_jobs")
    assert _names(db_dsn, "all_jobs") == _names(db_dsn, "jobs")


def test_a_name_that_is_not_plain_is_refused_before_anything_runs(db_dsn: str) -> None:
    before = _names(db_dsn, "jobs")
    with pytest.raises(ValueError, match="not a plain SQL name"), _operations(db_dsn):
        job_columns.add_job_column('x"; DROP TABLE jobs; --', "text")
    assert _names(db_dsn, "jobs") == before
