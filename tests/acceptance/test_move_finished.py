"""`jobrelay ops move-finished` on a table with history finished in place: a run killed with
SIGKILL in the middle loses no job and duplicates none, and the next run moves the rest with
the count and checksum of every finished job unchanged."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid

import psycopg

from tests.harness import cli_env, jobrelay_command, run_cli, wait_until

HISTORY = 5000
BATCH = 100


def _scalar(dsn: str, sql: str) -> object:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return row[0]


def _digest(dsn: str) -> object:
    """Every job, in id order, through the view that reads both tables."""
    return _scalar(dsn, "SELECT md5(string_agg(md5(j::text), '' ORDER BY j.id)) FROM all_jobs j")


def test_a_killed_move_loses_nothing_and_the_next_run_finishes_it(db_dsn: str) -> None:
    marker = uuid.uuid4()  # the job in the middle of the history: its batch is held
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO jobs (id, type, status, payload, finished_at, result) "
            "SELECT CASE WHEN i = %(middle)s THEN %(marker)s ELSE gen_random_uuid() END, "
            "'diag.noop', 'completed', jsonb_build_object('n', i), "
            "now() - interval '1 hour' - i * interval '1 second', jsonb_build_object('i', i) "
            "FROM generate_series(1, %(rows)s) AS i",
            {"middle": HISTORY // 2, "marker": marker, "rows": HISTORY},
        )
        conn.execute("INSERT INTO jobs (id, type) VALUES (gen_random_uuid(), 'diag.noop')")
        conn.execute(
            "CREATE FUNCTION hold_marker() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_advisory_xact_lock(2027); RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER hold_marker BEFORE INSERT ON finished_jobs FOR EACH ROW "
            f"WHEN (NEW.id = '{marker}') EXECUTE FUNCTION hold_marker()"
        )
    before = _digest(db_dsn)

    with psycopg.connect(db_dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(2027)")
        mover = subprocess.Popen(
            [*jobrelay_command(), "ops", "move-finished", "--batch", str(BATCH)],
            env=cli_env(DATABASE_URL=db_dsn),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_until(
                lambda: (
                    _scalar(
                        db_dsn,
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() "
                        "AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
                    )
                    == 1
                ),
                what="the mover to reach the held batch",
                timeout_s=120,
            )
            moved_at_kill = _scalar(db_dsn, "SELECT count(*) FROM finished_jobs")
            assert 0 < int(str(moved_at_kill)) < HISTORY, "killed in the middle of the move"
            mover.send_signal(signal.SIGKILL)
            mover.communicate(timeout=60)
        finally:
            if mover.poll() is None:
                mover.kill()
        holder.execute("SELECT pg_advisory_unlock(2027)")

    assert _digest(db_dsn) == before, "no job lost, none changed"
    assert _scalar(db_dsn, "SELECT count(*) FROM all_jobs") == HISTORY + 1
    both = "SELECT count(*) FROM jobs JOIN finished_jobs USING (id)"
    assert _scalar(db_dsn, both) == 0, "no job is in both tables"

    result = run_cli("ops", "move-finished", "--batch", str(BATCH), DATABASE_URL=db_dsn)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["outcome"] == "moved"
    assert report["inPlaceAfter"] == 0 and report["moved"] == report["inPlaceBefore"] > 0
    assert report["finishedBefore"] == report["finishedAfter"]
    assert report["finishedAfter"]["rows"] == HISTORY
    assert _digest(db_dsn) == before
    assert _scalar(db_dsn, "SELECT count(*) FROM jobs") == 1, "the pending job stays"
    stored = "SELECT count(*) FROM ops_run WHERE kind = 'move-finished' AND ok"
    assert _scalar(db_dsn, stored) == 1
