"""`jobrelay jobs ...` and `jobrelay worker` as a user runs them."""

from __future__ import annotations

import json
import subprocess

import pytest

from jobrelay.api.routes.jobs import DiagnosisOut, JobOut
from tests.harness import cli_env, jobrelay_command, wait_until
from tests.jobs_support import query


def _jobs(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*jobrelay_command(), "jobs", *args],
        env=cli_env(DATABASE_URL=dsn),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_enqueue_run_show_list_and_bad_input(db_dsn: str) -> None:
    created = _jobs(db_dsn, "enqueue", "diag.noop", "--payload", '{"n": 1}')
    assert created.returncode == 0, created.stderr
    job_id = json.loads(created.stdout)["id"]
    worker = subprocess.Popen(
        [*jobrelay_command(), "worker", "--concurrency", "2"],
        env=cli_env(DATABASE_URL=db_dsn, JOBRELAY_WORKER_POLL_INTERVAL_S="0.02"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(
            lambda: json.loads(_jobs(db_dsn, "show", job_id).stdout)["status"] == "completed",
            timeout_s=60,
            what="the worker to complete the job",
        )
    finally:
        worker.terminate()
        output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, output
    listed = json.loads(_jobs(db_dsn, "list", "--type", "diag.noop").stdout)
    assert [j["id"] for j in listed["items"]] == [job_id]
    assert listed["nextCursor"] is None
    # The CLI prints a job exactly as the API sends it (the same response model).
    assert set(listed["items"][0]) == {f.alias for f in JobOut.model_fields.values()}
    assert listed["items"][0]["attemptCount"] == 1
    bad = _jobs(db_dsn, "enqueue", "no.such.type")
    assert bad.returncode == 2 and "unknown job type" in bad.stderr


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--priority", "40000"], "--priority"),
        (["--max-attempts", "0"], "--max-attempts"),
        (["--delay", "-1"], "--delay"),
        (["--delay", "5", "--run-at", "2030-06-01T03:00:00Z"], "--delay"),
    ],
)
def test_enqueue_refuses_what_the_engine_refuses_naming_the_option(
    db_dsn: str, args: list[str], option: str
) -> None:
    bad = _jobs(db_dsn, "enqueue", "diag.noop", *args)
    assert bad.returncode == 2 and f"{option}:" in bad.stderr, bad.stderr
    assert query(db_dsn, "SELECT id FROM all_jobs") == []


def test_why_prints_the_diagnosis_as_the_api_sends_it(db_dsn: str) -> None:
    created = _jobs(db_dsn, "enqueue", "diag.noop", "--delay", "3600")
    assert created.returncode == 0, created.stderr
    job_id = json.loads(created.stdout)["id"]
    why = _jobs(db_dsn, "why", job_id)
    assert why.returncode == 0, why.stderr
    body = json.loads(why.stdout)
    assert set(body) == {f.alias for f in DiagnosisOut.model_fields.values()}
    # No worker has ever announced itself; the delay is the next blocker.
    assert (body["reason"], body["also"]) == ("no_worker", ["delayed"])
    assert body["jobId"] == job_id and 3000 < body["waitSeconds"] <= 3600
    bad = _jobs(db_dsn, "why", "not-a-uuid")
    assert bad.returncode == 2 and "invalid job id" in bad.stderr
    missing = _jobs(db_dsn, "why", "00000000-0000-0000-0000-000000000000")
    assert missing.returncode == 2 and "not found" in missing.stderr


@pytest.mark.slow
@pytest.mark.long  # a dozen one-shot CLI processes (~30 s): kept out of `make test`'s budget
def test_attempts_and_list_filters(db_dsn: str) -> None:
    failing = _jobs(db_dsn, "enqueue", "diag.fail", "--payload", '{"kind": "permanent"}')
    assert failing.returncode == 0, failing.stderr
    job_id = json.loads(failing.stdout)["id"]
    keyed = _jobs(
        db_dsn,
        "enqueue",
        "diag.sleep",
        "--payload",
        '{"seconds": 1, "sourceKey": "src:cli", "concurrencyClass": "slow"}',
        "--delay",
        "3600",
    )
    assert keyed.returncode == 0, keyed.stderr
    keyed_id = json.loads(keyed.stdout)["id"]
    worker = subprocess.Popen(
        [*jobrelay_command(), "worker", "--concurrency", "2"],
        env=cli_env(DATABASE_URL=db_dsn, JOBRELAY_WORKER_POLL_INTERVAL_S="0.02"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(
            lambda: json.loads(_jobs(db_dsn, "show", job_id).stdout)["status"] == "failed",
            timeout_s=60,
            what="the worker to fail the job",
        )
    finally:
        worker.terminate()
        output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, output

    attempts = _jobs(db_dsn, "attempts", job_id)
    assert attempts.returncode == 0, attempts.stderr
    [attempt] = json.loads(attempts.stdout)["items"]
    assert (attempt["attempt"], attempt["outcome"]) == (1, "permanent")
    assert attempt["error"] == "diag.fail attempt 1 (permanent)"
    for args in (("--source-key", "src:cli"), ("--class", "slow")):
        listed = json.loads(_jobs(db_dsn, "list", *args).stdout)
        assert [j["id"] for j in listed["items"]] == [keyed_id], args
    bad = _jobs(db_dsn, "list", "--status", "bogus")
    assert bad.returncode == 2 and "unknown status" in bad.stderr
    recent = json.loads(_jobs(db_dsn, "list", "--created-from", "2000-01-01").stdout)["items"]
    assert keyed_id in [j["id"] for j in recent]
    future = _jobs(db_dsn, "list", "--finished-from", "2999-01-01T00:00:00+00:00").stdout
    assert json.loads(future)["items"] == []
    malformed = _jobs(db_dsn, "list", "--created-to", "yesterday")
    assert malformed.returncode == 2 and "--created-to" in malformed.stderr
    missing = _jobs(db_dsn, "attempts", "00000000-0000-0000-0000-000000000000")
    assert missing.returncode == 2 and "not found" in missing.stderr
