"""End-to-end batch throughput (issue 16): items/s from the batch POST to every child terminal,
through `jobrelay relay` -> SQS -> `jobrelay sqs-worker` (fetch the page, store the result in
S3) -> signed webhook to `jobrelay api`, on the local stack (embedded PostgreSQL, the moto
emulator, a loopback page server), with 1, 2 and 4 SQS-worker processes.

Beside it, in the same run, a baseline performs the same SQS/S3/HTTP calls in a plain asyncio
loop without jobrelay: SendMessageBatch of the same bodies, then as many concurrent consumers
as the worker processes have slots, each receiving 10, and per message S3 GetObject (the
worker's "already stored?" check), GET of the page, PutObject, POST of a signed-size body to
an endpoint that answers 204, DeleteMessage. The ratio jobrelay / baseline says what the
relay, the API, PostgreSQL and the worker's bookkeeping cost on top of the calls themselves.

    .venv/bin/python -m bench.e2e_batches                       # 2,000 items, 1/2/4 workers
    .venv/bin/python -m bench.e2e_batches --items 10000 --workers 4 --no-baseline
    .venv/bin/python -m bench.e2e_batches --poll-wait 10 --concurrency 8   # old defaults
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.batches_common import FAST
from jobrelay.auth.tenancy import Tenancy
from jobrelay.aws.clients import AwsEndpoint, ensure_resources, s3_client, sqs_client
from jobrelay.aws.emulator import LocalEmulator, free_port
from jobrelay.cli.commands.demo import serve_demo_pages
from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from jobrelay.db.pool import open_pool

JOBRELAY = str(Path(sys.executable).with_name("jobrelay"))


CALLS: dict[str, list[float]] = {}
TICKS = os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds of it and of its exited, waited-for children)."""
    table: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[1] is the parent pid; [11:15] utime, stime, cutime, cstime (clock ticks)
        table[int(entry.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / TICKS)
    return table


def cpu_seconds(roots: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds used so far by each named group of process trees (live descendants and
    the exited children their parents waited for): what each part of the stack costs,
    whatever else the machine runs. A group of just this process counts it alone."""
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    totals: dict[str, float] = {}
    for name, pids in roots.items():
        if pids == [os.getpid()]:  # this process alone: its children are other groups
            own = os.times()
            totals[name] = own.user + own.system
            continue
        total, todo = 0.0, list(pids)
        while todo:
            pid = todo.pop()
            if pid in table:
                total += table[pid][1]
                todo.extend(children.get(pid, []))
        totals[name] = total
    return totals


@contextmanager
def timed(name: str) -> Iterator[None]:
    """Wall-clock time of one call of the baseline, by kind (what the calls cost here)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        CALLS.setdefault(name, []).append(time.perf_counter() - start)


@contextmanager
def sink() -> Iterator[str]:
    """An HTTP endpoint answering 204 to every POST: the baseline's webhook receiver."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


class Stack:
    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [JOBRELAY, *args], env={**self.env, **env}, stdout=log, stderr=subprocess.STDOUT
        )
        self.processes.append(process)
        return process

    def stop(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.remove(process)

    def stop_all(self) -> None:
        for process in list(self.processes):
            self.stop(process)


def _wait_terminal(dsn: str, batch_id: str, items: int) -> None:
    """Poll until every child of the batch is terminal (5 times a second)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM page_import WHERE batch_id = %s AND status <> '0'",
                (batch_id,),
            ).fetchone()
            if row and int(row[0]) >= items:
                return
            time.sleep(0.2)


def _wait_ready(api: str, logs: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{api}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"the API did not start; see {logs}")


def _token(env: dict[str, str]) -> str:
    return subprocess.run(
        [JOBRELAY, "token", "--sub", "bench"], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


async def run_jobrelay(
    stack: Stack,
    *,
    dsn: str,
    api: str,
    token: str,
    project_id: int,
    urls: list[str],
    workers: int,
    groups: dict[str, list[int]],
) -> float:
    """Items/s from the POST to every child terminal with `workers` sqs-worker processes;
    prints the CPU milliseconds per item of each part."""
    started = [stack.start(f"sqs-worker-{workers}-{i}", "sqs-worker") for i in range(workers)]
    groups = {**groups, "sqs-workers": [p.pid for p in started]}
    before = cpu_seconds(groups)
    try:
        async with httpx.AsyncClient(timeout=120) as client:
            start = time.perf_counter()
            response = await client.post(
                f"{api}/v1/projects/{project_id}/batches",
                json={"type": "page_import", "items": [{"url": u} for u in urls]},
                headers={"authorization": f"Bearer {token}"},
            )
            response.raise_for_status()
            batch_id = response.json()["id"]
            await asyncio.to_thread(_wait_terminal, dsn, batch_id, len(urls))
            elapsed = time.perf_counter() - start
        with psycopg.connect(dsn) as conn:
            failed = conn.execute(
                "SELECT count(*) FROM page_import WHERE batch_id = %s AND status <> '1'",
                (batch_id,),
            ).fetchone()
        assert failed == (0,), f"{failed} children did not complete; see {stack.logs}"
        after = cpu_seconds(groups)
        print(
            "  jobrelay, CPU ms per item: "
            + ", ".join(
                f"{name} {1000 * (after[name] - before[name]) / len(urls):.1f}" for name in groups
            )
            + f" (total {1000 * sum(after[n] - before[n] for n in groups) / len(urls):.0f})"
        )
        return len(urls) / elapsed
    finally:
        for process in started:
            stack.stop(process)


async def run_baseline(
    aws: AwsEndpoint,
    bucket: str,
    urls: list[str],
    hook: str,
    *,
    slots: int,
    groups: dict[str, list[int]],
) -> float:
    """The same calls in a plain loop: items/s from the first send to the last delete."""
    bodies = [f'{{"kind":"page_import","id":"{uuid.uuid4()}","url":"{u}"}}' for u in urls]
    payload = b"x" * 400  # about the size of a signed outcome
    async with (
        sqs_client(aws) as sqs,
        s3_client(aws) as s3,
        httpx.AsyncClient(timeout=30) as http,
    ):
        queue = (await sqs.create_queue(QueueName=f"baseline-{uuid.uuid4().hex[:8]}"))["QueueUrl"]
        done = 0
        finished = asyncio.Event()

        async def send(chunk: list[str]) -> None:
            with timed("sqs send batch"):
                await sqs.send_message_batch(
                    QueueUrl=queue,
                    Entries=[{"Id": str(i), "MessageBody": b} for i, b in enumerate(chunk)],
                )

        async def consume() -> None:
            nonlocal done
            while not finished.is_set():
                with timed("sqs receive"):
                    messages = (
                        await sqs.receive_message(
                            QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1
                        )
                    ).get("Messages", [])

                async def one(message: Any) -> None:
                    nonlocal done
                    key = f"baseline/{message['MessageId']}.json"
                    with timed("s3 get"), suppress(s3.exceptions.NoSuchKey):
                        await s3.get_object(Bucket=bucket, Key=key)
                    url = message["Body"].rsplit('"url":"', 1)[1][:-2]
                    with timed("page get"):
                        page = (await http.get(url)).content
                    with timed("s3 put"):
                        await s3.put_object(Bucket=bucket, Key=key, Body=page[:2000])
                    with timed("webhook post"):
                        await http.post(hook, content=payload)
                    with timed("sqs delete"):
                        await sqs.delete_message(
                            QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"]
                        )
                    done += 1
                    if done >= len(bodies):
                        finished.set()

                await asyncio.gather(*(one(m) for m in messages))

        before = cpu_seconds(groups)
        start = time.perf_counter()
        sends = [send(bodies[i : i + 10]) for i in range(0, len(bodies), 10)]
        consumers = [asyncio.create_task(consume()) for _ in range(max(1, slots // 10))]
        await asyncio.gather(*sends)
        waiter = asyncio.create_task(finished.wait())
        await asyncio.wait([waiter, *consumers], return_when=asyncio.FIRST_COMPLETED)
        for task in consumers:
            if task.done():
                task.result()  # a consumer that failed: raise its error
        elapsed = time.perf_counter() - start
        for task in consumers:
            task.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)
        print(
            "  baseline, mean ms per call: "
            + ", ".join(
                f"{name} {1000 * statistics.fmean(samples):.0f} (x{len(samples)})"
                for name, samples in CALLS.items()
            )
        )
        CALLS.clear()
        after = cpu_seconds(groups)
        print(
            "  baseline, CPU ms per item: "
            + ", ".join(
                f"{name} {1000 * (after[name] - before[name]) / len(bodies):.1f}" for name in groups
            )
        )
        return len(bodies) / elapsed


async def main(args: argparse.Namespace) -> None:
    print(
        f"items {args.items}, sqs-worker concurrency {args.concurrency}, "
        f"poll wait {args.poll_wait} s, relay window {args.window}, "
        f"load average {os.getloadavg()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server = EmbeddedPostgres(root / "pgdata", server_options=FAST)
        dsn = server.start()
        emulator = LocalEmulator()
        url = emulator.start()
        aws = AwsEndpoint(region="us-east-1", endpoint_url=url)
        stack: Stack | None = None
        try:
            migrate.upgrade(dsn)
            suffix = uuid.uuid4().hex[:8]
            bucket = f"e2e-{suffix}"
            await ensure_resources(
                aws,
                queue_name=f"work-{suffix}",
                dlq_name=f"dlq-{suffix}",
                bucket=bucket,
                max_receive_count=5,
            )
            pool = await open_pool(dsn, min_size=1, max_size=2)
            tenancy = Tenancy(pool)
            org = await tenancy.create_organization("bench", actor="bench")
            project = await tenancy.create_project(int(org["id"]), "bench", actor="bench")
            await tenancy.add_member(int(org["id"]), "bench", role="member", actor="bench")
            await pool.close()
            port = free_port()
            env = {
                **os.environ,
                "JOBRELAY_ENV": "development",
                "DATABASE_URL": dsn,
                "JOBRELAY_DATA_DIR": str(root / "data"),
                "JOBRELAY_AWS_ENDPOINT_URL": url,
                "JOBRELAY_SQS_QUEUE_NAME": f"work-{suffix}",
                "JOBRELAY_SQS_DLQ_NAME": f"dlq-{suffix}",
                "JOBRELAY_S3_BUCKET": bucket,
                "JOBRELAY_SQS_WORKER_WEBHOOK_URL": f"http://127.0.0.1:{port}/v1/webhooks/worker",
                "JOBRELAY_SQS_WORKER_CONCURRENCY": str(args.concurrency),
                "JOBRELAY_SQS_WORKER_POLL_WAIT_S": str(args.poll_wait),
                "JOBRELAY_LOG_LEVEL": "warning",
            }
            logs = root / "logs"
            logs.mkdir()
            stack = Stack(env, logs)
            token = await asyncio.to_thread(_token, env)
            api_process = stack.start("api", "api", "--port", str(port))
            api = f"http://127.0.0.1:{port}"
            await asyncio.to_thread(_wait_ready, api, logs)
            relay = stack.start("relay", "relay", JOBRELAY_RELAY_ORG_WINDOW=str(args.window))
            assert emulator.process is not None
            postmaster = int((root / "pgdata" / "postmaster.pid").read_text().split()[0])
            emulator_group = {"emulator": [emulator.process.pid]}
            stack_groups = {
                "api": [api_process.pid],
                "relay": [relay.pid],
                "postgres": [postmaster],
                **emulator_group,
            }
            with serve_demo_pages(args.items) as urls, sink() as hook:
                for workers in args.workers:
                    slots = workers * args.concurrency
                    base = float("nan")
                    if args.baseline:
                        base = await run_baseline(
                            aws,
                            bucket,
                            urls,
                            hook,
                            slots=slots,
                            groups={"bench (loop, pages, sink)": [os.getpid()], **emulator_group},
                        )
                    rate = await run_jobrelay(
                        stack,
                        dsn=dsn,
                        api=api,
                        token=token,
                        project_id=int(project["id"]),
                        urls=urls,
                        workers=workers,
                        groups={**stack_groups, "pages": [os.getpid()]},
                    )
                    print(
                        f"{workers} sqs-worker process(es), {slots} slots: jobrelay "
                        f"{rate:.0f} items/s ({args.items / rate / 60:.1f} min), "
                        f"baseline {base:.0f} items/s, "
                        f"ratio {rate / base:.2f}, load average {os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
        finally:
            if stack is not None:
                stack.stop_all()
            emulator.stop()
            server.stop()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument(
        "--workers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4]
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--poll-wait", type=int, default=10)
    parser.add_argument(
        "--no-baseline",
        dest="baseline",
        action="store_false",
        help="jobrelay only (a long batch: the baseline would double the run)",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=200,
        help="the relay's JOBRELAY_RELAY_ORG_WINDOW; the number of items: no window",
    )
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
