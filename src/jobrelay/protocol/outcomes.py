"""The terminal outcome of one child job, posted by a worker to `POST /v1/webhooks/worker`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

ChildKind = Literal["page_import", "code2des", "code2wf"]
Outcome = Literal["completed", "failed"]


class WorkerOutcome(BaseModel):
    """`completed` carries `resultUrl` (an S3 key in the results bucket) and, for Page Import,
    `manifestHash` (SHA-256 hex of the stored manifest), for Code2WF `flagCount`; `failed`
    carries a safe `errorMessage` (and optionally a failure artifact in `resultUrl`).
    `attempt` is required for Code2WF, whose row rejects any other attempt (seed 004)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    kind: ChildKind
    id: str = Field(min_length=1, max_length=255)
    outcome: Outcome
    attempt: int | None = Field(default=None, ge=1)
    result_url: str | None = Field(default=None, min_length=1, max_length=500)
    manifest_hash: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    flag_count: int | None = Field(default=None, ge=0)
    error_message: str | None = Field(default=None, min_length=1, max_length=2000)

    @model_validator(mode="after")
    def _fields_match_the_outcome(self) -> WorkerOutcome:
        if self.outcome == "completed":
            if self.result_url is None:
                raise ValueError("a completed outcome needs resultUrl")
            if self.error_message is not None:
                raise ValueError("a completed outcome has no errorMessage")
            if self.kind == "page_import" and self.manifest_hash is None:
                raise ValueError("a completed page_import needs manifestHash")
            if self.kind == "code2wf" and self.flag_count is None:
                raise ValueError("a completed code2wf needs flagCount")
        elif self.error_message is None:
            raise ValueError("a failed outcome needs errorMessage")
        if self.kind == "code2wf" and self.attempt is None:
            raise ValueError("a code2wf outcome needs attempt")
        return self
