"""Enqueue against real PostgreSQL: policies, bulk folding, caller's transaction, limits,
and the known traps of ON CONFLICT on a partial unique index."""

from __future__ import annotations

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.domain.errors import InvalidInput, Paused
from jobrelay.domain.jobs import EnqueueOutcome
from jobrelay.jobs.enqueue import COPY_CHUNK_ROWS, COPY_MIN_ROWS, EnqueueRequest
from tests.jobs_support import fetch, row, service

Pool = AsyncConnectionPool[Connection]


async def test_ignore_policy_returns_the_active_job(pool: Pool) -> None:
    jobs = service(pool)
    payload = {"mediaId": "m1", "revision": 2, "sourceId": "s1"}
    first = await jobs.enqueue(EnqueueRequest("media.process", payload))
    again = await jobs.enqueue(EnqueueRequest("media.process", payload))
    other_revision = await jobs.enqueue(EnqueueRequest("media.process", {**payload, "revision": 3}))
    assert first.outcome is EnqueueOutcome.CREATED
    assert (again.id, again.outcome) == (first.id, EnqueueOutcome.DEDUPLICATED)
    assert other_revision.outcome is EnqueueOutcome.CREATED and other_revision.id != first.id
    stored = await row(pool, first.id)
    assert stored["dedupe_key"] == "m1@2" and stored["concurrency_class"] == "ai"
    assert stored["source_key"] == "source:s1" and stored["revision"] == 2


async def test_terminal_job_frees_its_key(pool: Pool) -> None:
    jobs = service(pool)
    payload = {"mediaId": "m1", "revision": 1, "sourceId": "s1"}
    first = await jobs.enqueue(EnqueueRequest("media.process", payload))
    await jobs.cancel(first.id)
    second = await jobs.enqueue(EnqueueRequest("media.process", payload))
    assert second.outcome is EnqueueOutcome.CREATED and second.id != first.id


async def test_supersede_replaces_only_with_a_higher_revision(pool: Pool) -> None:
    jobs = service(pool)
    base = {"sourceId": "s1", "syncKind": "full"}
    first = await jobs.enqueue(EnqueueRequest("source.sync", {**base, "revision": 2}))
    higher = await jobs.enqueue(EnqueueRequest("source.sync", {**base, "revision": 5}))
    lower = await jobs.enqueue(EnqueueRequest("source.sync", {**base, "revision": 3}))
    assert higher.id == first.id == lower.id
    assert higher.outcome is EnqueueOutcome.SUPERSEDED and higher.revision == 5
    assert lower.outcome is EnqueueOutcome.DEDUPLICATED and lower.revision == 5
    stored = await row(pool, first.id)
    assert stored["payload"]["revision"] == 5 and stored["revision"] == 5


async def test_merge_unions_ids_and_bumps_revision(pool: Pool) -> None:
    jobs = service(pool)
    a = await jobs.enqueue(
        EnqueueRequest("index.sync_delta", {"index": "i", "mediaIds": ["a", "b"]})
    )
    b = await jobs.enqueue(
        EnqueueRequest("index.sync_delta", {"index": "i", "mediaIds": ["b", "c"]})
    )
    c = await jobs.enqueue(EnqueueRequest("index.sync_delta", {"index": "i", "mediaIds": ["a"]}))
    assert (a.outcome, b.outcome, c.outcome) == (
        EnqueueOutcome.CREATED,
        EnqueueOutcome.MERGED,
        EnqueueOutcome.DEDUPLICATED,
    )
    assert a.id == b.id == c.id
    stored = await row(pool, a.id)
    assert stored["payload"]["mediaIds"] == ["a", "b", "c"] and stored["revision"] == 2


@pytest.mark.parametrize("stored", ['\'{"index": "i"}\'', '\'{"index": "i", "mediaIds": null}\''])
async def test_merge_into_a_missing_or_null_list(pool: Pool, stored: str) -> None:
    """Trap: `payload -> 'mediaIds'` is SQL NULL when missing and JSON null when null; both
    must count as an empty list, and `||`/`->` precedence must not swallow the union."""
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO jobs (id, type, payload, dedupe_key) "
            f"VALUES (gen_random_uuid(), 'index.sync_delta', {stored}::jsonb, 'i')"
        )
    merged = await service(pool).enqueue(
        EnqueueRequest("index.sync_delta", {"index": "i", "mediaIds": ["x"]})
    )
    assert merged.outcome is EnqueueOutcome.MERGED
    assert (await row(pool, merged.id))["payload"]["mediaIds"] == ["x"]


async def test_bulk_folds_duplicate_keys_before_the_statement(pool: Pool) -> None:
    """Trap: a multi-row ON CONFLICT DO UPDATE meeting one key twice is a cardinality error."""
    jobs = service(pool)
    requests = [
        EnqueueRequest("index.sync_delta", {"index": "i", "mediaIds": ["a"]}),
        EnqueueRequest("index.sync_delta", {"index": "i", "mediaIds": ["b"]}),
        EnqueueRequest("source.sync", {"sourceId": "s", "syncKind": "full", "revision": 1}),
        EnqueueRequest("source.sync", {"sourceId": "s", "syncKind": "full", "revision": 4}),
        EnqueueRequest("media.process", {"mediaId": "m", "revision": 1, "sourceId": "s"}),
        EnqueueRequest("media.process", {"mediaId": "m", "revision": 1, "sourceId": "s"}),
        EnqueueRequest("diag.noop", {}),
        EnqueueRequest("diag.noop", {}),
    ]
    results = await jobs.enqueue_many(requests)
    assert results[0].id == results[1].id
    assert (await row(pool, results[0].id))["payload"]["mediaIds"] == ["a", "b"]
    assert results[2].id == results[3].id
    assert (await row(pool, results[2].id))["revision"] == 4
    assert results[4].id == results[5].id
    assert results[5].outcome is EnqueueOutcome.DEDUPLICATED
    assert results[6].id != results[7].id
    assert len(await fetch(pool, "SELECT id FROM all_jobs")) == 5
    # Without folding, the same rows in one statement fail: the trap is real.
    async with pool.connection() as conn:
        with pytest.raises(psycopg.errors.CardinalityViolation):
            await conn.execute(
                "INSERT INTO jobs (id, type, payload, dedupe_key) VALUES "
                "(gen_random_uuid(), 't', '{}', 'k'), (gen_random_uuid(), 't', '{}', 'k') "
                "ON CONFLICT (type, dedupe_key) WHERE dedupe_key IS NOT NULL "
                "AND status IN ('pending', 'in_progress') DO UPDATE SET revision = 2"
            )


async def test_on_conflict_must_repeat_the_index_predicate(pool: Pool) -> None:
    """Trap: without the partial index's predicate there is no arbiter index at all."""
    async with pool.connection() as conn:
        with pytest.raises(psycopg.errors.InvalidColumnReference):
            await conn.execute(
                "INSERT INTO jobs (id, type, dedupe_key) VALUES (gen_random_uuid(), 't', 'k') "
                "ON CONFLICT (type, dedupe_key) DO NOTHING"
            )


async def test_where_before_do_update_only_picks_the_arbiter(pool: Pool) -> None:
    """Trap: the WHERE before DO UPDATE selects the index; it filters nothing. A filtering
    WHERE belongs after SET, which is what supersede uses for lower revisions."""
    jobs = service(pool)
    base = {"sourceId": "s1", "syncKind": "full"}
    first = await jobs.enqueue(EnqueueRequest("source.sync", {**base, "revision": 7}))
    same = await jobs.enqueue(EnqueueRequest("source.sync", {**base, "revision": 7}))
    assert same.outcome is EnqueueOutcome.DEDUPLICATED
    assert (await row(pool, first.id))["revision"] == 7


async def test_enqueue_joins_the_callers_transaction(pool: Pool) -> None:
    jobs = service(pool)
    async with pool.connection() as conn:
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                created = await jobs.enqueue(EnqueueRequest("diag.noop", {}), conn=conn)
                assert len(await fetch(pool, "SELECT id FROM all_jobs")) == 0  # invisible
                raise RuntimeError("caller fails")
    assert created.outcome is EnqueueOutcome.CREATED
    assert await fetch(pool, "SELECT id FROM all_jobs") == []


async def test_bad_input_names_the_field_and_stores_nothing(pool: Pool) -> None:
    jobs = service(pool, limit=1024)
    with pytest.raises(InvalidInput) as unknown:
        await jobs.enqueue(EnqueueRequest("no.such.type", {}))
    assert unknown.value.errors[0].path == "type"
    with pytest.raises(InvalidInput) as bad:
        await jobs.enqueue(EnqueueRequest("media.process", {"mediaId": "m", "revision": 0}))
    assert {e.path for e in bad.value.errors} == {"payload.revision", "payload.sourceId"}
    with pytest.raises(InvalidInput) as big:
        await jobs.enqueue(EnqueueRequest("diag.noop", {"blob": "x" * 2000}))
    assert big.value.errors[0].path == "payload"
    with pytest.raises(InvalidInput) as bulk:
        await jobs.enqueue_many(
            [EnqueueRequest("diag.noop", {}), EnqueueRequest("diag.sleep", {"seconds": -1})]
        )
    assert bulk.value.errors[0].path == "1.payload.seconds"
    assert await fetch(pool, "SELECT id FROM all_jobs") == []


async def test_paused_enqueue_is_refused(pool: Pool) -> None:
    async with pool.connection() as conn:
        await conn.execute("UPDATE jobs_control SET enqueue_paused = true")
    with pytest.raises(Paused):
        await service(pool).enqueue(EnqueueRequest("diag.noop", {}))
    assert await fetch(pool, "SELECT id FROM all_jobs") == []


async def test_paused_enqueue_refuses_jobs_with_and_without_a_key(pool: Pool) -> None:
    """Jobs without a dedupe key take their own statement (enqueue_new.sql): the pause holds
    for both statements, one by one and in bulk."""
    async with pool.connection() as conn:
        await conn.execute("UPDATE jobs_control SET enqueue_paused = true")
    jobs = service(pool)
    keyed = EnqueueRequest("media.process", {"mediaId": "m", "revision": 1, "sourceId": "s"})
    with pytest.raises(Paused):
        await jobs.enqueue(keyed)
    with pytest.raises(Paused):
        await jobs.enqueue_many([EnqueueRequest("diag.noop", {}), keyed])
    with pytest.raises(Paused):
        await jobs.enqueue_many([EnqueueRequest("diag.noop", {"i": 1})] * 3)
    assert await fetch(pool, "SELECT id FROM all_jobs") == []


async def test_bulk_with_and_without_keys_returns_every_job_in_order(pool: Pool) -> None:
    jobs = service(pool)
    keyed = EnqueueRequest("media.process", {"mediaId": "m", "revision": 1, "sourceId": "s"})
    first = await jobs.enqueue(keyed)
    results = await jobs.enqueue_many(
        [EnqueueRequest("diag.noop", {"i": 0}), keyed, EnqueueRequest("diag.noop", {"i": 2})]
    )
    assert [r.outcome for r in results] == [
        EnqueueOutcome.CREATED,
        EnqueueOutcome.DEDUPLICATED,
        EnqueueOutcome.CREATED,
    ]
    assert results[1].id == first.id
    stored = {r["id"]: r for r in await fetch(pool, "SELECT id, payload, revision FROM all_jobs")}
    assert stored[results[0].id]["payload"] == {"i": 0}
    assert stored[results[2].id]["payload"] == {"i": 2}
    assert results[0].revision == stored[results[0].id]["revision"] == 1
    assert len(stored) == 3


async def test_bulk_with_and_without_keys_is_all_or_nothing(pool: Pool) -> None:
    """Two statements (without and with a key) run in one transaction: when the second
    fails, the jobs the first inserted are gone too."""
    jobs = service(pool)
    async with pool.connection() as conn:  # this test's database refuses every keyed job
        await conn.execute(
            "ALTER TABLE jobs ADD CONSTRAINT no_keys CHECK (dedupe_key IS NULL) NOT VALID"
        )
    keyed = EnqueueRequest("media.process", {"mediaId": "m", "revision": 1, "sourceId": "s"})
    with pytest.raises(psycopg.errors.CheckViolation, match="no_keys"):
        await jobs.enqueue_many([EnqueueRequest("diag.noop", {}), keyed])
    assert await fetch(pool, "SELECT id FROM all_jobs") == []


async def test_bulk_copy_path_stores_every_job_like_the_statement(pool: Pool) -> None:
    """From COPY_MIN_ROWS jobs without a key or delay, bulk enqueue copies them in: same
    rows, same results, claimable now (available_at is database time, not in the future)."""
    jobs = service(pool)
    n = COPY_MIN_ROWS + 4
    results = await jobs.enqueue_many(
        [EnqueueRequest("diag.noop", {"i": i}, priority=3) for i in range(n)]
    )
    assert [r.outcome for r in results] == [EnqueueOutcome.CREATED] * n
    stored = await fetch(
        pool,
        "SELECT id, payload, priority, status, role, concurrency_class, max_attempts, "
        "available_at <= clock_timestamp() AS due FROM all_jobs",
    )
    by_id = {r["id"]: r for r in stored}
    assert [by_id[r.id]["payload"] for r in results] == [{"i": i} for i in range(n)]
    assert {
        (r["priority"], r["status"], r["role"], r["concurrency_class"], r["due"]) for r in stored
    } == {(3, "pending", "job", "default", True)}


async def test_bulk_copy_path_keeps_text_that_copy_would_read_as_escapes(pool: Pool) -> None:
    """The COPY path sends text: backslashes, tabs, newlines and carriage returns in the
    payload and in the source and fairness keys arrive as sent, NULLs stay NULL."""
    awkward = 'tab\there\nnew\rline \\N back\\slash "quoted" 日本語'
    jobs = service(pool)
    requests = [
        EnqueueRequest(
            "diag.sleep",
            {"seconds": 0, "sourceKey": f"src\t{i}", "fairnessKey": awkward},
        )
        for i in range(COPY_MIN_ROWS)
    ]
    requests.append(EnqueueRequest("diag.sleep", {"seconds": 0}))  # no keys: NULLs
    results = await jobs.enqueue_many(requests)
    stored = {
        r["id"]: r
        for r in await fetch(pool, "SELECT id, payload, source_key, fairness_key FROM all_jobs")
    }
    for i, result in enumerate(results[:-1]):
        job = stored[result.id]
        assert job["payload"]["fairnessKey"] == awkward
        assert (job["source_key"], job["fairness_key"]) == (f"src\t{i}", awkward)
    last = stored[results[-1].id]
    assert (last["source_key"], last["fairness_key"]) == (None, None)


async def test_a_payload_that_cannot_be_stored_as_json_is_refused(pool: Pool) -> None:
    jobs = service(pool)
    with pytest.raises(InvalidInput) as refused:
        await jobs.enqueue_many(
            [EnqueueRequest("diag.noop", {"text": "lone \ud800 surrogate"})] * COPY_MIN_ROWS
        )
    assert refused.value.errors[0].path == "0.payload"
    assert await fetch(pool, "SELECT id FROM all_jobs") == []


async def test_bulk_copy_path_respects_pause_and_the_callers_transaction(pool: Pool) -> None:
    jobs = service(pool)
    many = [EnqueueRequest("diag.noop", {"i": i}) for i in range(COPY_MIN_ROWS)]
    async with pool.connection() as conn:
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await jobs.enqueue_many(many, conn=conn)
                raise RuntimeError("caller fails")
    assert await fetch(pool, "SELECT id FROM all_jobs") == []
    async with pool.connection() as conn:
        await conn.execute("UPDATE jobs_control SET enqueue_paused = true")
    with pytest.raises(Paused):
        await jobs.enqueue_many(many)
    assert await fetch(pool, "SELECT id FROM all_jobs") == []


async def test_streamed_copy_stores_nothing_when_a_late_chunk_is_invalid(pool: Pool) -> None:
    """A bulk call streams its COPY chunk by chunk; a bad request after chunks were already
    sent aborts the COPY: nothing stored, every bad field named, and the caller's own
    transaction (the savepoint) is still usable and keeps its earlier write."""
    jobs = service(pool)
    n = 3 * COPY_CHUNK_ROWS + 7
    requests = [EnqueueRequest("diag.sleep", {"seconds": 0}) for _ in range(n)]
    requests[COPY_CHUNK_ROWS + 5] = EnqueueRequest("diag.sleep", {"seconds": -1})
    requests[n - 1] = EnqueueRequest("diag.sleep", {"seconds": 0}, max_attempts=0)
    async with pool.connection() as conn, conn.transaction():
        kept = await jobs.enqueue_many([EnqueueRequest("diag.noop", {"i": -1})], conn=conn)
        with pytest.raises(InvalidInput) as refused:
            await jobs.enqueue_many(requests, conn=conn)
        await conn.execute("SELECT 1")  # the transaction is not aborted
    assert [e.path for e in refused.value.errors] == [
        f"{COPY_CHUNK_ROWS + 5}.payload.seconds",
        f"{n - 1}.maxAttempts",
    ]
    assert [r["id"] for r in await fetch(pool, "SELECT id FROM all_jobs")] == [kept[0].id]
    # The same requests, mended, go through on a fresh connection.
    requests[COPY_CHUNK_ROWS + 5] = EnqueueRequest("diag.sleep", {"seconds": 0})
    requests[n - 1] = EnqueueRequest("diag.sleep", {"seconds": 0})
    results = await jobs.enqueue_many(requests)
    assert len({r.id for r in results}) == n
    assert len(await fetch(pool, "SELECT id FROM all_jobs")) == n + 1


async def test_paused_bulk_names_invalid_input_first(pool: Pool) -> None:
    """While paused, a bulk call with a bad request answers with the bad field (the
    client's fault, fixable now), not the pause."""
    jobs = service(pool)
    async with pool.connection() as conn:
        await conn.execute("UPDATE jobs_control SET enqueue_paused = true")
    requests = [EnqueueRequest("diag.sleep", {"seconds": 0}) for _ in range(COPY_MIN_ROWS)]
    requests[3] = EnqueueRequest("diag.sleep", {"seconds": -1})
    with pytest.raises(InvalidInput) as refused:
        await jobs.enqueue_many(requests)
    assert [e.path for e in refused.value.errors] == ["3.payload.seconds"]
    assert await fetch(pool, "SELECT id FROM all_jobs") == []


async def test_bulk_with_a_delay_takes_the_statement(pool: Pool) -> None:
    jobs = service(pool)
    many = [EnqueueRequest("diag.noop", {"i": i}) for i in range(COPY_MIN_ROWS)]
    await jobs.enqueue_many([*many, EnqueueRequest("diag.noop", {}, delay_s=3600)])
    later = await fetch(pool, "SELECT id FROM all_jobs WHERE available_at > clock_timestamp()")
    assert len(later) == 1
    assert len(await fetch(pool, "SELECT id FROM all_jobs")) == COPY_MIN_ROWS + 1


@pytest.mark.parametrize(
    ("type_", "payloads", "outcomes"),
    [
        ("diag.noop", [{}], [EnqueueOutcome.CREATED]),
        (
            "media.process",
            [{"mediaId": "m1", "revision": 2, "sourceId": "s1"}] * 2,
            [EnqueueOutcome.CREATED, EnqueueOutcome.DEDUPLICATED],
        ),
        (
            "source.sync",
            [{"sourceId": "s1", "syncKind": "full", "revision": r} for r in (2, 5)],
            [EnqueueOutcome.CREATED, EnqueueOutcome.SUPERSEDED],
        ),
        (
            "index.sync_delta",
            [{"index": "i", "mediaIds": ids} for ids in (["a"], ["b"])],
            [EnqueueOutcome.CREATED, EnqueueOutcome.MERGED],
        ),
    ],
)
async def test_a_stored_enqueue_returns_the_row_it_landed_in(
    pool: Pool, type_: str, payloads: list[dict[str, object]], outcomes: list[EnqueueOutcome]
) -> None:
    """`stored=True` answers with the job as the table holds it after the write (the row the
    API returns), whatever the policy did."""
    jobs = service(pool)
    for payload, outcome in zip(payloads, outcomes, strict=True):
        result = await jobs.enqueue(EnqueueRequest(type_, payload), stored=True)
        assert result.outcome is outcome
        assert result.job is not None
        assert result.job == await jobs.get(result.id)
        assert (result.job.id, result.job.revision) == (result.id, result.revision)


async def test_a_stored_enqueue_of_a_parent_returns_it_waiting(pool: Pool) -> None:
    result = await service(pool).enqueue(
        EnqueueRequest("ccip.batch", {"sourceIds": ["s1"]}), stored=True
    )
    assert result.job is not None and result.job.status == "pending"
    assert result.job == await service(pool).get(result.id)


async def test_a_stored_enqueue_while_paused_stores_nothing(pool: Pool) -> None:
    async with pool.connection() as conn:
        await conn.execute("UPDATE jobs_control SET enqueue_paused = true")
    for request in (
        EnqueueRequest("diag.noop", {}),
        EnqueueRequest("media.process", {"mediaId": "m1", "revision": 1, "sourceId": "s1"}),
    ):
        with pytest.raises(Paused):
            await service(pool).enqueue(request, stored=True)
    assert await fetch(pool, "SELECT id FROM all_jobs") == []


@pytest.mark.parametrize(
    ("request_", "path"),
    [
        (EnqueueRequest("diag.noop", {}, priority=-1), "priority"),
        (EnqueueRequest("diag.noop", {}, priority=32768), "priority"),
        (EnqueueRequest("diag.noop", {}, max_attempts=1001), "maxAttempts"),
        (EnqueueRequest("diag.noop", {}, delay_s=-1), "delay"),
    ],
)
async def test_the_engine_checks_the_enqueue_contract_for_every_caller(
    pool: Pool, request_: EnqueueRequest, path: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        await service(pool).enqueue(request_)
    assert [e.path for e in refused.value.errors] == [path]
    with pytest.raises(InvalidInput) as bulk:
        await service(pool).enqueue_many([EnqueueRequest("diag.noop", {}), request_])
    assert [e.path for e in bulk.value.errors] == [f"1.{path}"]
    assert await fetch(pool, "SELECT id FROM all_jobs") == []
