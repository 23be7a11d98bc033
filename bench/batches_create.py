"""Batch creation latency: 1,000 and 10,000 Page Import items (validation + one transaction
with COPY), `BatchService.create` as the API calls it.

    .venv/bin/python -m bench.batches_create
"""

from __future__ import annotations

import asyncio

from bench.batches_common import environment, summary, timed
from jobrelay.batches.creation import BatchLimits
from jobrelay.batches.service import BatchService


async def main() -> None:
    async with environment() as env:
        service = BatchService(env.pool, BatchLimits(max_items=10_000, message_limit_bytes=262_144))
        for size in (1_000, 10_000):
            items = [{"url": f"https://example.com/page/{i}"} for i in range(size)]

            async def create(items: list[dict[str, str]] = items) -> object:
                return await service.create(
                    organization_id=env.organization_id,
                    project_id=env.project_id,
                    batch_type="page_import",
                    items=items,
                    actor="bench",
                )

            await create()  # warm-up
            print(f"create {size:>6} items: {summary(await timed(create, 5))}")


if __name__ == "__main__":
    asyncio.run(main())
