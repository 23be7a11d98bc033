"""Relay throughput against a baseline of plain `SendMessageBatch` calls to the same emulator
in the same run (target: at least 0.8 of the baseline).

Both sides send the same 2,000 bodies, 10 per call, with the same number of calls in flight,
each to a fresh queue (the emulator slows down as a queue grows, so queues are not shared).
One organization has work: the relay's claim is the fair claim (issue 17) with a window
large enough not to bind, since nothing here finishes the items a window would wait for;
what is measured is the cost of the fair claim (skip scan, in-flight count, claim lock).

    .venv/bin/python -m bench.batches_relay
"""

from __future__ import annotations

import asyncio
import time
import uuid

from bench.batches_common import environment
from jobrelay.aws.clients import AwsEndpoint, sqs_client
from jobrelay.aws.sqs_sender import SqsSender
from jobrelay.batches.creation import BatchLimits
from jobrelay.batches.relay import Relay
from jobrelay.batches.relay_config import RelayConfig
from jobrelay.batches.service import BatchService

ITEMS = 2_000
IN_FLIGHT = 4


async def main() -> None:
    async with environment() as env:
        aws = AwsEndpoint(region="us-east-1", endpoint_url=env.emulator_url)
        service = BatchService(env.pool, BatchLimits(max_items=ITEMS, message_limit_bytes=262_144))
        view = await service.create(
            organization_id=env.organization_id,
            project_id=env.project_id,
            batch_type="page_import",
            items=[{"url": f"https://example.com/page/{i}"} for i in range(ITEMS)],
            actor="bench",
        )
        async with env.pool.connection() as conn:
            bodies = [
                str(r["body"])
                for r in await (
                    await conn.execute(
                        "SELECT message::text AS body FROM batch_item WHERE batch_id = %s",
                        (view.id,),
                    )
                ).fetchall()
            ]
        async with sqs_client(aws) as sqs:
            results: dict[str, list[float]] = {"baseline": [], "relay": []}
            for round_ in range(2):
                queue = (await sqs.create_queue(QueueName=f"base-{uuid.uuid4().hex[:8]}"))[
                    "QueueUrl"
                ]
                gate = asyncio.Semaphore(IN_FLIGHT)

                async def send(
                    chunk: list[str], queue: str = queue, gate: asyncio.Semaphore = gate
                ) -> None:
                    async with gate:
                        await sqs.send_message_batch(
                            QueueUrl=queue,
                            Entries=[
                                {
                                    "Id": str(i),
                                    "MessageBody": b,
                                    "MessageAttributes": {
                                        "dispatch_attempt": {
                                            "DataType": "Number",
                                            "StringValue": "1",
                                        }
                                    },
                                }
                                for i, b in enumerate(chunk)
                            ],
                        )

                start = time.perf_counter()
                await asyncio.gather(*(send(bodies[i : i + 10]) for i in range(0, len(bodies), 10)))
                results["baseline"].append(ITEMS / (time.perf_counter() - start))

                queue = (await sqs.create_queue(QueueName=f"relay-{uuid.uuid4().hex[:8]}"))[
                    "QueueUrl"
                ]
                async with env.pool.connection() as conn:
                    await conn.execute(
                        "UPDATE batch_item SET dispatched_at = NULL, dispatch_attempts = 0, "
                        "lease_until = NULL WHERE batch_id = %s",
                        (view.id,),
                    )
                async with SqsSender(aws, queue_url=queue) as sender:
                    await sender.queue_url()  # opens its client before the clock starts
                    relay = Relay(
                        pool=env.pool,
                        sender=sender,
                        config=RelayConfig(
                            claim_size=100, workers=1, max_in_flight=IN_FLIGHT, window=ITEMS
                        ),
                    )
                    start = time.perf_counter()
                    sent = 0
                    while sent < ITEMS:
                        sent += (await relay.run_once()).sent
                    results["relay"].append(ITEMS / (time.perf_counter() - start))
                print(
                    f"round {round_ + 1}: baseline {results['baseline'][-1]:.0f} msg/s, "
                    f"relay {results['relay'][-1]:.0f} msg/s"
                )
        base = max(results["baseline"])
        relay_rate = max(results["relay"])
        print(
            f"best: baseline {base:.0f} msg/s, relay {relay_rate:.0f} msg/s, "
            f"ratio {relay_rate / base:.2f} (target >= 0.8)"
        )


if __name__ == "__main__":
    asyncio.run(main())
