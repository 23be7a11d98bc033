"""How batch costs grow: status, items page, cancel and create of batches of 1k, 10k and 100k
items, through HTTP against a `jobrelay api` process, in the state traffic leaves the tables.

    .venv/bin/python -m bench.scale.batches [--reps 30] [--sizes 1000,10000,100000]

For each size: create the batch through `POST /v1/projects/{id}/batches` (one request; the
100,000-item batch raises JOBRELAY_BATCH_MAX_ITEMS for this process only), then the traffic
of a real run: 90% of the items recorded as sent (the relay's `dispatched_at`, in statements
of 1,000) and 80% of the children ended by a worker outcome, one transaction each, 8 at a
time, through the webhook's own code (`PAGE_IMPORT.apply`: 7 completed for 1 failed). No
VACUUM: autovacuum runs as configured. Then, timed over HTTP with one keep-alive client:
`GET /v1/batches/{id}` (status), `GET /v1/batches/{id}/items?limit=100` in the middle of the
batch, `POST .../cancel` of that batch (what is still processing), the status again after the
cancel, and the cancel of a fresh batch of the same size (every item processing). A cancel
answered 202 (more than JOBRELAY_BATCH_CANCEL_INLINE_MAX processing items: it finishes in the
background) is followed by `settle_cancels`, what the relay's sweeper runs, timed from the
answer until every item is marked. Baseline in
the same run: the full recount (the checker, the statement the status used before the counts
were kept) on the same database.

The table gives medians (ms) and the growth factor per 10x of items.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from bench.batches_common import Env, environment
from bench.scale import RunInfo
from jobrelay.auth.local_issuer import LocalIssuer
from jobrelay.auth.tenancy import Tenancy
from jobrelay.batches.counts import recount_batch
from jobrelay.batches.outbox import settle_cancels
from jobrelay.children.outcomes import PAGE_IMPORT
from jobrelay.db.pool import transaction
from jobrelay.protocol import WorkerOutcome

SUB = "bench"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def _timed(work: Callable[[], Awaitable[object]], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        await work()
        samples.append(time.perf_counter() - start)
    return samples


def _start_api(env: Env, data_dir: Path, max_items: int) -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("jobrelay")), "api", "--port", str(port)],
        env={
            **os.environ,
            "JOBRELAY_ENV": "development",
            "JOBRELAY_AUTH_MODE": "local",
            "DATABASE_URL": env.dsn,
            "JOBRELAY_DATA_DIR": str(data_dir),
            "JOBRELAY_API_HOST": "127.0.0.1",
            "JOBRELAY_AWS_ENDPOINT_URL": env.emulator_url,
            "JOBRELAY_BATCH_MAX_ITEMS": str(max_items),
            "JOBRELAY_API_MAX_BODY_BYTES": str(64 * 1024 * 1024),
            "JOBRELAY_LOG_LEVEL": "WARNING",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("the API process exited")
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return process, base
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise SystemExit("the API did not answer /healthz in 60 s")


async def _traffic(env: Env, batch_id: str, size: int) -> None:
    """Sends recorded for 90% of the items, outcomes for 80% of the children."""
    async with env.pool.connection() as conn:
        for start in range(0, size, 1000):
            await conn.execute(
                "UPDATE batch_item SET dispatch_attempts = 1, dispatched_at = clock_timestamp() "
                "WHERE batch_id = %s AND position >= %s AND position < %s "
                "AND position %% 10 <> 9",
                (batch_id, start, start + 1000),
            )
        rows = await (
            await conn.execute(
                "SELECT job_id, position FROM batch_item WHERE batch_id = %s "
                "AND position %% 10 < 8 ORDER BY position",
                (batch_id,),
            )
        ).fetchall()
    queue: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
    for r in rows:
        queue.put_nowait((str(r["job_id"]), int(str(r["position"]))))

    async def webhook_worker() -> None:
        while not queue.empty():
            child_id, position = queue.get_nowait()
            if position % 8 == 7:
                body = {
                    "kind": "page_import",
                    "id": child_id,
                    "outcome": "failed",
                    "errorMessage": "the page could not be fetched",
                }
            else:
                body = {
                    "kind": "page_import",
                    "id": child_id,
                    "outcome": "completed",
                    "resultUrl": f"results/{child_id}/manifest.json",
                    "manifestHash": "ab" * 32,
                }
            outcome = WorkerOutcome.model_validate(body)
            async with transaction(env.pool) as conn:
                await PAGE_IMPORT.apply(conn, outcome, actor="webhook")

    await asyncio.gather(*(webhook_worker() for _ in range(8)))


async def _recount_ms(env: Env, batch_id: str, reps: int) -> float:
    async def recount() -> object:
        async with transaction(env.pool) as conn:
            return await recount_batch(conn, batch_id, "page_import")

    return _median_ms(await _timed(recount, reps))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--sizes", default="1000,10000,100000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    run = RunInfo()
    results: dict[str, dict[int, float]] = {}

    def record(metric: str, size: int, ms: float) -> None:
        results.setdefault(metric, {})[size] = ms
        print(f"  {metric:<34} {size:>7}: {ms:9.1f} ms", flush=True)

    async with environment() as env:
        tenancy = Tenancy(env.pool)
        await tenancy.add_member(env.organization_id, SUB, role="member", actor="bench")
        with tempfile.TemporaryDirectory() as data:
            issuer = LocalIssuer(Path(data))
            process, base = _start_api(env, Path(data), max(sizes))
            headers = {"Authorization": f"Bearer {issuer.mint(SUB, ttl_s=24 * 3600)}"}
            try:
                async with httpx.AsyncClient(base_url=base, headers=headers, timeout=600) as c:

                    async def create(size: int) -> tuple[str, float]:
                        items = [{"url": f"https://example.com/p/{i}"} for i in range(size)]
                        start = time.perf_counter()
                        r = await c.post(
                            f"/v1/projects/{env.project_id}/batches",
                            json={"type": "page_import", "items": items},
                        )
                        elapsed = time.perf_counter() - start
                        assert r.status_code == 201, r.text[:500]
                        return str(r.json()["id"]), elapsed

                    async def cancel(label: str, batch_id: str, size: int) -> None:
                        """POST the cancel; when it answers 202 (a background cancel), settle
                        it as the relay's sweeper does and time that too."""
                        start = time.perf_counter()
                        r = await c.post(f"/v1/batches/{batch_id}/cancel")
                        answered = time.perf_counter()
                        assert r.status_code in (200, 202), r.text[:300]
                        record(f"{label} (POST, {r.status_code})", size, (answered - start) * 1000)
                        if r.status_code == 202:
                            await settle_cancels(env.pool, actor="bench")
                            settled = time.perf_counter() - answered
                            record(f"{label}: settled by the sweeper", size, settled * 1000)
                            r = await c.get(f"/v1/batches/{batch_id}")
                            assert not r.json()["cancelling"], r.text[:300]

                    for size in sizes:
                        print(f"size {size}", flush=True)
                        create_reps = 5 if size <= 10_000 else 1
                        samples = []
                        batch_id = ""
                        for _ in range(create_reps):
                            batch_id, elapsed = await create(size)
                            samples.append(elapsed)
                        record("create (POST)", size, _median_ms(samples))
                        await _traffic(env, batch_id, size)

                        async def status(batch_id: str = batch_id) -> object:
                            r = await c.get(f"/v1/batches/{batch_id}")
                            assert r.status_code == 200
                            return r

                        async def items_page(batch_id: str = batch_id, size: int = size) -> object:
                            r = await c.get(
                                f"/v1/batches/{batch_id}/items",
                                params={"after": size // 2, "limit": 100},
                            )
                            assert r.status_code == 200
                            return r

                        await status()
                        counts = (await status()).json()["counts"]  # type: ignore[attr-defined]
                        print(f"  counts after traffic: {counts}", flush=True)
                        record("status (GET)", size, _median_ms(await _timed(status, args.reps)))
                        record(
                            "recount (checker, SQL)",
                            size,
                            await _recount_ms(env, batch_id, min(args.reps, 10)),
                        )
                        record(
                            "items page (GET, limit 100)",
                            size,
                            _median_ms(await _timed(items_page, args.reps)),
                        )
                        await cancel("cancel after traffic", batch_id, size)
                        record(
                            "status after cancel (GET)",
                            size,
                            _median_ms(await _timed(status, args.reps)),
                        )
                        fresh_id, _ = await create(size)
                        await cancel("cancel fresh batch", fresh_id, size)
            finally:
                process.terminate()
                process.wait(timeout=30)
    print()
    print(run.footer())
    header = "| metric (median ms) | " + " | ".join(f"{s:,}" for s in sizes)
    growth = [f"x{b // a} growth" for a, b in itertools.pairwise(sizes)]
    print(header + " | " + " | ".join(growth) + " |")
    print("|" + "---|" * (1 + len(sizes) + len(growth)))
    for metric, by_size in results.items():
        values = [by_size.get(s) for s in sizes]
        cells = [f"{v:.1f}" if v is not None else "—" for v in values]
        factors = [f"{b / a:.2f}" if a and b else "—" for a, b in itertools.pairwise(values)]
        print(f"| {metric} | " + " | ".join(cells) + " | " + " | ".join(factors) + " |")


if __name__ == "__main__":
    asyncio.run(main())
