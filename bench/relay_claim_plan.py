"""The fair claim's plan and time with a large backlog (issue 17): 100,000 items waiting in one
organization's batch and 1,000 in another's 20 batches, 400 in flight (both windows full after
a few passes), then `EXPLAIN (ANALYZE, BUFFERS)` of one claim with a window that does not bind
(rolled back). Shows that every scan uses its partial index: the skip scan over the batches
with waiting items, the in-flight count, the pick and the UPDATE by primary key.

    .venv/bin/python -m bench.relay_claim_plan
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence

from bench.batches_common import environment
from jobrelay.auth.tenancy import Tenancy
from jobrelay.aws.sender import OutgoingMessage, SendResult
from jobrelay.batches.creation import BatchLimits
from jobrelay.batches.relay import Relay
from jobrelay.batches.relay_config import RelayConfig
from jobrelay.batches.service import BatchService
from jobrelay.db.sql import Queries
from jobrelay.domain.batch_status import MAX_DISPATCH_ATTEMPTS

_SQL = Queries("jobrelay.batches")


class Accepts:
    async def send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult:
        return SendResult(accepted={m.item_id: m.item_id for m in messages})


async def main() -> None:
    async with environment() as env:
        service = BatchService(
            env.pool, BatchLimits(max_items=100_000, message_limit_bytes=262_144)
        )
        await service.create(
            organization_id=env.organization_id,
            project_id=env.project_id,
            batch_type="page_import",
            items=[{"url": f"https://example.com/{i}"} for i in range(100_000)],
            actor="bench",
        )
        tenancy = Tenancy(env.pool)
        other = await tenancy.create_organization("other", actor="bench")
        project = await tenancy.create_project(int(other["id"]), "p", actor="bench")
        for n in range(20):
            await service.create(
                organization_id=int(other["id"]),
                project_id=int(project["id"]),
                batch_type="page_import",
                items=[{"url": f"https://example.com/{n}/{i}"} for i in range(50)],
                actor="bench",
            )
        async with env.pool.connection() as conn:
            await conn.execute("ANALYZE")
        relay = Relay(pool=env.pool, sender=Accepts(), config=RelayConfig(window=200))
        passes = []
        for _ in range(6):
            start = time.perf_counter()
            await relay.run_once()
            passes.append(f"{1000 * (time.perf_counter() - start):.1f}")
        print(f"load average {os.getloadavg()}; passes (claim+record of 100), ms: {passes}")
        async with env.pool.connection() as conn, conn.transaction(force_rollback=True):
            rows = await (
                await conn.execute(
                    "EXPLAIN (ANALYZE, BUFFERS) " + _SQL.claim_items,
                    {
                        "max_attempts": MAX_DISPATCH_ATTEMPTS,
                        "limit": 100,
                        "lease_s": 90,
                        "actor": "bench",
                        "window": 1_000_000,
                        "weight_orgs": [],
                        "weights": [],
                        "in_flight_expiry_s": 900,
                    },
                )
            ).fetchall()
        for row in rows:
            print(next(iter(row.values())))


if __name__ == "__main__":
    asyncio.run(main())
