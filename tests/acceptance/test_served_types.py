"""A worker claims only the job types it has handlers for (issue 24, rolling deploys).

The newcomer's scenario: a worker of the built-in types runs (as `jobrelay up`'s does), and
a second worker with the user's app (`--app`) starts beside it; the app's jobs are
enqueued. Before, the first worker claimed most of them and failed them for good
("unknown job type"); now it leaves them to the worker that has their handler. While no
live worker has the handler, the job stays pending and "why isn't this job running?" says
so by name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.harness import run_cli, wait_until
from tests.jobs_support import listening_workers, query, start_worker, stop_worker

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_SRC = REPO / "examples" / "greetings" / "src"
APP = "greetings.jobs:job_types"
JOBS = 6


def _env(db_dsn: str) -> dict[str, str]:
    parts = (str(EXAMPLE_SRC), str(REPO), os.environ.get("PYTHONPATH"))
    return {"DATABASE_URL": db_dsn, "PYTHONPATH": os.pathsep.join(p for p in parts if p)}


def test_a_worker_without_the_handler_leaves_the_job_to_one_with_it(db_dsn: str) -> None:
    env = _env(db_dsn)
    builtin = start_worker(db_dsn)  # the built-in types only, like `up`'s worker
    try:
        wait_until(lambda: listening_workers(db_dsn) >= 1, timeout_s=60, what="worker up")
        ids = []
        for n in range(JOBS):
            enqueued = run_cli(
                "jobs",
                "enqueue",
                "greetings.greet",
                "-p",
                f'{{"name": "n{n}"}}',
                "--app",
                APP,
                **env,
            )
            assert enqueued.returncode == 0, enqueued.stderr
            ids.append(json.loads(enqueued.stdout)["id"])

        # Claimable, but not by this worker: it stays pending, and the diagnosis names why.
        def named() -> str | None:
            why = run_cli("jobs", "why", ids[0], **env, JOBRELAY_APP=APP)
            return why.stdout if "no live worker serves type" in why.stdout else None

        said = wait_until(named, timeout_s=30, what="the diagnosis to name the type")
        assert "'greetings.greet'" in said, said
        statuses = query(
            db_dsn,
            "SELECT status, count(*) AS n FROM all_jobs WHERE id = ANY(%s::uuid[]) GROUP BY status",
            ids,
        )
        assert [(r["status"], r["n"]) for r in statuses] == [("pending", JOBS)], statuses

        with_app = start_worker(db_dsn, "--app", APP, PYTHONPATH=env["PYTHONPATH"])
        try:
            wait_until(
                lambda: (
                    query(
                        db_dsn,
                        "SELECT count(*) AS n FROM all_jobs WHERE id = ANY(%s::uuid[]) "
                        "AND status IN ('completed', 'failed')",
                        ids,
                    )[0]["n"]
                    == JOBS
                ),
                timeout_s=60,
                what="the app's jobs to end",
            )
        finally:
            app_output = stop_worker(with_app)
    finally:
        builtin_output = stop_worker(builtin)
    assert builtin.returncode == 0, builtin_output
    assert with_app.returncode == 0, app_output
    rows = query(
        db_dsn,
        "SELECT status, count(*) AS n FROM all_jobs WHERE id = ANY(%s::uuid[]) GROUP BY status",
        ids,
    )
    assert [(r["status"], r["n"]) for r in rows] == [("completed", JOBS)], rows
