"""SQS message bodies: what a worker needs to do one child job, and nothing else.

A message never carries database credentials or anything the worker must write back to
PostgreSQL; the worker answers with a signed webhook (`outcomes.WorkerOutcome`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

MESSAGE_VERSION: Literal[1] = 1

Url = Annotated[str, Field(min_length=1, max_length=2048, pattern=r"^(https?|file)://\S+$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PageImportRequest(_Strict):
    """One page to import: fetched from `url`, or given inline as `html` (exactly one)."""

    url: Url | None = None
    html: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _exactly_one_source(self) -> PageImportRequest:
        if (self.url is None) == (self.html is None):
            raise ValueError("give exactly one of url or html")
        return self


class Code2DesRequest(_Strict):
    """An HTML snippet (with optional CSS) to turn into a design spec."""

    html: str = Field(min_length=1)
    css: str | None = None


class _MessageBase(_Strict):
    version: Literal[1] = MESSAGE_VERSION
    attempt: int = Field(default=1, ge=1)
    organization_id: int
    project_id: int


class PageImportMessage(_MessageBase):
    kind: Literal["page_import"] = "page_import"
    page_import_id: str
    batch_id: str | None = None
    request: PageImportRequest

    @property
    def child_id(self) -> str:
        return self.page_import_id


class Code2DesMessage(_MessageBase):
    kind: Literal["code2des"] = "code2des"
    code2des_id: str
    batch_id: str | None = None
    request: Code2DesRequest

    @property
    def child_id(self) -> str:
        return self.code2des_id


class Code2WfMessage(_MessageBase):
    kind: Literal["code2wf"] = "code2wf"
    code2wf_id: str
    page_import_id: str
    figma_file_key: str
    screen_id: str
    placement_target: str | None = None
    page_import_result_url: str = Field(
        description="S3 key of the Page Import manifest in the results bucket"
    )

    @property
    def child_id(self) -> str:
        return self.code2wf_id


WorkerMessage = Annotated[
    PageImportMessage | Code2DesMessage | Code2WfMessage, Field(discriminator="kind")
]
_MESSAGE_ADAPTER: TypeAdapter[PageImportMessage | Code2DesMessage | Code2WfMessage] = TypeAdapter(
    WorkerMessage
)


def parse_message(body: str | bytes) -> PageImportMessage | Code2DesMessage | Code2WfMessage:
    """Validate an SQS body; raises `pydantic.ValidationError` naming the bad fields."""
    return _MESSAGE_ADAPTER.validate_json(body)
