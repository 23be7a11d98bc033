"""The invariant checker run after every chaos scenario. Each check returns the violations
it found, as sentences; a scenario exits non-zero when any check found one.

* one active job per dedupe key (`jobs`, status pending or in_progress);
* every id the client got back (the ledger: accepted enqueues, batches, batch items) is in
  the database, and every ledger job reached `completed`;
* every completed `chaos.work` job carries in its result the claim token that completed it,
  a handler of that claim really finished (the finish files), and a fenced job has exactly
  one `chaos_output` row, carrying that token; no output exists for any other claim;
* no job is left pending or in progress (parents included: a parent ends with its children);
* every batch of the ledger is terminal, each item's child terminal, and no item was
  dispatched more than 3 times.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

MAX_DISPATCH_ATTEMPTS = 3


@dataclass
class Ledger:
    """What the client was told: every id an accepted enqueue or batch POST returned."""

    job_ids: set[uuid.UUID] = field(default_factory=set)
    batch_items: dict[str, int] = field(default_factory=dict)  # batch id -> its total
    rejected: int = 0  # answers that were not an acceptance (e.g. 503 while down)


@dataclass(frozen=True)
class Finish:
    """One handler that ran to its end (a line of a finish file)."""

    job_id: uuid.UUID
    token: uuid.UUID
    attempt: int
    pid: int


def read_finishes(directory: Path) -> list[Finish]:
    finishes: list[Finish] = []
    for path in sorted(directory.glob("finish-*.log")):
        pid = int(path.stem.split("-", 1)[1])
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) != 3:  # a line cut by SIGKILL mid-write cannot happen (one write)
                raise ValueError(f"{path}: malformed line {line!r}")
            finishes.append(Finish(uuid.UUID(parts[0]), uuid.UUID(parts[1]), int(parts[2]), pid))
    return finishes


def check_jobs(dsn: str, ledger: Ledger, finishes: list[Finish]) -> list[str]:
    problems: list[str] = []
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        for row in conn.execute(
            "SELECT type, dedupe_key, count(*) AS n FROM jobs"
            " WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'in_progress')"
            " GROUP BY type, dedupe_key HAVING count(*) > 1"
        ):
            problems.append(f"{row['n']} active jobs share dedupe key {row['dedupe_key']!r}")
        jobs: dict[uuid.UUID, dict[str, Any]] = {
            r["id"]: r
            for r in conn.execute(
                "SELECT id, type, status, attempt_count, result, payload, failure_kind,"
                " last_error FROM all_jobs WHERE id = ANY(%s)",
                (list(ledger.job_ids),),
            )
        }
        missing = ledger.job_ids - set(jobs)
        if missing:
            problems.append(f"{len(missing)} accepted jobs are missing, e.g. {min(missing)}")
        unfinished = conn.execute(
            "SELECT status, count(*) AS n FROM jobs"
            " WHERE status IN ('pending', 'in_progress') GROUP BY status"
        ).fetchall()
        for row in unfinished:
            problems.append(f"{row['n']} jobs left {row['status']}")
        outputs: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
        for row in conn.execute("SELECT job_id, claim_token FROM chaos_output"):
            outputs[row["job_id"]].append(row["claim_token"])
        # Over every job, not only the accepted ones: an enqueue whose commit reached the
        # database while the crash cut its answer (a 503 to the client) is a real job that
        # runs and writes its output.
        stray = [
            r["job_id"]
            for r in conn.execute(
                "SELECT DISTINCT o.job_id FROM chaos_output AS o"
                " LEFT JOIN all_jobs AS j ON j.id = o.job_id"
                " WHERE j.status IS DISTINCT FROM 'completed'"
            )
        ]
    finished_tokens: dict[uuid.UUID, set[uuid.UUID]] = defaultdict(set)
    for finish in finishes:
        finished_tokens[finish.job_id].add(finish.token)
    not_completed = [j for j in jobs.values() if j["status"] != "completed"]
    if not_completed:
        example = not_completed[0]
        problems.append(
            f"{len(not_completed)} accepted jobs did not complete, e.g. {example['id']} "
            f"{example['status']} ({example['failure_kind']}: {example['last_error']})"
        )
    bad_token = no_finish = bad_output = 0
    for job in jobs.values():
        if job["type"] != "chaos.work" or job["status"] != "completed":
            continue
        token = uuid.UUID((job["result"] or {}).get("token", str(uuid.UUID(int=0))))
        if token not in finished_tokens[job["id"]]:
            no_finish += 1  # completed by a claim whose handler never finished
        if job["payload"].get("fenced") and outputs.get(job["id"]) != [token]:
            bad_output += 1
        if token == uuid.UUID(int=0):
            bad_token += 1
    if bad_token:
        problems.append(f"{bad_token} completed jobs carry no claim token in their result")
    if no_finish:
        problems.append(
            f"{no_finish} completed jobs were completed by a claim whose handler never finished"
        )
    if bad_output:
        problems.append(f"{bad_output} fenced jobs lack exactly one output of the winning claim")
    if stray:
        problems.append(f"{len(stray)} outputs belong to jobs that did not complete")
    return problems


def check_batches(dsn: str, ledger: Ledger) -> list[str]:
    problems: list[str] = []
    batch_ids = list(ledger.batch_items)
    if not batch_ids:
        return problems
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        items = conn.execute(
            "SELECT bi.batch_id, bi.job_id, bi.dispatch_attempts, bi.error_message,"
            " bi.cancelled_at, c.status AS child_status"
            " FROM batch_item bi LEFT JOIN page_import c"
            "   ON c.batch_id = bi.batch_id AND c.id = bi.job_id"
            " WHERE bi.batch_id = ANY(%s)",
            (batch_ids,),
        ).fetchall()
        batches = {
            r["id"] for r in conn.execute("SELECT id FROM batch WHERE id = ANY(%s)", (batch_ids,))
        }
    missing_batches = set(batch_ids) - batches
    if missing_batches:
        problems.append(f"{len(missing_batches)} accepted batches are missing")
    stored: dict[str, int] = defaultdict(int)
    for r in items:
        stored[r["batch_id"]] += 1
    for batch_id, total in ledger.batch_items.items():
        if stored[batch_id] != total:
            problems.append(f"batch {batch_id}: {stored[batch_id]} items stored, {total} accepted")
    unchilded = [r for r in items if r["child_status"] is None]
    if unchilded:
        problems.append(f"{len(unchilded)} batch items have no child row")
    over = [r for r in items if r["dispatch_attempts"] > MAX_DISPATCH_ATTEMPTS]
    if over:
        problems.append(
            f"{len(over)} items were dispatched more than {MAX_DISPATCH_ATTEMPTS} times "
            f"(max {max(r['dispatch_attempts'] for r in over)})"
        )
    open_items = [
        r
        for r in items
        if r["child_status"] not in ("1", "2", "3")
        and r["error_message"] is None
        and r["cancelled_at"] is None
    ]
    if open_items:
        problems.append(f"{len(open_items)} batch items are not terminal (child processing)")
    return problems


def dispatch_attempts(dsn: str, ledger: Ledger) -> dict[int, int]:
    """How many items were dispatched once, twice, three times."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT dispatch_attempts AS a, count(*) AS n FROM batch_item"
            " WHERE batch_id = ANY(%s) GROUP BY 1 ORDER BY 1",
            (list(ledger.batch_items),),
        ).fetchall()
    return {int(r["a"]): int(r["n"]) for r in rows}
