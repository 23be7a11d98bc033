"""Workflows against real PostgreSQL with a real worker: steps released by the transaction
that ends their last dependency, outputs passed along, failure policies, the repair of
held steps, and bad input that stores nothing."""

from __future__ import annotations

import pytest

from jobrelay.domain.errors import InvalidInput
from jobrelay.jobs.maintenance import StepReconciler
from jobrelay.jobs.workflows.graph import Workflow
from jobrelay.jobs.workflows.store import (
    create_workflow,
)
from tests.jobs_support import fetch
from tests.workflow_support import ENQUEUER, Pool, create, ended, steps_of, view_of, worker


async def test_a_diamond_passes_outputs_and_releases_each_step_once(pool: Pool) -> None:
    workflow = (
        Workflow("diamond")
        .step("a", "wf.emit", {"value": 1})
        .step("b", "wf.emit", {"value": 2}, after=["a"])
        .step("c", "wf.emit", {"value": 3}, after=["a"])
        .step("d", "wf.sum", {}, after=["b", "c"])
    )
    created = await create(pool, workflow)
    held = steps_of(await view_of(pool, created.id))
    assert {name: held[name].state for name in "abcd"} == {
        "a": "pending",
        "b": "held",
        "c": "held",
        "d": "held",
    }
    async with worker(pool):
        view = await ended(pool, created.id)
    steps = steps_of(view)
    assert view.status == "completed" and view.counts == {"completed": 4}
    assert steps["d"].result == {"value": 5, "seen": {"b": "completed", "c": "completed"}}
    assert steps["d"].after == ("b", "c")
    assert [steps[n].releases for n in "abcd"] == [0, 1, 1, 1]
    assert view.finished_at is not None and view.finished_at >= view.workflow.created_at


async def test_a_failed_step_cancels_skips_or_runs_its_dependents_by_their_policy(
    pool: Pool,
) -> None:
    workflow = (
        Workflow("policies")
        .step("broken", "wf.fail", {"message": "no input"}, max_attempts=1)
        .step("cancelled", "wf.emit", {}, after=["broken"])
        .step("skipped", "wf.emit", {}, after=["broken"], on_dependency_failure="skip")
        .step("runs", "wf.sum", {}, after=["broken"], on_dependency_failure="run")
        .step("after_cancel", "wf.emit", {}, after=["cancelled"])
        .step("after_skip", "wf.emit", {"value": 7}, after=["skipped"])
    )
    created = await create(pool, workflow)
    async with worker(pool):
        view = await ended(pool, created.id)
    steps = steps_of(view)
    states = {name: step.state for name, step in steps.items()}
    assert states == {
        "broken": "failed",
        "cancelled": "cancelled",
        "skipped": "skipped",
        "runs": "completed",
        "after_cancel": "cancelled",  # a cancelled dependency cancels, down the graph
        "after_skip": "completed",  # a skipped dependency counts as ended well
    }
    assert steps["runs"].result == {"value": 0, "seen": {"broken": "failed"}}
    assert steps["after_skip"].result == {"value": 7}
    assert steps["cancelled"].error == "cancelled: a dependency did not complete"
    assert view.status == "failed"
    runs = await fetch(
        pool,
        "SELECT name FROM workflow_steps s JOIN finished_jobs j ON j.id = s.job_id "
        "WHERE s.workflow_id = %s AND j.attempt_count > 0 ORDER BY name",
        created.id,
    )
    assert [r["name"] for r in runs] == ["after_skip", "broken", "runs"]  # nothing else ran


async def test_a_held_step_costs_no_claim_and_plain_jobs_run_beside_it(pool: Pool) -> None:
    created = await create(
        pool,
        Workflow("held")
        .step("gate", "wf.fail", {}, max_attempts=1)
        .step("later", "wf.emit", {}, after=["gate"], on_dependency_failure="run"),
    )
    rows = await fetch(
        pool,
        "SELECT available_at FROM jobs WHERE id = %s",
        created.steps["later"],
    )
    assert rows[0]["available_at"].year == 9999  # outside every claim's range
    async with worker(pool):
        view = await ended(pool, created.id)
    assert steps_of(view)["later"].state == "completed"


async def test_the_reconciler_releases_a_step_whose_dependency_ended_without_counting(
    pool: Pool,
) -> None:
    """A dependency ended by a path that does not count endings (here: by hand, as an old
    release or a lease rescue would): the maintenance loop releases the step."""
    created = await create(
        pool,
        Workflow("repair")
        .step("first", "wf.emit", {})
        .step("second", "wf.emit", {}, after=["first"]),
    )
    async with pool.connection() as conn:
        await conn.execute(
            "WITH gone AS (DELETE FROM jobs WHERE id = %s RETURNING jobs AS job) "
            "INSERT INTO finished_jobs SELECT f.* FROM gone CROSS JOIN LATERAL "
            'jobrelay_finished_job_v1(gone.job, \'{"status": "completed"}\') AS f',
            (created.steps["first"],),
        )
    reconciler = StepReconciler(pool=pool, interval_s=60)
    assert await reconciler.run_once() == 1
    assert await reconciler.run_once() == 0  # released once
    async with worker(pool):
        view = await ended(pool, created.id)
    assert view.status == "completed" and steps_of(view)["second"].releases == 1


async def test_the_repair_examines_a_bounded_slice_a_pass_and_reaches_every_step(
    pool: Pool,
) -> None:
    """Many held steps: each pass examines `limit` of them from where the last one stopped,
    so a stuck step past the first slice is found within the passes that cover them all."""
    waiting = Workflow("many held").step("gate", "wf.fail", {}, max_attempts=1)
    for i in range(40):
        waiting.step(f"held-{i:02}", "wf.emit", {}, after=["gate"])
    await create(pool, waiting)
    stuck = await create(
        pool,
        Workflow("stuck")
        .step("first", "wf.emit", {})
        .step("second", "wf.emit", {}, after=["first"]),
    )
    async with pool.connection() as conn:
        await conn.execute(
            "WITH gone AS (DELETE FROM jobs WHERE id = %s RETURNING jobs AS job) "
            "INSERT INTO finished_jobs SELECT f.* FROM gone CROSS JOIN LATERAL "
            'jobrelay_finished_job_v1(gone.job, \'{"status": "completed"}\') AS f',
            (stuck.steps["first"],),
        )
    reconciler = StepReconciler(pool=pool, interval_s=60, limit=10)
    found = [await reconciler.run_once() for _ in range(5)]  # 44 steps: 5 slices of 10
    assert sum(found) == 1 and max(found) == 1


async def test_every_step_takes_turns_as_the_workflows_fairness_key(pool: Pool) -> None:
    created = await create(
        pool,
        Workflow("tenant", fairness_key="org-42")
        .step("a", "wf.emit", {})
        .step("b", "wf.emit", {}, after=["a"]),
    )
    rows = await fetch(
        pool, "SELECT fairness_key FROM jobs WHERE workflow_id = %s ORDER BY id", created.id
    )
    assert [r["fairness_key"] for r in rows] == ["org-42", "org-42"]


async def test_finished_steps_are_kept_whatever_the_retention_of_their_type(pool: Pool) -> None:
    created = await create(pool, Workflow("kept").step("only", "wf.emit", {"value": 4}))
    async with worker(pool):
        await ended(pool, created.id)
    rows = await fetch(
        pool, "SELECT purge_on, result FROM finished_jobs WHERE id = %s", created.steps["only"]
    )
    assert rows == [{"purge_on": None, "result": {"value": 4}}]


@pytest.mark.parametrize(
    ("workflow", "paths"),
    [
        (
            Workflow("dup").step("a", "wf.emit", {}).step("a", "wf.emit", {}),
            ["steps.1.name"],
        ),
        (Workflow("unknown").step("a", "wf.emit", {}, after=["nope"]), ["steps.0.after.0"]),
        (
            Workflow("cycle")
            .step("a", "wf.emit", {}, after=["c"])
            .step("b", "wf.emit", {}, after=["a"])
            .step("c", "wf.emit", {}, after=["b"]),
            ["steps.0.after"],
        ),
        (Workflow("self").step("a", "wf.emit", {}, after=["a"]), ["steps.0.after.0"]),
        (
            Workflow("types").step("a", "no.such.type", {}).step("b", "wf.emit", {"value": "x"}),
            ["steps.0.type", "steps.1.payload.value"],
        ),
        (Workflow("empty"), ["steps"]),
    ],
)
async def test_bad_input_names_its_fields_and_stores_nothing(
    pool: Pool, workflow: Workflow, paths: list[str]
) -> None:
    with pytest.raises(InvalidInput) as refused:
        await create(pool, workflow)
    assert [e.path for e in refused.value.errors] == paths
    assert await fetch(pool, "SELECT id FROM workflows") == []
    assert await fetch(pool, "SELECT id FROM all_jobs") == []


async def test_a_workflow_over_the_step_limit_is_refused(pool: Pool) -> None:
    workflow = Workflow("big")
    for i in range(4):
        workflow.step(f"s{i}", "wf.emit", {})
    async with pool.connection() as conn:
        with pytest.raises(InvalidInput) as refused:
            await create_workflow(conn, ENQUEUER, workflow, max_steps=3)
    assert refused.value.errors[0].path == "steps"
    assert "the limit is 3" in refused.value.errors[0].message


async def test_a_workflow_created_in_a_rolled_back_transaction_leaves_nothing(pool: Pool) -> None:
    async with pool.connection() as conn:
        with pytest.raises(RuntimeError, match="roll back"):
            async with conn.transaction():
                await create_workflow(conn, ENQUEUER, Workflow("gone").step("a", "wf.emit", {}))
                raise RuntimeError("roll back")
    assert await fetch(pool, "SELECT id FROM workflows") == []
    assert await fetch(pool, "SELECT id FROM all_jobs") == []
