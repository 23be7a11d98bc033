"""Property: the counts kept by the count triggers (migration 0012) always equal a full
recount of the items and children (`batch_counts_*.sql`, the checker), whatever mix of
creates, relay claims/sends/retries/final failures, lease-expiry sweeps, webhooks, cancels,
deletes and folds runs concurrently on independent connections.

A checker runs beside the writers and compares the two in one snapshot (REPEATABLE READ),
again and again; at the end every batch is compared once more.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay.batches import outbox
from jobrelay.batches.counts import batch_counts, recount_batch
from jobrelay.batches.creation import BatchLimits
from jobrelay.batches.outbox import fail_children
from jobrelay.batches.service import BatchService
from jobrelay.children.outcomes import PAGE_IMPORT
from jobrelay.db.deadlock import retry_on_deadlock
from jobrelay.db.pool import Connection, open_pool, transaction
from jobrelay.db.sql import Queries
from jobrelay.domain.errors import Conflict, NotFound
from jobrelay.protocol import WorkerOutcome

_SQL = Queries("jobrelay.batches")
WRITERS = 4
STEPS = 60


async def _tenant(pool: AsyncConnectionPool[Connection]) -> tuple[int, int]:
    async with transaction(pool) as conn:
        org = await (
            await conn.execute(
                "INSERT INTO organization (name, created_by, updated_by) "
                "VALUES ('o', 't', 't') RETURNING id"
            )
        ).fetchone()
        assert org is not None
        project = await (
            await conn.execute(
                "INSERT INTO project (organization_id, name, created_by, updated_by) "
                "VALUES (%s, 'p', 't', 't') RETURNING id",
                (org["id"],),
            )
        ).fetchone()
        assert project is not None
    return int(str(org["id"])), int(str(project["id"]))


class Writer:
    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        service: BatchService,
        scope: tuple[int, int],
        batches: list[str],
        rng: random.Random,
    ) -> None:
        self.pool = pool
        self.service = service
        self.scope = scope
        self.batches = batches
        self.rng = rng

    async def create(self) -> None:
        view = await self.service.create(
            organization_id=self.scope[0],
            project_id=self.scope[1],
            batch_type="page_import",
            items=[{"url": f"https://example.com/{i}"} for i in range(self.rng.randint(1, 25))],
            actor="test",
        )
        self.batches.append(view.id)

    async def relay_pass(self) -> None:
        """Claim (sometimes with an already expired lease), then record the sends, a retry
        or a final failure, like the relay's pass."""
        lease_s = self.rng.choice([0.0, 30.0])
        async with self.pool.connection() as conn:
            claimed = await (
                await conn.execute(
                    _SQL.claim_items,
                    {
                        "max_attempts": 3,
                        "limit": self.rng.randint(1, 20),
                        "lease_s": lease_s,
                        "actor": "relay",
                        # fair dispatch off: no organization is held back by its window
                        "window": 1_000_000,
                        "weight_orgs": [],
                        "weights": [],
                        "in_flight_expiry_s": 900.0,
                    },
                )
            ).fetchall()
        # the claim's one row without an id only reports how many were held back
        claimed = [row for row in claimed if row["id"] is not None]
        if not claimed:
            return
        sent, retry, final = [], [], []
        for row in claimed:
            roll = self.rng.random()
            target = sent if roll < 0.5 else retry if roll < 0.75 else final
            target.append(row)

        async def record() -> None:
            async with transaction(self.pool) as conn:
                if sent:
                    await conn.execute(
                        _SQL.record_sent,
                        {
                            "ids": [r["id"] for r in sent],
                            "attempts": [r["dispatch_attempts"] for r in sent],
                            "actor": "relay",
                        },
                    )
                if retry:
                    await conn.execute(
                        _SQL.retry_later,
                        {
                            "ids": [r["id"] for r in retry],
                            "attempts": [r["dispatch_attempts"] for r in retry],
                            "delays": [0.0 for _ in retry],
                            "actor": "relay",
                        },
                    )
                if final:
                    rows = await (
                        await conn.execute(
                            _SQL.fail_items,
                            {
                                "ids": [r["id"] for r in final],
                                "attempts": [r["dispatch_attempts"] for r in final],
                                "errors": ["boom" for _ in final],
                                "actor": "relay",
                            },
                        )
                    ).fetchall()
                    await fail_children(conn, [r for r in rows if r["changed"]], actor="relay")

        await retry_on_deadlock(record)

    async def sweep(self) -> None:
        await outbox.sweep_expired(self.pool, actor="relay", limit=50, lock_timeout_s=5.0)

    async def webhooks(self) -> None:
        """Outcomes for a few children of one batch, one transaction each, some twice."""
        if not self.batches:
            return
        batch_id = self.rng.choice(self.batches)
        async with self.pool.connection() as conn:
            ids = [
                str(r["job_id"])
                for r in await (
                    await conn.execute(
                        "SELECT job_id FROM batch_item WHERE batch_id = %s", (batch_id,)
                    )
                ).fetchall()
            ]
        for child_id in self.rng.sample(ids, k=min(len(ids), self.rng.randint(1, 8))):
            if self.rng.random() < 0.7:
                body: dict[str, Any] = {
                    "kind": "page_import",
                    "id": child_id,
                    "outcome": "completed",
                    "resultUrl": f"r/{child_id}",
                    "manifestHash": "ab" * 32,
                }
            else:
                body = {
                    "kind": "page_import",
                    "id": child_id,
                    "outcome": "failed",
                    "errorMessage": "no",
                }
            outcome = WorkerOutcome.model_validate(body)

            async def apply(outcome: WorkerOutcome = outcome) -> None:
                async with transaction(self.pool) as conn:
                    await PAGE_IMPORT.apply(conn, outcome, actor="webhook")

            await retry_on_deadlock(apply)

    async def cancel(self) -> None:
        if self.batches:
            with contextlib.suppress(Conflict, NotFound):
                await self.service.cancel(self.rng.choice(self.batches), actor="test")

    async def delete(self) -> None:
        if self.batches and self.rng.random() < 0.3:
            with contextlib.suppress(NotFound):
                await self.service.delete(self.rng.choice(self.batches), actor="test")

    async def fold(self) -> None:
        if self.batches:
            async with transaction(self.pool) as conn:
                await conn.execute(
                    "SELECT jobrelay_batch_count_fold(%s)", (self.rng.choice(self.batches),)
                )

    async def run(self, steps: int) -> None:
        ops: list[tuple[Callable[[], Awaitable[None]], int]] = [
            (self.create, 3),
            (self.relay_pass, 6),
            (self.webhooks, 6),
            (self.sweep, 1),
            (self.cancel, 1),
            (self.delete, 1),
            (self.fold, 1),
        ]
        for _ in range(steps):
            op = self.rng.choices([o for o, _ in ops], weights=[w for _, w in ops])[0]
            await op()


async def _compare(pool: AsyncConnectionPool[Connection], batch_id: str) -> None:
    async with transaction(pool) as conn:
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        kept = await batch_counts(conn, batch_id, "page_import")
        recounted = await recount_batch(conn, batch_id, "page_import")
    assert kept == recounted, batch_id


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_kept_counts_equal_a_recount_under_concurrent_writers(db_dsn: str, seed: int) -> None:
    pool = await open_pool(db_dsn, min_size=WRITERS + 2, max_size=WRITERS + 2)
    try:
        service = BatchService(pool, BatchLimits(max_items=1000, message_limit_bytes=262_144))
        scope = await _tenant(pool)
        batches: list[str] = []
        rng = random.Random(seed)
        writers = [
            Writer(pool, service, scope, batches, random.Random(rng.random()))
            for _ in range(WRITERS)
        ]
        for _ in range(3):
            await writers[0].create()
        done = asyncio.Event()
        checked = 0

        async def checker() -> None:
            nonlocal checked
            check_rng = random.Random(seed)
            while not done.is_set():
                await _compare(pool, check_rng.choice(batches))
                checked += 1

        check = asyncio.create_task(checker())
        await asyncio.gather(*(w.run(STEPS) for w in writers))
        done.set()
        await check
        assert checked > 0
        for batch_id in batches:
            await _compare(pool, batch_id)
        # The writers did reach every state, so the comparison covered them.
        async with pool.connection() as conn:
            totals = await (
                await conn.execute(
                    "SELECT sum(queued) AS q, sum(running) AS r, sum(completed) AS c, "
                    "sum(failed) AS f, sum(cancelled) AS x FROM batch_count_delta"
                )
            ).fetchone()
        assert totals is not None
        # Every item starts queued and runs; the writers may have moved them all on by the
        # end, so queued and running can be 0 here. The terminal states cannot be left.
        assert all(int(str(totals[k])) > 0 for k in ("c", "f", "x")), totals
    finally:
        await pool.close()
