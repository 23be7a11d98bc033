"""Workflows at run time and under an operator: fan-out and fan-in added by a running step,
cancel (held, pending and running steps; racing the last completion), retry (completed
steps keep their one run) and retention, against real PostgreSQL with a real worker."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import uuid

import pytest

from jobrelay.domain.errors import Conflict, NotFound
from jobrelay.jobs import claims
from jobrelay.jobs.workflows import control
from jobrelay.jobs.workflows.graph import Workflow
from tests.jobs_support import eventually, fetch
from tests.workflow_support import Pool, create, ended, steps_of, view_of, worker


async def _audit(pool: Pool) -> None:
    async with pool.connection() as conn:
        await conn.execute("CREATE TABLE wf_runs (job_id uuid, attempt int, seen jsonb)")


async def _runs(pool: Pool, job_id: uuid.UUID) -> int:
    rows = await fetch(pool, "SELECT count(*) AS n FROM wf_runs WHERE job_id = %s", job_id)
    return int(rows[0]["n"])


async def test_a_running_step_fans_out_and_a_later_step_waits_for_all_it_added(
    pool: Pool,
) -> None:
    created = await create(
        pool,
        Workflow("site")
        .step("split", "wf.split", {"count": 5, "value": 3, "then": ["collect"]})
        .step("collect", "wf.sum", {}, after=["split"]),
    )
    async with worker(pool):
        view = await ended(pool, created.id)
    steps = steps_of(view)
    assert view.status == "completed" and view.counts == {"completed": 7}
    assert sorted(steps) == ["collect", "page-0", "page-1", "page-2", "page-3", "page-4", "split"]
    assert steps["collect"].result == {
        "value": 15,
        "seen": {
            name: "completed"
            for name in ["page-0", "page-1", "page-2", "page-3", "page-4", "split"]
        },
    }
    assert steps["collect"].releases == 1
    assert all(steps[f"page-{i}"].after == ("split",) for i in range(5))


async def test_an_empty_fan_out_counts_as_satisfied(pool: Pool) -> None:
    created = await create(
        pool,
        Workflow("empty")
        .step("split", "wf.split", {"count": 0, "then": ["collect"]})
        .step("collect", "wf.sum", {}, after=["split"]),
    )
    async with worker(pool):
        view = await ended(pool, created.id)
    assert view.status == "completed"
    assert steps_of(view)["collect"].result == {"value": 0, "seen": {"split": "completed"}}


@pytest.mark.parametrize(
    ("workflow", "message"),
    [
        (
            Workflow("name taken")
            .step("split", "wf.split", {"count": 1, "prefix": "taken"})
            .step("taken-0", "wf.emit", {}, after=["split"]),
            "steps.0.name: the workflow has a step named 'taken-0'",
        ),
        (
            Workflow("not a dependent")
            .step("split", "wf.split", {"count": 1, "then": ["elsewhere"]})
            .step("elsewhere", "wf.emit", {}),
            "then.0: 'elsewhere' is not a held step waiting on this step",
        ),
        (
            Workflow("too big").step("split", "wf.split", {"count": 30}),
            "31 steps; the limit is 20",
        ),
    ],
    ids=["name taken", "then not a dependent", "over the limit"],
)
async def test_a_refused_fan_out_fails_the_adding_step_and_adds_nothing(
    pool: Pool, workflow: Workflow, message: str
) -> None:
    created = await create(pool, workflow)
    async with worker(pool, workflow_max_steps=20):
        view = await ended(pool, created.id)
    split = steps_of(view)["split"]
    assert split.state == "failed" and split.attempts == 1  # permanent: not retried
    assert split.error is not None and message in split.error, split.error
    assert set(steps_of(view)) == {step.name for step in workflow.steps}  # nothing added


async def test_cancel_ends_held_pending_and_running_steps_and_fences_the_running_one(
    pool: Pool,
) -> None:
    await _audit(pool)
    created = await create(
        pool,
        Workflow("cancel me")
        .step("slow", "wf.sum", {"hold_s": 30})
        .step("waiting", "wf.emit", {}, after=["slow"])
        .step("queued", "wf.emit", {}, after=[]),
    )
    async with worker(pool, concurrency=1, poll_interval_s=0.01, lease_s=2.0):
        await eventually(
            lambda: _running(pool, created.steps["slow"]), what="the slow step to start"
        )
        async with pool.connection() as conn:
            ended_now = await control.cancel_workflow(conn, created.id, actor="ops@example")
        assert ended_now == 3
        view = await view_of(pool, created.id)
        assert view.status == "cancelled" and view.counts == {"cancelled": 3}
        assert view.workflow.cancelled_by == "ops@example"
        # The handler is stopped by the lease keeper; its late completion writes nothing.
        await eventually(lambda: _idle(pool), what="the worker to drop the cancelled step")
    view = await view_of(pool, created.id)
    assert view.counts == {"cancelled": 3}
    attempts = await fetch(
        pool, "SELECT outcome FROM job_attempts WHERE job_id = %s", created.steps["slow"]
    )
    assert [a["outcome"] for a in attempts] == ["cancelled"]
    async with pool.connection() as conn:
        assert await control.cancel_workflow(conn, created.id, actor="again") == 0  # idempotent
    again = await view_of(pool, created.id)
    assert again.workflow.cancelled_by == "ops@example" and again.status == "cancelled"


async def _running(pool: Pool, job_id: uuid.UUID) -> bool:
    rows = await fetch(pool, "SELECT status FROM jobs WHERE id = %s", job_id)
    return bool(rows) and rows[0]["status"] == "in_progress"


async def _idle(pool: Pool) -> bool:
    rows = await fetch(pool, "SELECT count(*) AS n FROM jobs")
    return int(rows[0]["n"]) == 0


async def test_cancel_racing_the_last_completion_ends_in_one_state_everywhere(
    pool: Pool,
) -> None:
    workflows = [
        await create(pool, Workflow(f"race {i}").step("only", "wf.emit", {"value": i}))
        for i in range(30)
    ]
    async with worker(pool, concurrency=8):

        async def cancel(workflow_id: uuid.UUID) -> None:
            async with pool.connection() as conn:
                with contextlib.suppress(Conflict):  # it completed first
                    await control.cancel_workflow(conn, workflow_id, actor="racer")

        await asyncio.gather(*(cancel(w.id) for w in workflows))
        views = [await ended(pool, w.id) for w in workflows]
    outcomes = {(v.status, v.steps[0].state) for v in views}
    assert outcomes <= {("completed", "completed"), ("cancelled", "cancelled")}
    for v in views:
        if v.status == "completed":
            assert v.steps[0].result is not None


async def test_cancel_and_retry_of_what_cannot_be_are_conflicts_and_unknown_is_not_found(
    pool: Pool,
) -> None:
    created = await create(pool, Workflow("done").step("only", "wf.emit", {}))
    async with worker(pool):
        await ended(pool, created.id)
    async with pool.connection() as conn:
        with pytest.raises(Conflict, match="completed"):
            await control.cancel_workflow(conn, created.id, actor="ops")
        with pytest.raises(Conflict, match="completed"):
            await control.retry_workflow(conn, created.id, actor="ops")
        with pytest.raises(NotFound):
            await control.retry_workflow(conn, uuid.uuid4(), actor="ops")
        with pytest.raises(NotFound):
            await control.cancel_workflow(conn, uuid.uuid4(), actor="ops")
    running = await create(pool, Workflow("running").step("only", "wf.emit", {}))
    async with pool.connection() as conn:
        with pytest.raises(Conflict, match="running"):
            await control.retry_workflow(conn, running.id, actor="ops")


async def test_retry_reruns_failed_and_downstream_steps_and_keeps_completed_ones(
    pool: Pool,
) -> None:
    await _audit(pool)
    created = await create(
        pool,
        Workflow("retry me")
        .step("first", "wf.emit", {"value": 2})
        .step("flaky", "wf.flaky", {"value": 5}, after=["first"])
        .step("skipped", "wf.emit", {}, after=["flaky"], on_dependency_failure="skip")
        .step("anyway", "wf.sum", {}, after=["flaky"], on_dependency_failure="run")
        .step("total", "wf.sum", {}, after=["first", "flaky"]),
    )
    async with worker(pool):
        failed = await ended(pool, created.id)
        assert failed.status == "failed"
        assert {s.name: s.state for s in failed.steps} == {
            "first": "completed",
            "flaky": "failed",
            "skipped": "skipped",
            "anyway": "completed",
            "total": "cancelled",
        }
        async with pool.connection() as conn:
            await conn.execute("CREATE TABLE wf_fixed ()")
            revived = await control.retry_workflow(conn, created.id, actor="ops@example")
            assert revived == 4  # flaky and everything downstream of it, `anyway` included
            assert await control.retry_workflow(conn, created.id, actor="twice") == 0
        view = await ended(pool, created.id)
    steps = steps_of(view)
    assert view.status == "completed" and view.counts == {"completed": 5}
    assert view.workflow.retries == 1 and view.workflow.retried_by == "ops@example"
    assert steps["total"].result == {
        "value": 7,
        "seen": {"first": "completed", "flaky": "completed"},
    }
    assert steps["anyway"].result == {"value": 5, "seen": {"flaky": "completed"}}
    assert await _runs(pool, created.steps["first"]) == 1  # its side effect happened once
    assert await _runs(pool, created.steps["flaky"]) == 2
    assert await _runs(pool, created.steps["total"]) == 1  # cancelled before, then run once


async def test_retry_of_a_cancelled_workflow_runs_what_the_cancel_ended(pool: Pool) -> None:
    created = await create(
        pool,
        Workflow("cancelled then retried")
        .step("gate", "wf.emit", {"value": 1})
        .step("after", "wf.sum", {}, after=["gate"]),
    )
    async with pool.connection() as conn:
        await control.cancel_workflow(conn, created.id, actor="ops")
        assert (await view_of(pool, created.id)).status == "cancelled"
        assert await control.retry_workflow(conn, created.id, actor="ops") == 2
    retried = await view_of(pool, created.id)
    assert retried.status == "running" and retried.workflow.cancelled_at is None
    assert steps_of(retried)["after"].state == "held"
    async with worker(pool):
        view = await ended(pool, created.id)
    assert view.status == "completed"
    assert steps_of(view)["after"].result == {"value": 1, "seen": {"gate": "completed"}}


async def test_the_backstop_ends_steps_a_cancel_left_behind(pool: Pool) -> None:
    created = await create(
        pool,
        Workflow("left").step("a", "wf.emit", {}).step("b", "wf.emit", {}, after=["a"]),
    )
    # A canceller that died between marking the workflow and ending its steps.
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE workflows SET cancelled_at = now(), cancelled_by = 'gone' WHERE id = %s",
            (created.id,),
        )
        assert (await view_of(pool, created.id)).status == "cancelling"
        assert await control.end_cancelled_steps(conn, limit=10) == 2
        assert await control.end_cancelled_steps(conn, limit=10) == 0
    assert (await view_of(pool, created.id)).status == "cancelled"


async def test_ended_workflows_are_pruned_after_their_retention_with_their_steps(
    pool: Pool,
) -> None:
    old = await create(
        pool, Workflow("old").step("a", "wf.emit", {}).step("b", "wf.emit", {}, after=["a"])
    )
    recent = await create(pool, Workflow("recent").step("a", "wf.emit", {}))
    late = await create(pool, Workflow("late").step("a", "wf.fail", {}))
    async with worker(pool):
        await ended(pool, old.id)
        await ended(pool, recent.id)
        await ended(pool, late.id)
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=10)
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE workflows SET created_at = %s WHERE id = ANY(%s)",
            (long_ago, [old.id, late.id]),
        )
        await conn.execute(
            "UPDATE finished_jobs SET finished_at = %s WHERE workflow_id = %s", (long_ago, old.id)
        )
        # `late` was created long ago but its step finished just now: kept.
        pruned = await control.prune_workflows(conn, retention_s=86400, limit=100)
    assert pruned == 1
    left = await fetch(pool, "SELECT name FROM workflows ORDER BY name")
    assert [r["name"] for r in left] == ["late", "recent"]
    assert await fetch(pool, "SELECT id FROM finished_jobs WHERE workflow_id = %s", old.id) == []
    assert (
        await fetch(pool, "SELECT job_id FROM workflow_steps WHERE workflow_id = %s", old.id) == []
    )


async def test_a_step_failed_by_a_lease_rescue_releases_its_dependents_at_once(
    pool: Pool,
) -> None:
    """A lease that expired on the last attempt fails the step in the rescue's transaction,
    and that transaction counts the end: the `run` dependent is released then, not by the
    step reconciler's next pass."""
    created = await create(
        pool,
        Workflow("rescued")
        .step("lost", "wf.emit", {}, max_attempts=1)
        .step("after", "wf.emit", {}, after=["lost"], on_dependency_failure="run")
        .step("cancelled", "wf.emit", {}, after=["lost"]),
    )
    async with pool.connection() as conn:
        await conn.execute(  # a worker claimed it and vanished: its lease is over
            "UPDATE jobs SET status = 'in_progress', claim_token = gen_random_uuid(), "
            "claimed_at = now(), claimed_by = 'gone', attempt_count = 1, "
            "lease_expires_at = now() - interval '1 second' WHERE id = %s",
            (created.steps["lost"],),
        )
        rescued = await claims.rescue_expired(conn)
    assert rescued == {created.steps["lost"]: "failed"}
    steps = steps_of(await view_of(pool, created.id))
    assert steps["after"].state == "pending" and steps["after"].releases == 1
    assert steps["cancelled"].state == "cancelled"
