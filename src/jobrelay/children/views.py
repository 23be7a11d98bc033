"""Typed views of the child rows: what every reader of `page_import`, `code2des` and
`code2wf` gets instead of a `dict[str, Any]` (statuses as `ChildStatus`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from jobrelay.domain.batch_status import ChildStatus
from jobrelay.protocol import ChildKind

BatchChildKind = Literal["page_import", "code2des"]
"""The child kinds a batch carries (one per item); Code2WF rows have no batch."""
BATCH_CHILD_KINDS: tuple[BatchChildKind, ...] = ("page_import", "code2des")


def batch_child_kind(name: str) -> BatchChildKind:
    """`name` (a batch's `type`) as a batch child kind; `ValueError` for any other name."""
    for kind in BATCH_CHILD_KINDS:
        if kind == name:
            return kind
    raise ValueError(f"no batch child kind {name!r}")


@dataclass(frozen=True, slots=True)
class BatchChildView:
    """A Page Import or a Code2Des, as the API and the console show it."""

    kind: BatchChildKind
    id: str
    organization_id: int
    project_id: int
    batch_id: str | None
    request: dict[str, Any]
    status: ChildStatus
    result_url: str | None
    error_message: str | None
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str
    manifest_hash: str | None = None
    """Page Import only: SHA-256 of the stored manifest (None for a Code2Des)."""


@dataclass(frozen=True, slots=True)
class Code2WfView:
    """One Code2WF generation (seed 004), as the API, the plugin and the console show it."""

    id: str
    organization_id: int
    project_id: int
    page_import_id: str
    figma_file_key: str
    screen_id: str
    placement_target: str | None
    status: ChildStatus
    attempt: int
    flag_count: int | None
    result_url: str | None
    error_message: str | None
    materialized_at: datetime | None
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str


@dataclass(frozen=True, slots=True)
class PageImportSource:
    """The Page Import a new generation is made from, as its organization sees it (locked
    for the creating transaction)."""

    id: str
    project_id: int
    status: ChildStatus
    result_url: str | None
    deleted: bool


@dataclass(frozen=True, slots=True)
class DispatchSource:
    """What the Code2WF dispatch sends: the generation (deleted or not) and its Page
    Import's result."""

    generation: Code2WfView
    deleted: bool
    page_import_result_url: str | None


@dataclass(frozen=True, slots=True)
class OutcomeResult:
    """What applying a worker outcome did: `changed` (the CAS won), the child's status
    afterwards, and `conflict` when the child already ended differently."""

    kind: ChildKind
    id: str
    status: ChildStatus
    changed: bool
    conflict: bool = False
    detail: str | None = None  # why it conflicts, when "already ended" is not the reason


def batch_child_view(kind: BatchChildKind, row: Mapping[str, Any]) -> BatchChildView:
    return BatchChildView(
        kind=kind,
        id=str(row["id"]),
        organization_id=int(row["organization_id"]),
        project_id=int(row["project_id"]),
        batch_id=None if row["batch_id"] is None else str(row["batch_id"]),
        request=dict(row["request"]),
        status=ChildStatus(str(row["status"])),
        result_url=row["result_url"],
        error_message=row["error_message"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        created_by=str(row["created_by"]),
        updated_by=str(row["updated_by"]),
        manifest_hash=row.get("manifest_hash"),
    )


def code2wf_view(row: Mapping[str, Any]) -> Code2WfView:
    return Code2WfView(
        id=str(row["id"]),
        organization_id=int(row["organization_id"]),
        project_id=int(row["project_id"]),
        page_import_id=str(row["page_import_id"]),
        figma_file_key=str(row["figma_file_key"]),
        screen_id=str(row["screen_id"]),
        placement_target=row["placement_target"],
        status=ChildStatus(str(row["status"])),
        attempt=int(row["attempt"]),
        flag_count=None if row["flag_count"] is None else int(row["flag_count"]),
        result_url=row["result_url"],
        error_message=row["error_message"],
        materialized_at=row["materialized_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        created_by=str(row["created_by"]),
        updated_by=str(row["updated_by"]),
    )


def page_import_source_view(row: Mapping[str, Any]) -> PageImportSource:
    return PageImportSource(
        id=str(row["id"]),
        project_id=int(row["project_id"]),
        status=ChildStatus(str(row["status"])),
        result_url=row["result_url"],
        deleted=row["deleted_at"] is not None,
    )


def dispatch_source_view(row: Mapping[str, Any]) -> DispatchSource:
    return DispatchSource(
        generation=code2wf_view(row),
        deleted=row["deleted_at"] is not None,
        page_import_result_url=row["page_import_result_url"],
    )
