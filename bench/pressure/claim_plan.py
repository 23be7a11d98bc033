"""What one claim reads, by backlog, fairness keys and dead row versions (issue 27).

For each cell (pending jobs x fairness keys x pinned xmin or not): a fresh `jobs` table with
that many pending `diag.noop` jobs spread over the keys, then `--churn` jobs claimed and
completed in batches by the worker's statements (`claim_jobs`, `complete_jobs`: a completed
job leaves `jobs` for `finished_jobs`, migration 0017; with a pinned xmin every one of them
leaves dead index entries vacuum cannot remove), ANALYZE, then `EXPLAIN (ANALYZE, BUFFERS)` of
the worker's claim statement on a claim session (generic plan), rolled back. Prints per cell:
the execution time, the buffers the statement touched and the node that touched most.

    .venv/bin/python -m bench.pressure.claim_plan
    .venv/bin/python -m bench.pressure.claim_plan --pending 1000,10000,100000 --keys 1,10,1000
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from jobrelay.db.sql import Queries

_SQL = Queries("jobrelay.jobs")
FAST = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
PARAMS: dict[str, Any] = {
    "worker_id": "bench",
    "total": 10,
    "lease_s": 30,
    "classes": ["default"],
    "limits": [10],
    "caps": [None],
    "fair": True,
    "types": ["diag.noop"],
    "floors": None,
}


def fill(conn: psycopg.Connection[Any], pending: int, keys: int, finished: int = 0) -> None:
    """`pending` jobs over `keys` fairness keys (1: no key at all, the default), after
    `finished` completed ones (in `finished_jobs`, where a completion puts them)."""
    conn.execute("TRUNCATE jobs, finished_jobs CASCADE")
    conn.execute(
        """
        INSERT INTO finished_jobs (id, type, payload, status, finished_at, attempt_count, purge_on)
        SELECT gen_random_uuid(), 'diag.noop', '{}'::jsonb, 'completed', clock_timestamp(), 1,
               jobrelay_job_purge_on_v1('diag.noop', clock_timestamp())
        FROM generate_series(1, %(finished)s)
        """,
        {"finished": finished},
    )
    add_pending(conn, pending, keys)


def add_pending(conn: psycopg.Connection[Any], pending: int, keys: int) -> None:
    conn.execute(
        """
        INSERT INTO jobs (id, type, payload, fairness_key, available_at, created_at)
        SELECT gen_random_uuid(), 'diag.noop', '{}'::jsonb,
               CASE WHEN %(keys)s > 1 THEN 'k' || (n %% %(keys)s) END,
               clock_timestamp() - interval '1 hour' + n * interval '1 ms',
               clock_timestamp()
        FROM generate_series(1, %(pending)s) AS n
        """,
        {"pending": pending, "keys": keys},
    )


def churn(conn: psycopg.Connection[Any], jobs: int, keys: int) -> None:
    """Claim and complete `jobs` jobs 100 at a time, enqueueing as many (the backlog stays)."""
    for _ in range(0, jobs, 100):
        with conn.transaction():
            claimed = conn.execute(_SQL.claim_jobs, PARAMS | {"total": 100, "limits": [100]})
            rows = claimed.fetchall()
        with conn.transaction():
            # The worker's completion: DELETE from `jobs`, INSERT into `finished_jobs`.
            done = conn.execute(
                _SQL.complete_jobs,
                {
                    "ids": [row["id"] for row in rows],
                    "claim_tokens": [row["claim_token"] for row in rows],
                    "revisions": [row["revision"] for row in rows],
                    "results": [None] * len(rows),
                },
            ).fetchall()
            assert len(done) == len(rows), "a claimed job did not complete"
            conn.execute(
                """
                INSERT INTO jobs (id, type, payload, fairness_key)
                SELECT gen_random_uuid(), 'diag.noop', '{}'::jsonb,
                       CASE WHEN %(keys)s > 1 THEN 'k' || (n %% %(keys)s) END
                FROM generate_series(1, %(n)s) AS n
                """,
                {"n": len(rows), "keys": keys},
            )


def floors(conn: psycopg.Connection[Any]) -> list[Any]:
    """The worker's full refresh of the claim floors (`jobs/floors.py`)."""
    rows = conn.execute(
        _SQL.claim_floors, {"classes": PARAMS["classes"], "since": [None]}
    ).fetchall()
    return [row["floor"] for row in rows]


def explain(conn: psycopg.Connection[Any], floor: list[Any] | None) -> dict[str, Any]:
    with conn.transaction(force_rollback=True):
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + _SQL.claim_jobs,
            PARAMS | {"floors": floor},
        ).fetchone()
    assert row is not None
    return dict(next(iter(row.values()))[0])


def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def _own_buffers(node: dict[str, Any]) -> int:
    total = node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0)
    children = sum(
        c.get("Shared Hit Blocks", 0) + c.get("Shared Read Blocks", 0)
        for c in node.get("Plans", [])
    )
    return int(total - children)


def describe(node: dict[str, Any]) -> str:
    name = node["Node Type"]
    if "Index Name" in node:
        name += f" {node['Index Name']}"
    if "Subplan Name" in node or "Parent Relationship" in node:
        name += f" ({node.get('Subplan Name', node.get('Parent Relationship'))})"
    return name


def buffers(plan: dict[str, Any]) -> int:
    top = plan["Plan"]
    return int(top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0))


def report(pending: int, keys: int, pinned: bool, floored: bool, plan: dict[str, Any]) -> None:
    heaviest = max(nodes(plan["Plan"]), key=_own_buffers)
    print(
        f"{pending:>7} {keys:>6} {pinned!s:>7} {floored!s:>7} "
        f"{plan['Execution Time']:>8.2f} {buffers(plan):>8}  "
        f"{describe(heaviest)} ({_own_buffers(heaviest)})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", default="1000,10000,100000")
    parser.add_argument("--keys", default="1,10,1000")
    parser.add_argument("--churn", type=int, default=12000, help="jobs claimed and completed")
    parser.add_argument("--finished", type=int, default=0, help="completed jobs kept")
    parser.add_argument(
        "--analyze-at",
        type=int,
        help="ANALYZE when only this many jobs are pending, then add the rest (a plan made"
        " on a short queue meeting a backlog)",
    )
    parser.add_argument("--json", type=Path, help="write every plan here")
    args = parser.parse_args()
    plans = []
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedPostgres(Path(tmp) / "pgdata", server_options=FAST)
        dsn = server.start()
        try:
            migrate.upgrade(dsn)
            with (
                psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn,
                psycopg.connect(dsn, autocommit=True) as pin,
            ):
                conn.execute(_SQL.claim_session)
                print(
                    "pending   keys  pinned  floors  exec_ms  buffers  heaviest node (own buffers)"
                )
                for pending in [int(p) for p in args.pending.split(",")]:
                    for keys in [int(k) for k in args.keys.split(",")]:
                        for pinned in (False, True):
                            first = pending if args.analyze_at is None else args.analyze_at
                            fill(conn, first, keys, args.finished)
                            conn.execute("VACUUM ANALYZE jobs")
                            if pinned:
                                pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                                pin.execute("SELECT txid_current(), count(*) FROM all_jobs")
                            churn(conn, args.churn, keys)
                            if args.analyze_at is None:
                                conn.execute("VACUUM ANALYZE jobs")
                            else:
                                add_pending(conn, pending - first, keys)
                            conn.execute("DEALLOCATE ALL")
                            for floor in (None, floors(conn)):
                                plan = explain(conn, floor)
                                report(pending, keys, pinned, floor is not None, plan)
                                plans.append(
                                    {
                                        "pending": pending,
                                        "keys": keys,
                                        "pinned": pinned,
                                        "floors": floor is not None,
                                        "plan": plan,
                                    }
                                )
                            if pinned:
                                pin.execute("ROLLBACK")
        finally:
            server.stop()
    if args.json:
        args.json.write_text(json.dumps(plans, indent=1))


if __name__ == "__main__":
    main()
