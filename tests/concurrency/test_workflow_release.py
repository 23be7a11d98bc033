"""Workflow release under real concurrency: many dependencies of one step end at once in
separate `jobrelay worker` processes, and a worker is SIGKILLed mid-workflow. The
dependent is released exactly once and runs once, checked from audits (the step's
`releases` counter and one `wf_runs` row per run), not from the end state alone."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path

import psycopg

from jobrelay.db.pool import open_pool
from jobrelay.jobs.enqueue import Enqueuer
from jobrelay.jobs.workflows.graph import Workflow
from jobrelay.jobs.workflows.store import (
    CreatedWorkflow,
    WorkflowView,
    create_workflow,
    get_workflow,
)
from tests.apps.steps import job_types as step_types
from tests.harness import wait_until
from tests.jobs_support import (
    build_registry,
    listening_workers,
    query,
    start_worker,
    stop_worker,
    worker_processes,
)

APP = "tests.apps.steps:job_types"
APP_PATH = os.pathsep.join(
    p for p in (str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH")) if p
)
FAN_IN = 50


def _create(dsn: str, workflow: Workflow) -> CreatedWorkflow:
    registry = build_registry(extra=step_types)

    async def run() -> CreatedWorkflow:
        pool = await open_pool(dsn, min_size=1, max_size=2)
        try:
            async with pool.connection() as conn:
                return await create_workflow(
                    conn, Enqueuer(registry, payload_limit_bytes=65536), workflow
                )
        finally:
            await pool.close()

    return asyncio.run(run())


def _view(dsn: str, workflow_id: uuid.UUID) -> WorkflowView:
    async def run() -> WorkflowView | None:
        pool = await open_pool(dsn, min_size=1, max_size=1)
        try:
            async with pool.connection() as conn:
                return await get_workflow(conn, workflow_id)
        finally:
            await pool.close()

    view = asyncio.run(run())
    assert view is not None
    return view


def _audit_table(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE wf_runs (job_id uuid, attempt int, seen jsonb)")


def test_fifty_dependencies_ending_at_once_in_four_processes_release_their_step_once(
    db_dsn: str,
) -> None:
    _audit_table(db_dsn)
    workflow = Workflow("fan-in")
    for i in range(FAN_IN):
        workflow.step(f"part{i:02}", "wf.emit", {"value": i})
    workflow.step("total", "wf.sum", {}, after=[f"part{i:02}" for i in range(FAN_IN)])
    # The workers start before the workflow exists, so its parts end in all four at once.
    with worker_processes(db_dsn, 4, "--app", APP, PYTHONPATH=APP_PATH):
        created = _create(db_dsn, workflow)
        wait_until(
            lambda: _view(db_dsn, created.id).status == "completed",
            timeout_s=60,
            what="the fan-in workflow to complete",
        )
    total = created.steps["total"]
    steps = query(
        db_dsn, "SELECT releases, dependencies_left FROM workflow_steps WHERE job_id = %s", total
    )
    assert steps == [{"releases": 1, "dependencies_left": 0}]
    runs = query(db_dsn, "SELECT seen FROM wf_runs WHERE job_id = %s", total)
    assert len(runs) == 1 and len(runs[0]["seen"]) == FAN_IN
    result = query(db_dsn, "SELECT result FROM finished_jobs WHERE id = %s", total)
    assert result[0]["result"]["value"] == sum(range(FAN_IN))
    workers = query(
        db_dsn,
        "SELECT count(DISTINCT claimed_by) AS n FROM finished_jobs WHERE workflow_id = %s",
        created.id,
    )
    assert workers[0]["n"] >= 2  # the parts really ended in more than one process


def test_a_chain_survives_a_worker_killed_mid_step(db_dsn: str) -> None:
    """SIGKILL a worker while a step of a chain runs: the lease expires, the step runs again
    elsewhere, and every later step is released once and sees its dependency's result."""
    _audit_table(db_dsn)
    workflow = Workflow("chain").step("first", "wf.emit", {"value": 1})
    previous = "first"
    for i in range(1, 8):
        workflow.step(f"s{i}", "wf.sum", {"hold_s": 60.0 if i == 3 else 0.0}, after=[previous])
        previous = f"s{i}"
    victim = start_worker(db_dsn, "--app", APP, PYTHONPATH=APP_PATH, JOBRELAY_JOBS_LEASE_S="2")
    try:
        wait_until(lambda: listening_workers(db_dsn) >= 1, timeout_s=60, what="a worker")
        created = _create(db_dsn, workflow)
        held_up = created.steps["s3"]
        wait_until(
            lambda: query(db_dsn, "SELECT 1 FROM wf_runs WHERE job_id = %s", held_up),
            timeout_s=60,
            what="step s3 to run (and hold up its first attempt)",
        )
        victim.send_signal(signal.SIGKILL)
    finally:
        stop_worker(victim)
    with worker_processes(db_dsn, 2, "--app", APP, PYTHONPATH=APP_PATH):
        wait_until(
            lambda: _view(db_dsn, created.id).status == "completed",
            timeout_s=90,
            what="the chain to complete after the kill",
        )
    view = _view(db_dsn, created.id)
    assert view.counts == {"completed": 8}
    assert all(step.releases == (0 if step.name == "first" else 1) for step in view.steps)
    runs = query(db_dsn, "SELECT attempt FROM wf_runs WHERE job_id = %s ORDER BY attempt", held_up)
    assert [r["attempt"] for r in runs] == [1, 2]  # killed once, run again elsewhere
    assert {step.name: step.result for step in view.steps}["s7"] == {
        "value": 1,
        "seen": {"s6": "completed"},
    }
