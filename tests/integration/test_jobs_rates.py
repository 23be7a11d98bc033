"""Rate limits per concurrency class (issue 17) at the claim, on real PostgreSQL: the window
is shared by every claimer (two independent connections), a claimer waits for the other's
uncommitted starts, a held-back job is not an attempt, the diagnosis says until when, and a
bad rate is refused with one line naming it."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay.api.routes.jobs import DiagnosisOut
from jobrelay.db.pool import Connection
from jobrelay.domain.jobs_config import (
    ConfigError,
    QueueLimits,
    Rate,
    parse_class_rates,
    parse_rate,
)
from jobrelay.jobs import claims, presence
from jobrelay.jobs.diagnosis import Reason, diagnose
from jobrelay.jobs.enqueue import EnqueueRequest
from jobrelay.jobs.models import ClaimedJob
from tests.harness import run_cli
from tests.jobs_support import eventually, fetch, registry, service

Pool = AsyncConnectionPool[Connection]
FIVE_PER_MINUTE = {"default": Rate(5, 60.0)}


async def _claim(
    conn: Connection, limit: int, rates: dict[str, Rate], worker: str = "w"
) -> list[ClaimedJob]:
    limits = QueueLimits(lease_s=30, total=limit, slots={"default": limit}, rates=rates)
    return await claims.claim(conn, limits, worker_id=worker)


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("60/min", Rate(60, 60.0)),
        ("30/10s", Rate(30, 10.0)),
        ("5/s", Rate(5, 1.0)),
        ("1000/h", Rate(1000, 3600.0)),
        ((30, 10), Rate(30, 10.0)),
        ((2, 0.5), Rate(2, 0.5)),
    ],
)
def test_rates_are_read_from_text_or_pairs(text: object, rate: Rate) -> None:
    assert parse_rate(text, what="rate") == rate


@pytest.mark.parametrize(
    "bad", ["0/min", "-1/min", "5/0s", "60 per minute", "60/fortnight", (0, 10), (5, -1), "x", 7]
)
def test_a_zero_negative_or_malformed_rate_is_refused_by_name(bad: object) -> None:
    with pytest.raises(ConfigError, match="invalid rate of 'ai'"):
        parse_rate(bad, what="rate of 'ai'")


def test_rates_per_class_from_a_setting() -> None:
    assert parse_class_rates("ai=60/min, default=30/10s", what="R") == {
        "ai": Rate(60, 60.0),
        "default": Rate(30, 10.0),
    }
    with pytest.raises(ConfigError, match="invalid R"):
        parse_class_rates("ai=60/min,ai=1/s", what="R")


def test_a_bad_rate_setting_stops_the_worker_with_one_line(db_dsn: str) -> None:
    result = run_cli("worker", DATABASE_URL=db_dsn, JOBRELAY_JOBS_RATES="ai=0/s")
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "JOBRELAY_JOBS_RATES" in line and "'0/s'" in line


async def test_the_window_is_shared_by_every_claimer(pool: Pool) -> None:
    await service(pool).enqueue_many([EnqueueRequest("diag.noop", {"n": i}) for i in range(20)])
    async with pool.connection() as first, pool.connection() as second:
        got = await _claim(first, 10, FIVE_PER_MINUTE, "w1")
        assert len(got) == 5
        assert await _claim(second, 10, FIVE_PER_MINUTE, "w2") == []
        assert await _claim(first, 10, FIVE_PER_MINUTE, "w1") == []
    held = await fetch(pool, "SELECT DISTINCT attempt_count FROM all_jobs WHERE status = 'pending'")
    assert [r["attempt_count"] for r in held] == [0], "held back by the rate: not an attempt"
    [window] = await fetch(pool, "SELECT max_starts, period_s, starts FROM job_rate_windows")
    assert (window["max_starts"], window["period_s"], len(window["starts"])) == (5, 60.0, 5)


async def test_a_claimer_waits_for_the_uncommitted_starts_of_another(pool: Pool) -> None:
    await service(pool).enqueue_many([EnqueueRequest("diag.noop", {"n": i}) for i in range(20)])
    async with pool.connection() as first, pool.connection() as second:
        async with first.transaction():
            assert len(await _claim(first, 3, FIVE_PER_MINUTE, "w1")) == 3
            # The second claimer blocks on the class's window row until the first commits,
            # then sees its 3 starts: it gets 2, never 5.
            racing = asyncio.create_task(_claim(second, 10, FIVE_PER_MINUTE, "w2"))
            await eventually(
                lambda: _waiting_on_a_lock(pool), what="the second claim to wait on the row"
            )
            assert not racing.done()
        assert len(await racing) == 2
    running = await fetch(pool, "SELECT count(*) AS n FROM all_jobs WHERE status = 'in_progress'")
    assert running[0]["n"] == 5


async def _waiting_on_a_lock(pool: Pool) -> bool:
    rows = await fetch(
        pool,
        "SELECT count(*) AS n FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    return bool(rows[0]["n"])


async def test_the_window_slides(pool: Pool) -> None:
    await service(pool).enqueue_many([EnqueueRequest("diag.noop", {"n": i}) for i in range(10)])
    rate = {"default": Rate(2, 0.5)}
    async with pool.connection() as conn:
        assert len(await _claim(conn, 10, rate)) == 2
        assert await _claim(conn, 10, rate) == []

        later: list[object] = []

        async def more() -> bool:
            # The two starts leave the window a few microseconds apart (one clock reading
            # per row); a claim between them takes one, the next claim the other.
            later.extend(await _claim(conn, 10, rate))
            return len(later) >= 2

        await eventually(more, what="the window to free two starts")
        assert len(later) == 2
    rows = await fetch(pool, "SELECT claimed_at FROM all_jobs WHERE claimed_at IS NOT NULL")
    starts = sorted(r["claimed_at"] for r in rows)
    assert len(starts) == 4
    assert starts[2] - starts[0] >= dt.timedelta(seconds=0.5)


async def test_the_diagnosis_says_rate_limited_until_when(pool: Pool) -> None:
    jobs = service(pool)
    await jobs.enqueue_many([EnqueueRequest("diag.noop", {"n": i}) for i in range(6)])
    async with pool.connection() as conn:
        await presence.announce(
            conn, worker_id="w", class_slots={"default": 5}, global_caps={}, interval_s=60
        )
        await _claim(conn, 10, FIVE_PER_MINUTE)
        [waiting] = await fetch(pool, "SELECT id FROM all_jobs WHERE status = 'pending'")
        found = await diagnose(conn, waiting["id"], registry=registry())
    [first] = await fetch(pool, "SELECT min(claimed_at) AS at FROM all_jobs")
    assert found.reason is Reason.RATE_LIMITED
    assert found.rate_limit == "5/60s"
    assert found.rate_limited_until == first["at"] + dt.timedelta(seconds=60)
    assert found.message.startswith(f"rate limited until {found.rate_limited_until:%Y-%m-%d}")
    assert found.attempt_count == 0
    wire = DiagnosisOut.of(found).model_dump(mode="json", by_alias=True)
    assert wire["reason"] == "rate_limited" and wire["rateLimit"] == "5/60s"
    assert wire["rateLimitedUntil"] is not None


async def test_a_rate_a_cap_and_fairness_keys_hold_together(pool: Pool) -> None:
    jobs = service(pool)
    body = {"seconds": 0, "concurrencyClass": "ai"}
    await jobs.enqueue_many(
        [EnqueueRequest("diag.sleep", {**body, "fairnessKey": "a"}) for _ in range(20)]
        + [EnqueueRequest("diag.sleep", {**body, "fairnessKey": "b"}) for _ in range(20)]
    )
    rates = {"ai": Rate(3, 60.0)}

    async def claim(conn: Connection) -> list[ClaimedJob]:
        limits = QueueLimits(lease_s=30, total=10, slots={"ai": 10}, caps={"ai": 2}, rates=rates)
        return await claims.claim(conn, limits, worker_id="w")

    async with pool.connection() as first, pool.connection() as second:
        got = await claim(first)
        assert len(got) == 2, "the cap"
        assert {j.payload["fairnessKey"] for j in got} == {"a", "b"}, "one per key"
        assert await claim(second) == [], "the cap, from another connection"
        await claims.complete_many(first, [claims.Done(j) for j in got])
        assert len(await claim(second)) == 1, "the rate: 3 starts per minute"
        assert await claim(first) == []
