"""What a long queue costs the local emulator (issue 16): the mean time of the calls an SQS
worker makes per message (ReceiveMessage of 10, DeleteMessage, SendMessageBatch of 10) with
200 messages waiting (one organization's fair-dispatch window) and with 10,000 (a whole batch
in the queue, what the relay did before fair dispatch), in the same run on the same emulator.

Real SQS does not slow down with the queue's length; moto's model walks the queue's messages
on every receive, delete and send. The ratio is the part of the local stack's time that
belongs to the emulator and that the relay's window removes.

    .venv/bin/python -m bench.emulator_queue_depth
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid

from jobrelay.aws.clients import AwsEndpoint, sqs_client
from jobrelay.aws.emulator import LocalEmulator

DEPTHS = (200, 10_000)
SAMPLES = 30
BODY = '{"kind":"page_import","page_import_id":"%s","url":"http://127.0.0.1/page.html"}'


async def measure(aws: AwsEndpoint, depth: int) -> dict[str, float]:
    async with sqs_client(aws) as sqs:
        queue = (await sqs.create_queue(QueueName=f"depth-{uuid.uuid4().hex[:8]}"))["QueueUrl"]
        gate = asyncio.Semaphore(4)

        async def fill(start: int) -> None:
            async with gate:
                await sqs.send_message_batch(
                    QueueUrl=queue,
                    Entries=[
                        {"Id": str(i), "MessageBody": BODY % uuid.uuid4()}
                        for i in range(min(10, depth - start))
                    ],
                )

        await asyncio.gather(*(fill(s) for s in range(0, depth, 10)))
        times: dict[str, list[float]] = {"receive 10": [], "delete 1": [], "send 10": []}
        for _ in range(SAMPLES):
            start = time.perf_counter()
            messages = (
                await sqs.receive_message(
                    QueueUrl=queue, MaxNumberOfMessages=10, VisibilityTimeout=300
                )
            ).get("Messages", [])
            times["receive 10"].append(time.perf_counter() - start)
            start = time.perf_counter()
            await sqs.delete_message(QueueUrl=queue, ReceiptHandle=messages[0]["ReceiptHandle"])
            times["delete 1"].append(time.perf_counter() - start)
            start = time.perf_counter()
            await sqs.send_message_batch(
                QueueUrl=queue,
                Entries=[{"Id": str(i), "MessageBody": BODY % uuid.uuid4()} for i in range(10)],
            )
            times["send 10"].append(time.perf_counter() - start)
        await sqs.delete_queue(QueueUrl=queue)
    return {name: 1000 * statistics.median(samples) for name, samples in times.items()}


async def main() -> None:
    emulator = LocalEmulator()
    url = emulator.start()
    try:
        aws = AwsEndpoint(region="us-east-1", endpoint_url=url)
        print(f"load average {os.getloadavg()}")
        results = {depth: await measure(aws, depth) for depth in DEPTHS}
        for name in results[DEPTHS[0]]:
            short, long = results[DEPTHS[0]][name], results[DEPTHS[-1]][name]
            print(
                f"{name}: median {short:.1f} ms with {DEPTHS[0]} queued, {long:.1f} ms with "
                f"{DEPTHS[-1]:,} queued (x{long / short:.1f})"
            )
        print(f"load average {os.getloadavg()}")
    finally:
        emulator.stop()


if __name__ == "__main__":
    asyncio.run(main())
