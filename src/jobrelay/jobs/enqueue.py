"""Enqueue: one atomic statement per conflict action, single or bulk.

Why (no duplicate active jobs, dedupe keys, merges into running jobs):
docs/explanation/design.md, "The jobs engine".

`enqueue(conn, request)` and `enqueue_many(conn, requests)` take the caller's connection so a
job can be created in the same transaction as the rows that need it: the job is invisible
to workers until that transaction commits and disappears if it rolls back (no orphan job,
no lost job). Deduplication is done by the partial unique index `jobs_active_dedupe_key`
through `INSERT ... ON CONFLICT`, never by reading first: `DO NOTHING` for policy ignore
(`enqueue_ignore.sql`, no lock on the job it keeps), `DO UPDATE` for merge and supersede
(`enqueue_update.sql`). Every statement reads the same row, the database type that
`jobs.enqueue_row` declares and encodes (`EnqueueRow`). Each call is one
`jobrelay.jobs.enqueue` span and its rows record that span's trace context (`jobs.traces`).

Every request is first checked against the enqueue contract (`EnqueueRequest.problems`:
ranges, delay or run time, time zones), whoever sends it; the API and the CLI only parse.

Jobs without a dedupe key cannot conflict, whatever their policy: they take a plain INSERT
with no arbiter and no read-back (`enqueue_new.sql`), or in bulk, from `COPY_MIN_ROWS` jobs
without a delay, a COPY after a pause check in the same transaction. A bulk call whose every
request is copyable by its type and options alone streams the COPY while it validates
(`Enqueuer._copy_streamed`: the server inserts a chunk while the next is prepared). A bulk
call that needs more than one statement runs them in one transaction (a savepoint in the
caller's).

A bulk call folds requests with the same (type, dedupe key) before the statement: a
multi-row `ON CONFLICT DO UPDATE` that meets one key twice fails with a cardinality error.

A parent type (`JobRole.PARENT`, e.g. `ccip.batch`) is stored waiting (`available_at =
9999-12-31`, never claimed) and its `on_create` children (its dispatch job) are enqueued in
the same transaction: a parent is never visible without its dispatch (invariant 12).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, LiteralString, cast

from psycopg.copy import AsyncLibpqWriter
from pydantic_core import PydanticSerializationError

from jobrelay import tracing
from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.errors import FieldError, InvalidInput, Paused
from jobrelay.domain.jobs import ConflictPolicy, EnqueueOutcome, JobRole
from jobrelay.ids import new_uuid
from jobrelay.jobs import enqueue_row, traces
from jobrelay.jobs.enqueue_row import EnqueueRow
from jobrelay.jobs.failpoints import NO_FAILPOINTS, Failpoints
from jobrelay.jobs.models import Enqueued, EnqueueRequest, Job
from jobrelay.jobs.registry import Registry, payload_json

__all__ = ["EnqueueRequest", "Enqueuer", "enqueue"]

_QUERIES = Queries("jobrelay.jobs")
DEFAULT_PAYLOAD_LIMIT_BYTES = 256 * 1024
_ATTEMPTS = 5  # rounds for inputs whose active job changed under the statement
# From this many jobs without a dedupe key or delay, a bulk enqueue copies them in (one COPY
# and three short statements: cheaper than INSERT ... SELECT once the rows outweigh them).
COPY_MIN_ROWS = 16
# A bulk call whose every request is copyable before validation streams its COPY in chunks of
# this many rows (50-250 measured alike; one block of 1,000 lost the overlap).
COPY_CHUNK_ROWS = 100
_PAUSED = "enqueueing is paused by the operator (jobs_control)"

_UPDATED_OUTCOME = {
    ConflictPolicy.IGNORE: EnqueueOutcome.DEDUPLICATED,
    ConflictPolicy.MERGE: EnqueueOutcome.MERGED,
    ConflictPolicy.SUPERSEDE: EnqueueOutcome.SUPERSEDED,
}


class Enqueuer:
    """Validates requests against the registry and writes them with the policy statements."""

    def __init__(
        self,
        registry: Registry,
        *,
        payload_limit_bytes: int,
        failpoints: Failpoints = NO_FAILPOINTS,
    ) -> None:
        if payload_limit_bytes < 1:
            raise ValueError(f"payload_limit_bytes must be >= 1, got {payload_limit_bytes}")
        self._registry = registry
        self._limit = payload_limit_bytes
        self._failpoints = failpoints

    def prepare(self, request: EnqueueRequest, *, path: str = "") -> EnqueueRow:
        """Validate one request against the enqueue contract (`EnqueueRequest.problems`),
        then its type and payload; raises `InvalidInput` naming the fields."""
        problems = request.problems(path)
        if problems:
            raise InvalidInput("invalid job", problems)
        try:
            model = self._registry.parse(request.type, request.payload)
        except InvalidInput as exc:
            if not path:
                raise
            raise InvalidInput(
                exc.detail, [FieldError(path + e.path, e.message) for e in exc.errors]
            ) from exc
        payload_json = self._stored_json(model, path)
        job_type = self._registry.get(request.type)
        assert job_type is not None  # parse() rejected unknown types
        max_attempts = (
            job_type.retry.max_attempts if request.max_attempts is None else request.max_attempts
        )
        waiting = job_type.role is JobRole.PARENT
        return EnqueueRow(
            id=new_uuid(),
            job_type=job_type,
            payload=None,
            dedupe_key=job_type.dedupe_key(model) or request.dedupe_key,
            revision=job_type.revision(model),
            source_key=job_type.source_key(model),
            concurrency_class=str(job_type.class_for(model)),
            priority=job_type.priority if request.priority is None else request.priority,
            max_attempts=max_attempts,
            delay_s=None if waiting else request.delay_s or 0.0,
            parent_id=request.parent_id,
            model=model,
            run_at=None if waiting else request.run_at,
            fairness_key=job_type.fairness_for(model),
            payload_json=payload_json,
            traceparent=tracing.current_traceparent(),
        )

    def _stored_json(self, model: Any, path: str) -> str:
        """The payload as stored (compact JSON, UTF-8 unescaped), within the size limit: the
        limit counts the bytes the table keeps, not `\\uXXXX` escapes of non-ASCII text."""
        try:
            encoded = payload_json(model)
        except PydanticSerializationError as exc:  # e.g. a lone surrogate in a string
            raise InvalidInput(
                "invalid payload",
                [FieldError(f"{path}payload", f"cannot be stored as JSON: {exc}")],
            ) from exc
        size = len(encoded)
        if size > self._limit:
            raise InvalidInput(
                "payload too large",
                [
                    FieldError(
                        f"{path}payload",
                        f"payload is {size} bytes of JSON; the limit is {self._limit} bytes "
                        "(JOBRELAY_JOBS_PAYLOAD_LIMIT_BYTES)",
                    )
                ],
            )
        return encoded.decode()

    async def enqueue(
        self, conn: Connection, request: EnqueueRequest, *, stored: bool = False
    ) -> Enqueued:
        """Enqueue one job in the caller's connection (and transaction, if one is open).

        `stored`: also return the stored row (`Enqueued.job`), read in the same round trip
        as the write (a parent with children reads it after them).
        """
        with traces.enqueue_span([request]):
            result = await self._enqueue(conn, request, stored=stored)
            traces.enqueued([result])
        return result

    async def _enqueue(
        self, conn: Connection, request: EnqueueRequest, *, stored: bool
    ) -> Enqueued:
        row = self.prepare(request)
        if row.job_type.on_create is None:
            if stored:
                return await self._write_stored(conn, row)
            return (await self._write(conn, [row]))[0]
        async with conn.transaction():
            result = (await self._write(conn, [row]))[0]
            if not stored:
                return result
            cursor = await conn.execute(_QUERIES.get_job, {"id": result.id})
            found = await cursor.fetchone()
        assert found is not None  # written in this transaction
        return replace(result, job=Job.from_row(found))

    async def _write_stored(self, conn: Connection, row: EnqueueRow) -> Enqueued:
        """Write one job without children and read the job it landed in, both queued in one
        pipeline (one round trip). Falls back to the plain write and a read by id when the
        write must run again (its active job changed under it) or the read missed."""
        policy = None if row.dedupe_key is None else row.job_type.policy
        async with conn.pipeline():
            if policy is None:
                write = await conn.execute(_QUERIES.enqueue_one, enqueue_row.parameters(row))
            else:
                write = await conn.execute(_statement(policy), _policy_params(policy, [row]))
            read = await conn.execute(
                _QUERIES.get_enqueued_job,
                {"id": row.id, "type": row.job_type.name, "dedupe_key": row.dedupe_key},
            )
            candidates = await read.fetchall()
            records = [] if policy is None else await write.fetchall()
        if policy is None:
            _check_inserted(write.rowcount, 1)
            result: Enqueued | None = Enqueued(row.id, EnqueueOutcome.CREATED, row.revision)
        else:
            inserted, by_key = _outcomes(policy, records)
            result = inserted.get(row.id) or by_key.get((row.job_type.name, row.dedupe_key or ""))
        if result is None:
            result = (await self._write(conn, [row]))[0]
        job = next((Job.from_row(c) for c in candidates if c["id"] == result.id), None)
        if job is None or job.revision != result.revision:
            cursor = await conn.execute(_QUERIES.get_job, {"id": result.id})
            found = await cursor.fetchone()
            job = None if found is None else Job.from_row(found)
        return replace(result, job=job)

    async def enqueue_many(
        self, conn: Connection, requests: Sequence[EnqueueRequest]
    ) -> list[Enqueued]:
        """Enqueue many jobs (validated all or nothing), one statement per conflict policy.

        Results are in request order. Requests folded into an earlier one with the same key
        share its job; under policy ignore they report `deduplicated`.
        """
        with traces.enqueue_span(requests):
            results = await self._enqueue_many(conn, requests)
            traces.enqueued(results)
        return results

    async def _enqueue_many(
        self, conn: Connection, requests: Sequence[EnqueueRequest]
    ) -> list[Enqueued]:
        if len(requests) >= COPY_MIN_ROWS and all(map(self._copyable, requests)):
            return await self._copy_streamed(conn, requests)
        errors: list[FieldError] = []
        rows: list[EnqueueRow] = []
        for i, request in enumerate(requests):
            try:
                rows.append(self.prepare(request, path=f"{i}."))
            except InvalidInput as exc:
                errors.extend(exc.errors)
        if errors:
            raise InvalidInput("invalid jobs; nothing was enqueued", errors)
        if not rows:
            return []
        folded, owner = _fold(rows)
        with_children = any(r.job_type.on_create is not None for r in rows)
        if not with_children and len(folded) == len(rows) and len(_groups(folded)) == 1:
            written = await self._write(conn, folded)
        else:
            async with conn.transaction():
                written = await self._write(conn, folded)
        by_id = {row.id: result for row, result in zip(folded, written, strict=True)}
        results: list[Enqueued] = []
        for row in rows:
            lead = owner[row.id]
            result = by_id[lead.id]
            if (
                lead is not row
                and row.job_type.policy is ConflictPolicy.IGNORE
                and result.outcome is EnqueueOutcome.CREATED
            ):
                result = Enqueued(result.id, EnqueueOutcome.DEDUPLICATED, result.revision)
            results.append(result)
        return results

    def _copyable(self, request: EnqueueRequest) -> bool:
        """Whether `request` is known, before validation, to become a job without a dedupe
        key, a delay, a run time or children: one that a COPY can write."""
        job_type = self._registry.get(request.type)
        return (
            job_type is not None
            and not job_type.keyed
            and job_type.on_create is None
            and job_type.role is not JobRole.PARENT
            and request.dedupe_key is None
            and not request.delay_s
            and request.run_at is None
        )

    async def _copy_streamed(
        self, conn: Connection, requests: Sequence[EnqueueRequest]
    ) -> list[Enqueued]:
        """Validate and copy in jobs that `_copyable` admitted, `COPY_CHUNK_ROWS` at a time:
        the server inserts one chunk while this process validates and encodes the next
        (on two cores the two overlap). All or nothing: an invalid request stops the
        writing, the rest are still validated so the error names every bad field, and the
        COPY is aborted (a `CopyFail`) with its transaction, so nothing is stored."""
        errors: list[FieldError] = []
        results: list[Enqueued] = []
        async with conn.transaction():
            paused = await _enqueue_paused(conn)
            cursor = conn.cursor()
            # Sent as written (psycopg's default holds 1 MB back), so that the server parses
            # one chunk while this process prepares the next.
            writer = AsyncLibpqWriter(cursor, flush_threshold=1)
            async with cursor.copy(_QUERIES.enqueue_copy, writer=writer) as copy:
                for start in range(0, len(requests), COPY_CHUNK_ROWS):
                    lines: list[str] = []
                    for i, request in enumerate(requests[start : start + COPY_CHUNK_ROWS], start):
                        try:
                            row = self.prepare(request, path=f"{i}.")
                        except InvalidInput as exc:
                            errors.extend(exc.errors)
                            continue
                        lines.append(enqueue_row.copy_line(row))
                        results.append(Enqueued(row.id, EnqueueOutcome.CREATED, row.revision))
                    if not errors and not paused:
                        await copy.write("".join(lines))
                # Raised inside the COPY block so that psycopg aborts it.
                if errors:
                    raise InvalidInput("invalid jobs; nothing was enqueued", errors)
                if paused:
                    raise Paused(_PAUSED)
        return results

    async def insert_new(self, conn: Connection, rows: list[EnqueueRow]) -> None:
        """Insert prepared rows without a dedupe key (they cannot conflict, so no policy
        applies), in one statement or a COPY; for rows a caller completed itself (the steps
        of a workflow). Raises `Paused` when enqueueing is paused."""
        if any(row.dedupe_key is not None for row in rows):
            raise ValueError("insert_new takes rows without a dedupe key")
        await _write_new(conn, rows)

    async def _write(self, conn: Connection, rows: list[EnqueueRow]) -> list[Enqueued]:
        results: dict[uuid.UUID, Enqueued] = {}
        for (policy, _), part in _groups(rows).items():
            if policy is None:
                results.update(await _write_new(conn, part))
            else:
                results.update(await _write_policy(conn, policy, part))
        await self._write_children(conn, rows, results)
        return [results[row.id] for row in rows]

    async def _write_children(
        self, conn: Connection, rows: list[EnqueueRow], results: dict[uuid.UUID, Enqueued]
    ) -> None:
        """The `on_create` children of newly created parents, in the caller's transaction."""
        children: list[EnqueueRow] = []
        for row in rows:
            on_create = row.job_type.on_create
            result = results[row.id]
            if on_create is None or result.outcome is not EnqueueOutcome.CREATED:
                continue
            for child_type, payload in on_create(row.model):
                request = EnqueueRequest(child_type, payload, parent_id=result.id)
                children.append(self.prepare(request))
        if not children:
            return
        self._failpoints.hit("batch.after_parent")
        await self._write(conn, children)
        self._failpoints.hit("batch.after_dispatch")


def _groups(
    rows: list[EnqueueRow],
) -> dict[tuple[ConflictPolicy | None, str | None], list[EnqueueRow]]:
    """The statements a write runs, keyed by (policy, merge field): one for the rows without
    a dedupe key (policy None: they cannot conflict, whatever their type's policy), one per
    policy (and merge field, for merge) for the rows with one."""
    groups: dict[tuple[ConflictPolicy | None, str | None], list[EnqueueRow]] = {}
    for row in rows:
        if row.dedupe_key is None:
            key: tuple[ConflictPolicy | None, str | None] = (None, None)
        elif row.job_type.policy is ConflictPolicy.MERGE:
            key = (ConflictPolicy.MERGE, row.job_type.merge_field)
        else:
            key = (row.job_type.policy, None)
        groups.setdefault(key, []).append(row)
    return groups


async def _write_new(conn: Connection, rows: list[EnqueueRow]) -> dict[uuid.UUID, Enqueued]:
    """Insert jobs without a dedupe key: one plain INSERT, no result rows (enqueue_one.sql
    for one job, enqueue_new.sql for more), or a COPY for many jobs without a delay
    (`_copy_new`)."""
    if len(rows) >= COPY_MIN_ROWS and all(r.delay_s == 0.0 and r.run_at is None for r in rows):
        await _copy_new(conn, rows)
    else:
        if len(rows) == 1:
            cursor = await conn.execute(_QUERIES.enqueue_one, enqueue_row.parameters(rows[0]))
        else:
            cursor = await conn.execute(_QUERIES.enqueue_new, {"jobs": enqueue_row.document(rows)})
        _check_inserted(cursor.rowcount, len(rows))
    return {row.id: Enqueued(row.id, EnqueueOutcome.CREATED, row.revision) for row in rows}


def _check_inserted(rowcount: int, expected: int) -> None:
    """A plain insert's row count: none when enqueueing is paused, else every row."""
    if rowcount != expected:
        if rowcount == 0:
            raise Paused(_PAUSED)
        raise RuntimeError(f"enqueue inserted {rowcount} of {expected} jobs")


async def _copy_new(conn: Connection, rows: list[EnqueueRow]) -> None:
    """Copy jobs without a dedupe key or delay in (enqueue_copy.sql), in one transaction (a
    savepoint inside the caller's) that first checks the pause, as the statements do.

    The rows go as one block of COPY text built here: psycopg's per-row `write_row` (and a
    second JSON encoding of each payload) cost more than the server's insert."""
    block = "".join(map(enqueue_row.copy_line, rows))
    async with conn.transaction():
        if await _enqueue_paused(conn):
            raise Paused(_PAUSED)
        async with conn.cursor().copy(_QUERIES.enqueue_copy) as copy:
            await copy.write(block)


async def _enqueue_paused(conn: Connection) -> bool:
    """Whether the operator paused enqueueing (jobs_control; no row counts as paused)."""
    cursor = await conn.execute(_QUERIES.enqueue_paused)
    control = await cursor.fetchone()
    return control is None or bool(control["enqueue_paused"])


def _statement(policy: ConflictPolicy) -> LiteralString:
    if policy is ConflictPolicy.IGNORE:
        return _QUERIES.enqueue_ignore
    return _QUERIES.enqueue_update


async def _write_policy(
    conn: Connection, policy: ConflictPolicy, rows: list[EnqueueRow]
) -> dict[uuid.UUID, Enqueued]:
    """Run the policy's statement for rows with a dedupe key; re-run it for inputs whose
    active job changed meanwhile."""
    results: dict[uuid.UUID, Enqueued] = {}
    todo = rows
    for _ in range(_ATTEMPTS):
        cursor = await conn.execute(_statement(policy), _policy_params(policy, todo))
        inserted, by_key = _outcomes(policy, await cursor.fetchall())
        results.update(inserted)
        missing: list[EnqueueRow] = []
        for row in todo:
            if row.id in results:
                continue
            key = row.key
            found = by_key.get(key) if key is not None else None
            if found is None:
                missing.append(row)
            else:
                results[row.id] = found
        if not missing:
            return results
        todo = missing
    raise RuntimeError(f"enqueue did not settle after {_ATTEMPTS} rounds for {len(todo)} jobs")


def _policy_params(policy: ConflictPolicy, rows: list[EnqueueRow]) -> dict[str, Any]:
    """The parameters of the policy's statement for `rows` (which share a merge field; None:
    supersede, for enqueue_update.sql)."""
    params: dict[str, Any] = {"jobs": enqueue_row.document(rows)}
    if policy is not ConflictPolicy.IGNORE:
        params["merge_field"] = (
            rows[0].job_type.merge_field if policy is ConflictPolicy.MERGE else None
        )
    return params


def _outcomes(
    policy: ConflictPolicy, records: Sequence[Mapping[str, Any]]
) -> tuple[dict[uuid.UUID, Enqueued], dict[tuple[str, str], Enqueued]]:
    """A policy statement's rows as results: the jobs it inserted, by id, and the job each
    dedupe key landed in. Raises `Paused` when enqueueing is paused."""
    inserted: dict[uuid.UUID, Enqueued] = {}
    by_key: dict[tuple[str, str], Enqueued] = {}
    for rec in records:
        kind = rec["kind"]
        if kind == "paused":
            raise Paused(_PAUSED)
        if kind == "inserted":
            outcome = EnqueueOutcome.CREATED
        elif kind == "updated":
            outcome = _UPDATED_OUTCOME[policy]
        else:
            outcome = EnqueueOutcome.DEDUPLICATED
        result = Enqueued(cast(uuid.UUID, rec["id"]), outcome, cast(int, rec["revision"]))
        if kind == "inserted":
            inserted[result.id] = result
        if rec["dedupe_key"] is not None:
            by_key[(str(rec["type"]), str(rec["dedupe_key"]))] = result
    return inserted, by_key


def _fold(rows: list[EnqueueRow]) -> tuple[list[EnqueueRow], dict[uuid.UUID, EnqueueRow]]:
    """One row per (type, dedupe key): first wins (ignore), lists unioned (merge), highest
    revision wins (supersede). Returns the folded rows and, per input id, its lead row."""
    leads: dict[tuple[str, str], EnqueueRow] = {}
    owner: dict[uuid.UUID, EnqueueRow] = {}
    folded: list[EnqueueRow] = []
    for row in rows:
        key = row.key
        lead = leads.get(key) if key is not None else None
        if key is None or lead is None:
            if key is not None:
                leads[key] = row
            folded.append(row)
            owner[row.id] = row
            continue
        owner[row.id] = lead
        policy = row.job_type.policy
        if policy is ConflictPolicy.MERGE:
            merge_field = row.job_type.merge_field or ""
            seen = list(lead.stored_payload().get(merge_field) or [])
            known = set(map(_freeze, seen))
            for element in row.stored_payload().get(merge_field) or []:
                if _freeze(element) not in known:
                    known.add(_freeze(element))
                    seen.append(element)
            lead.stored_payload()[merge_field] = seen
            lead.payload_json = None
        elif policy is ConflictPolicy.SUPERSEDE and row.revision > lead.revision:
            lead.payload = row.stored_payload()
            lead.payload_json = row.payload_json
            lead.revision = row.revision
            lead.source_key = row.source_key
            lead.fairness_key = row.fairness_key
    return folded, owner


def _freeze(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


async def enqueue(
    conn: Connection,
    registry: Registry,
    type: str,
    payload: Mapping[str, Any],
    *,
    priority: int | None = None,
    delay_s: float = 0.0,
    max_attempts: int | None = None,
    payload_limit_bytes: int = DEFAULT_PAYLOAD_LIMIT_BYTES,
) -> Enqueued:
    """Enqueue one job of `type` in `conn`, inside the caller's transaction if one is open:
    the job is invisible to workers until that transaction commits and gone if it rolls
    back, so it can be created atomically with the rows that need it.

    Raises `InvalidInput` naming the field when the payload does not validate, `Paused`
    when enqueueing is paused.
    """
    request = EnqueueRequest(
        type, payload, priority=priority, delay_s=delay_s, max_attempts=max_attempts
    )
    return await Enqueuer(registry, payload_limit_bytes=payload_limit_bytes).enqueue(conn, request)
