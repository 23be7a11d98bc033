"""Status of a 100,000-item batch at the service layer, right after `VACUUM ANALYZE`: the
kept counts behind `GET /v1/batches/{id}` beside the full recount (the checker), with a mix of
queued, running, completed and failed items. The figure that counts (through HTTP, in the
state traffic leaves the tables, no VACUUM) is `bench.scale.batches`.

    .venv/bin/python -m bench.batches_status
"""

from __future__ import annotations

import asyncio

from psycopg import sql

from bench.batches_common import environment, summary, timed
from jobrelay.batches.counts import batch_counts, recount_batch
from jobrelay.batches.creation import BatchLimits
from jobrelay.batches.service import _SQL, BatchService


async def main() -> None:
    async with environment() as env:
        service = BatchService(
            env.pool, BatchLimits(max_items=100_000, message_limit_bytes=262_144)
        )
        view = await service.create(
            organization_id=env.organization_id,
            project_id=env.project_id,
            batch_type="page_import",
            items=[{"url": f"https://example.com/page/{i}"} for i in range(100_000)],
            actor="bench",
        )
        async with env.pool.connection() as conn:
            await conn.execute(
                "UPDATE batch_item SET dispatched_at = now(), dispatch_attempts = 1 "
                "WHERE batch_id = %s AND position %% 10 <> 0",
                (view.id,),
            )
            await conn.execute(
                "UPDATE page_import SET status = CASE WHEN random() < 0.6 THEN '1' "
                "WHEN random() < 0.1 THEN '2' ELSE status END WHERE batch_id = %s",
                (view.id,),
            )
            await conn.execute("VACUUM ANALYZE batch_item")
            await conn.execute("VACUUM ANALYZE page_import")

        async def status() -> object:
            return await service.get(view.id)

        await status()
        result = await service.get(view.id)
        print(f"counts: {result.counts}")
        print(f"GET status (service, 3 statements): {summary(await timed(status, 20))}")

        async def aggregate() -> object:
            async with env.pool.connection() as conn, conn.transaction():
                return await batch_counts(conn, view.id, "page_import")

        print(f"kept counts alone: {summary(await timed(aggregate, 20))}")

        async def recount() -> object:
            async with env.pool.connection() as conn, conn.transaction():
                return await recount_batch(conn, view.id, "page_import")

        print(f"full recount (checker): {summary(await timed(recount, 20))}")

        async with env.pool.connection() as conn, conn.transaction():
            await conn.execute(_SQL.merge_join_only)
            query = sql.SQL("EXPLAIN (ANALYZE, COSTS OFF) " + _SQL.batch_counts_page_import)
            plan = await (await conn.execute(query, {"batch_id": view.id})).fetchall()
        print("\n".join(str(r["QUERY PLAN"]) for r in plan))


if __name__ == "__main__":
    asyncio.run(main())
