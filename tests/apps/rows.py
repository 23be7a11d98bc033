"""Job types whose results PostgreSQL cannot store (issue 40): `jobrelay worker --app
tests.apps.rows:job_types`. `rows.result` returns the result its payload's `poison` names."""

from __future__ import annotations

from typing import Any, Literal

from jobrelay import Complete, JobContext, JobPayload, JobTypes

Poison = Literal["none", "nul", "nul_key", "surrogate", "over_limit"]

# Over the 4096-byte result limit the tests give the worker.
OVER_LIMIT_CHARS = 5000

# What the worker's error names for each poison (`result cannot be stored: ...`).
REASONS: dict[str, str] = {
    "nul": "NUL character at $.text",
    "nul_key": "NUL character in the key 'a\\x00b' at $",
    "surrogate": "lone surrogate at $.items[1]",
    "over_limit": "bytes of JSON; the limit is 4096 bytes",
}


class Poisoned(JobPayload):
    poison: Poison = "none"
    marker: int = 0


def _result(poison: Poison, marker: int) -> dict[str, Any]:
    if poison == "nul":
        return {"text": "before\x00after"}
    if poison == "nul_key":
        return {"a\x00b": marker}
    if poison == "surrogate":
        return {"items": ["fine", "\ud800"]}
    if poison == "over_limit":
        return {"blob": "x" * OVER_LIMIT_CHARS}
    return {"marker": marker}


job_types = JobTypes()


@job_types.job_type("rows.result")
async def result(ctx: JobContext[Poisoned]) -> Complete:
    return Complete(result=_result(ctx.payload.poison, ctx.payload.marker))
