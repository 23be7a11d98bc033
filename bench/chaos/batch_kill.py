"""SIGKILL relays and SQS workers during a batch: the local stack (moto's server, a real
`jobrelay api`, 2 `jobrelay relay`, 2 `jobrelay sqs-worker`, 1 `jobrelay worker`) runs a
Page Import batch of `size` items once without kills (clean) and once while a random relay
or SQS worker is SIGKILLed every 2 s (a replacement starts at once), the next kill waiting
until all 4 are up again (a start-up takes seconds on a busy 2-core machine; killing
whatever was up every 2 s left almost none running: 29 of 300 items in 10 minutes).
Checked after: the
batches the API accepted hold exactly the items it accepted, every item and batch is
terminal, no item was dispatched more than 3 times; measured: items/s clean vs chaos and
how many items needed a second dispatch."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.chaos.invariants import Ledger, check_batches, dispatch_attempts
from bench.chaos.stack import (
    Aws,
    Database,
    InvariantError,
    Processes,
    api_ready,
    base_env,
    mint_token,
    wait_until,
)
from jobrelay.aws.emulator import free_port

KILLED_KINDS = ("relay", "sqs-worker")
STARTED = {"relay": "relay.started", "sqs-worker": "sqs worker started"}


def _project(dsn: str, sub: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            """
            WITH org AS (INSERT INTO organization (name, created_by, updated_by)
                         VALUES ('chaos', 'ops', 'ops') RETURNING id),
                 member AS (INSERT INTO organization_member (organization_id, subject,
                                                              created_by, updated_by)
                            SELECT id, %s, 'ops', 'ops' FROM org)
            INSERT INTO project (organization_id, name, created_by, updated_by)
            SELECT id, 'chaos', 'ops', 'ops' FROM org RETURNING id
            """,
            (sub,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def batch_kill(workdir: Path, *, size: int, every_s: float = 2.0, seed: int = 16) -> dict[str, Any]:
    rng = random.Random(seed)
    db = Database(workdir).start()
    aws = Aws().start()
    port = free_port()
    env = base_env(
        db.dsn,
        workdir,
        lease_s=3.0,
        **aws.env,
        JOBRELAY_SQS_WORKER_WEBHOOK_URL=f"http://127.0.0.1:{port}/v1/webhooks/worker",
        JOBRELAY_SQS_WORKER_POLL_WAIT_S="1",
        JOBRELAY_SQS_WORKER_VISIBILITY_TIMEOUT_S="6",
        JOBRELAY_SQS_WORKER_HEARTBEAT_S="2",
        # Longer than a relay needs to send what it claimed on a busy 2-core machine (with
        # 3 s, items were delivered but failed by the sweeper after 3 expired claims).
        JOBRELAY_RELAY_LEASE_S="15",
        JOBRELAY_RELAY_POLL_INTERVAL_S="0.5",
    )
    procs = Processes(env, workdir / "logs")
    ledger = Ledger()
    kills: list[str] = []
    counter = {"relay": 0, "sqs-worker": 0}

    def start(kind: str) -> None:
        counter[kind] += 1
        name = f"{kind}-{counter[kind]}"
        procs.start(name, kind, JOBRELAY_LOG_LEVEL="INFO")

    def up() -> list[str]:
        """Relays and SQS workers past their start-up (they logged it)."""
        return sorted(
            n
            for n in procs.running
            if n.startswith(KILLED_KINDS) and procs.said(n, STARTED[n.rsplit("-", 1)[0]])
        )

    problems: list[str] = []
    try:
        procs.start("api", "api", "--port", str(port))
        procs.start("worker", "worker", "--concurrency", "4")
        for kind in KILLED_KINDS:
            start(kind)
            start(kind)
        wait_until(lambda: procs.check_alive() and api_ready(port), timeout_s=120, what="API")
        project = _project(db.dsn, "chaos")
        headers = {"Authorization": f"Bearer {mint_token(env, 'chaos', admin=False)}"}
        base = f"http://127.0.0.1:{port}"

        def run_batch(label: str, during: Any = None) -> tuple[str, float]:
            items = [
                {"html": f"<html><head><title>{label}-{i}</title></head><body>{i}</body></html>"}
                for i in range(size)
            ]
            started = time.monotonic()
            response = httpx.post(
                f"{base}/v1/projects/{project}/batches",
                json={"type": "page_import", "items": items},
                headers=headers,
                timeout=120,
            )
            if response.status_code != 201:
                raise InvariantError(f"batch POST: {response.status_code} {response.text}")
            batch_id = str(response.json()["id"])
            ledger.batch_items[batch_id] = size
            deadline = time.monotonic() + 300 + size
            while True:
                view = httpx.get(f"{base}/v1/batches/{batch_id}", headers=headers, timeout=30)
                if view.status_code == 200 and view.json()["status"] != "0":
                    break
                if time.monotonic() > deadline:
                    raise InvariantError(f"batch {label} not terminal: {view.text}")
                if during is not None:
                    during()
                time.sleep(0.2)
            return batch_id, time.monotonic() - started

        clean_id, clean_s = run_batch("clean")
        next_kill = [time.monotonic() + every_s]

        def killer() -> None:
            now = time.monotonic()
            if now < next_kill[0]:
                return
            # The next kill waits for every relay and SQS worker to be up again: a start-up
            # takes seconds on a busy machine, and killing whatever is up left none running.
            running = up()
            if len(running) < 2 * len(KILLED_KINDS):
                return
            name = rng.choice(running)
            procs.kill(name)
            kills.append(name)
            start(name.rsplit("-", 1)[0])
            next_kill[0] = now + every_s

        chaos_id, chaos_s = run_batch("chaos", during=killer)
        for label, batch_id in (("clean", clean_id), ("chaos", chaos_id)):
            view = httpx.get(f"{base}/v1/batches/{batch_id}", headers=headers, timeout=30).json()
            if view["status"] != "1":
                problems.append(f"the {label} batch ended with status {view['status']}: {view}")
        wait_until(lambda: len(up()) == 2 * len(KILLED_KINDS), timeout_s=120, what="all up")
        dead = procs.dead()
        codes = procs.stop_all()
        problems += [f"{name} exited on its own" for name in dead]
        problems += [f"{name} exited {code} on SIGTERM" for name, code in codes.items() if code]
        problems += check_batches(db.dsn, ledger)
        attempts = dispatch_attempts(db.dsn, ledger)
        if not kills:
            problems.append("the batch ended before the first kill: raise --size")
    finally:
        procs.stop_all()
        db.stop()
        aws.stop()
    return {
        "scenario": "batch-kill",
        "size": size,
        "kills": len(kills),
        "killed": {k: sum(n.startswith(k) for n in kills) for k in KILLED_KINDS},
        "items_by_dispatch_attempts": attempts,
        "clean_items_per_s": size / clean_s,
        "chaos_items_per_s": size / chaos_s,
        "chaos_vs_clean": clean_s / chaos_s,
        "problems": problems,
    }
