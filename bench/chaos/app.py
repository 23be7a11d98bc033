"""The job type the chaos scenarios run: `jobrelay worker --app bench.chaos.app:job_types`.

`chaos.work {key, ms, fenced}` is deduplicated per `key` (policy ignore). Its handler
sleeps `ms` milliseconds, then appends one line to a file outside the database (the
client-side record of finished handlers): `<job id> <claim token> <attempt>`. A
handler that finished but whose completion never reached the database (the process died
first) shows up there with a token that did not win.

Plain jobs complete through the worker's batched flush; `fenced` jobs write one row to
`chaos_output (job_id, claim_token)` inside the transaction that re-checks the claim
(`Complete(outputs=...)`), so a stale worker's output can never land. Every job's result
carries the token of the claim that completed it: the invariant checker compares them.

`CHAOS_FINISH_DIR` names the directory of the finish files (one per process).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pydantic import Field

from jobrelay import Complete, JobContext, JobPayload, JobTypes, Outcome, RetryPolicy

job_types = JobTypes()

OUTPUT_TABLE_DDL = (
    "CREATE TABLE IF NOT EXISTS chaos_output ("
    " job_id uuid NOT NULL, claim_token uuid NOT NULL, attempt int NOT NULL,"
    " written_at timestamptz NOT NULL DEFAULT clock_timestamp())"
)

_finish_fd: int | None = None


def _record_finish(line: str) -> None:
    """Append one line with one write(2) on an O_APPEND descriptor: once it returns, the
    line survives a SIGKILL of this process (it is in the kernel's page cache)."""
    global _finish_fd
    if _finish_fd is None:
        directory = os.environ["CHAOS_FINISH_DIR"]
        path = os.path.join(directory, f"finish-{os.getpid()}.log")
        _finish_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(_finish_fd, line.encode())


class Work(JobPayload):
    key: str = Field(min_length=1, max_length=200)
    ms: int = Field(default=0, ge=0, le=60_000)
    fenced: bool = False


@job_types.job_type(
    "chaos.work",
    dedupe_key=lambda p: p.key,
    retry=RetryPolicy(max_attempts=25, base_s=0.05, cap_s=1.0),
    timeout_s=120.0,
)
async def work(ctx: JobContext[Work]) -> Outcome:
    if ctx.payload.ms:
        await asyncio.sleep(ctx.payload.ms / 1000)
    job = ctx.job
    token = str(job.claim_token)
    _record_finish(f"{job.id} {token} {job.attempt_count}\n")
    result = {"token": token, "attempt": job.attempt_count}
    if not ctx.payload.fenced:
        return Complete(result=result)

    async def write_output(conn: Any) -> None:
        await conn.execute(
            "INSERT INTO chaos_output (job_id, claim_token, attempt) VALUES (%s, %s, %s)",
            (job.id, job.claim_token, job.attempt_count),
        )

    return Complete(result=result, outputs=write_output)
