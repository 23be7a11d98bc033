"""The workflow acceptance under crashes: a 2,001-step workflow (a fan-in of 996, a run-time
fan-out of 1,000 with its fan-in, outputs passed along) runs in three real `jobrelay worker`
processes while one of them is SIGKILLed every 2 s, and again while PostgreSQL is stopped
hard and started in the middle. Every step ends once, completed; every release happens
once (the `releases` audit); every run of a fan-in saw all its dependencies completed with
their results; the fan-out's steps exist once."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from jobrelay.db import migrate
from jobrelay.db.pool import open_pool
from jobrelay.jobs.enqueue import Enqueuer
from jobrelay.jobs.workflows.graph import Workflow
from jobrelay.jobs.workflows.store import create_workflow
from tests.apps.steps import job_types as step_types
from tests.harness import own_server
from tests.jobs_support import build_registry, query, start_worker, stop_worker

APP = "tests.apps.steps:job_types"
APP_PATH = os.pathsep.join(
    p for p in (str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH")) if p
)
MIDDLE = 996  # root -> 996 steps -> join
PAGES = 1_000  # split -> 1,000 pages added at run time -> collect
STEPS = 1 + MIDDLE + 1 + 1 + 1 + PAGES + 1  # root, middle, join, split, collect, pages, final
# Each middle step and page runs this long, on 3 workers of 4 slots: the run lasts several
# seconds on any machine (2,000 x 20 ms / 12 slots, and more), so the kills every 2 s fall
# inside it.
STEP_S = 0.02


def _workflow() -> Workflow:
    workflow = Workflow("crash acceptance").step("root", "wf.emit", {"value": 1})
    for i in range(MIDDLE):
        workflow.step(f"m-{i:03}", "wf.emit", {"value": 1, "sleep_s": STEP_S}, after=["root"])
    workflow.step("join", "wf.sum", {}, after=[f"m-{i:03}" for i in range(MIDDLE)])
    workflow.step(
        "split",
        "wf.split",
        {"count": PAGES, "then": ["collect"], "sleep_s": STEP_S},
        after=["root"],
    )
    workflow.step("collect", "wf.sum", {}, after=["split"])
    workflow.step("final", "wf.sum", {}, after=["join", "collect"])
    return workflow


def _create(dsn: str) -> dict[str, uuid.UUID]:
    registry = build_registry(extra=step_types)

    async def run() -> dict[str, uuid.UUID]:
        pool = await open_pool(dsn, min_size=1, max_size=1)
        try:
            async with pool.connection() as conn:
                created = await create_workflow(
                    conn, Enqueuer(registry, payload_limit_bytes=65536), _workflow()
                )
                return {"id": created.id, **created.steps}
        finally:
            await pool.close()

    return asyncio.run(run())


def _worker(dsn: str) -> subprocess.Popen[str]:
    return start_worker(
        dsn,
        "--app",
        APP,
        "--concurrency",
        "4",
        PYTHONPATH=APP_PATH,
        JOBRELAY_JOBS_LEASE_S="2",
        JOBRELAY_JOBS_RECONCILE_INTERVAL_S="1",
    )


def _left(dsn: str) -> list[dict[str, object]]:
    """What is still in `jobs`, for the message of a test that timed out."""
    return query(
        dsn,
        "SELECT s.name, j.status, j.available_at, j.attempt_count, s.dependencies_left, "
        "s.releases FROM jobs j LEFT JOIN workflow_steps s ON s.job_id = j.id "
        "ORDER BY s.name LIMIT 10",
    )


def _claimers(dsn: str, workflow_id: uuid.UUID) -> str:
    """The worker ids (`host:pid:suffix`) that claimed a step of the workflow, joined."""
    rows = query(
        dsn,
        "SELECT DISTINCT claimed_by FROM all_jobs WHERE workflow_id = %s AND claimed_by IS "
        "NOT NULL",
        workflow_id,
    )
    return " ".join(str(r["claimed_by"]) for r in rows)


def _ended_steps(dsn: str, workflow_id: uuid.UUID) -> int:
    try:
        rows = query(
            dsn, "SELECT count(*) AS n FROM finished_jobs WHERE workflow_id = %s", workflow_id
        )
    except psycopg.OperationalError:
        return -1  # the server is restarting
    return int(rows[0]["n"])


Chaos = Callable[[list[subprocess.Popen[str]], uuid.UUID], None]


def _run(dsn: str, chaos: Chaos) -> dict[str, uuid.UUID]:
    """Create the workflow, run it in three workers and call `chaos` until every step
    ended."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE wf_runs (job_id uuid, attempt int, seen jsonb)")
    created = _create(dsn)
    workers = [_worker(dsn) for _ in range(3)]
    ended = False
    try:
        deadline = time.monotonic() + 180
        while _ended_steps(dsn, created["id"]) < STEPS:
            if time.monotonic() > deadline:
                break
            chaos(workers, created["id"])
        else:
            ended = True
    finally:
        outputs = [stop_worker(process, sig=signal.SIGKILL) for process in workers]
    assert ended, f"the workflow did not end: {_left(dsn)}; workers: " + "\n---\n".join(
        output[-3000:] for output in outputs
    )
    return created


def _check(dsn: str, created: dict[str, uuid.UUID]) -> None:
    workflow_id = created["id"]
    steps = query(
        dsn,
        "SELECT s.name, s.releases, j.status, j.result FROM workflow_steps s "
        "JOIN finished_jobs j ON j.id = s.job_id WHERE s.workflow_id = %s",
        workflow_id,
    )
    assert len(steps) == STEPS  # the fan-out's steps exist once: its output written once
    by_name = {s["name"]: s for s in steps}
    assert {s["status"] for s in steps} == {"completed"}
    assert [s["name"] for s in steps if s["releases"] != 1] == ["root"]
    assert by_name["root"]["releases"] == 0
    assert by_name["join"]["result"]["value"] == MIDDLE
    assert by_name["collect"]["result"]["value"] == PAGES
    assert by_name["final"]["result"]["value"] == MIDDLE + PAGES
    assert query(dsn, "SELECT count(*) AS n FROM jobs")[0]["n"] == 0
    fan_ins = {"join": MIDDLE, "collect": PAGES + 1, "final": 2}
    for name, dependencies in fan_ins.items():
        runs = query(dsn, "SELECT seen FROM wf_runs WHERE job_id = %s", created[name])
        assert runs, f"{name} never ran"
        for run in runs:  # every run, reruns after a kill included, saw every end
            assert len(run["seen"]) == dependencies
            assert set(run["seen"].values()) == {"completed"}


@pytest.mark.slow
def test_a_2000_step_workflow_survives_a_worker_sigkilled_every_two_seconds(
    db_dsn: str,
) -> None:
    kills: list[float] = []
    rng = random.Random(42)

    def kill_one(workers: list[subprocess.Popen[str]], workflow_id: uuid.UUID) -> None:
        time.sleep(2.0)  # the chaos' own rhythm (a kill every 2 s), not a wait for an event
        # A random worker among those that have claimed a step: on a busy machine a worker
        # takes seconds to start, and killing only starting ones would stop all progress.
        working = _claimers(db_dsn, workflow_id)
        ready = [i for i, w in enumerate(workers) if f":{w.pid}:" in working]
        if not ready:
            return
        victim = rng.choice(ready)
        workers[victim].send_signal(signal.SIGKILL)
        stop_worker(workers[victim])
        workers[victim] = _worker(db_dsn)
        kills.append(time.monotonic())

    created = _run(db_dsn, kill_one)
    assert len(kills) >= 2, "the workflow ended before the chaos really began"
    _check(db_dsn, created)


@pytest.mark.slow
@pytest.mark.own_server
def test_a_2000_step_workflow_survives_a_postgres_crash_in_the_middle(tmp_path: Path) -> None:
    server = own_server(tmp_path / "pgdata")
    admin = server.start()
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE DATABASE workflow_crash")
        dsn = server.dsn("workflow_crash")
        migrate.upgrade(dsn)
        restarted: list[bool] = []

        def crash_once(_: list[subprocess.Popen[str]], workflow_id: uuid.UUID) -> None:
            if not restarted and _ended_steps(dsn, workflow_id) > STEPS // 3:
                server.stop("immediate")  # a crash: no shutdown checkpoint
                server.start()
                restarted.append(True)
            time.sleep(0.2)  # the polling rhythm of this loop

        created = _run(dsn, crash_once)
        assert restarted, "the workflow ended before the crash"
        _check(dsn, created)
    finally:
        server.stop()
