"""The API under a database partition (issue 24): the port between the API and PostgreSQL
is black-holed (packets dropped, no RST) while clients keep sending requests.

Every request gets an answer within 3 s: 2xx, or 503 problem+json with Retry-After; never
another 5xx, never a hang. `/readyz` answers within 1 s whatever the database does. Every
job whose enqueue answered 201 is stored. After the network heals, requests succeed again
within a few seconds (the figure is printed; the target is measured by bench/chaos).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest

from jobrelay.bootstrap.database import bounded_dsn
from jobrelay.settings import load_settings
from tests.harness import ApiHarness, api_harness
from tests.partition import Blackhole, TcpRelay

pytestmark = pytest.mark.long

CUT_S = 8.0
ANSWER_CEILING_S = 3.0
READY_CEILING_S = 1.0
HEAL_CEILING_S = 10.0


@dataclass
class Answer:
    sent: float
    took: float
    status: int | None
    retry_after: str | None
    job_id: str | None


@pytest.fixture
async def cut_api(relayed: tuple[TcpRelay, str], issuer_dir: Path) -> AsyncIterator[ApiHarness]:
    _, dsn = relayed
    # The DSN a `jobrelay api` process gets from `bootstrap.database`: with the timeouts.
    async with api_harness(bounded_dsn(load_settings(), dsn), issuer_dir) as harness:
        yield harness


async def _enqueue(api: ApiHarness, headers: dict[str, str]) -> Answer:
    sent = time.monotonic()
    try:
        response = await api.client.post(
            "/v1/jobs", json={"type": "diag.noop"}, headers=headers, timeout=30
        )
    except httpx.HTTPError:
        return Answer(sent, time.monotonic() - sent, None, None, None)
    job_id = response.json()["id"] if response.status_code == 201 else None
    return Answer(
        sent,
        time.monotonic() - sent,
        response.status_code,
        response.headers.get("Retry-After"),
        job_id,
    )


async def test_requests_answer_503_within_seconds_and_recover(
    cut_api: ApiHarness, relayed: tuple[TcpRelay, str], db_dsn: str
) -> None:
    api = cut_api
    relay, _ = relayed
    headers = api.headers("root", admin=True)
    assert (await _enqueue(api, headers)).status == 201
    answers: list[Answer] = []
    readiness: list[tuple[float, int]] = []
    stop = asyncio.Event()

    async def client() -> None:
        while not stop.is_set():
            answers.append(await _enqueue(api, headers))
            await asyncio.sleep(0.05)

    clients = [asyncio.create_task(client()) for _ in range(4)]
    await asyncio.sleep(0.5)
    hole = Blackhole(relay.port)
    hole.cut()
    cut_at = time.monotonic()
    try:
        while time.monotonic() - cut_at < CUT_S:
            started = time.monotonic()
            status = (await api.client.get("/readyz", timeout=10)).status_code
            readiness.append((time.monotonic() - started, status))
            await asyncio.sleep(0.5)
    finally:
        hole.heal()
    healed_at = time.monotonic()
    first_ok: float | None = None
    while first_ok is None and time.monotonic() - healed_at < HEAL_CEILING_S + 5:
        await asyncio.sleep(0.05)
        first_ok = next(
            (
                a.sent + a.took - healed_at
                for a in answers
                if a.status == 201 and a.sent >= healed_at
            ),
            None,
        )
    stop.set()
    await asyncio.gather(*clients)

    during = [a for a in answers if a.sent + a.took > cut_at and a.sent < healed_at]
    print(
        f"\n{len(answers)} requests, {len(during)} during the {CUT_S:g} s cut: statuses "
        f"{sorted({a.status for a in during}, key=str)}, slowest answer "
        f"{max(a.took for a in during):.2f} s; readiness slowest "
        f"{max(t for t, _ in readiness):.2f} s; first 201 {first_ok} s after the heal"
    )
    assert during, "no request was in flight during the cut"
    assert all(a.status is not None for a in answers), "a request got no HTTP answer"
    assert {a.status for a in answers} <= {201, 503}, sorted({a.status for a in answers}, key=str)
    assert any(a.status == 503 for a in during), "the cut was never noticed"
    assert all(a.retry_after for a in answers if a.status == 503)
    slowest = max(during, key=lambda a: a.took)
    assert slowest.took < ANSWER_CEILING_S, slowest
    assert all(status == 503 for _, status in readiness[1:]), readiness
    assert max(t for t, _ in readiness) < READY_CEILING_S, readiness
    assert first_ok is not None and first_ok < HEAL_CEILING_S, first_ok
    # Nothing lost: every job whose enqueue answered 201 is stored.
    accepted = {a.job_id for a in answers if a.job_id}
    with psycopg.connect(db_dsn) as conn:
        stored = {
            str(row[0])
            for row in conn.execute(
                "SELECT id FROM all_jobs WHERE id = ANY(%s::uuid[])", [list(accepted)]
            )
        }
    assert stored == accepted
