"""Batch creation: validate every item, then write batch, children and outbox in one go.

Validation is all or nothing and happens before anything is written: the batch type, the item
count, every item's request (against the worker protocol's request models) and the size of
every worker message in UTF-8 bytes against the queue's limit. The first error does not stop
the check; the 422 lists every failing position (up to `MAX_REPORTED_ERRORS`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from jobrelay import tracing
from jobrelay.children.batch import NewChild, copy_batch_children
from jobrelay.children.views import BATCH_CHILD_KINDS, BatchChildKind
from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.errors import FieldError, InvalidInput
from jobrelay.ids import new_id
from jobrelay.protocol import (
    Code2DesMessage,
    Code2DesRequest,
    PageImportMessage,
    PageImportRequest,
)
from jobrelay.settings import BatchSettings, SqsSettings

_SQL = Queries("jobrelay.batches")

BatchType = BatchChildKind  # a batch's type is the kind of its children
BATCH_TYPES: tuple[str, ...] = BATCH_CHILD_KINDS
# The request model of each batch type's items: what is validated here and what the OpenAPI
# document shows for the items of each type.
ITEM_MODELS: dict[str, type[BaseModel]] = {
    "page_import": PageImportRequest,
    "code2des": Code2DesRequest,
}
MAX_REPORTED_ERRORS = 1000
# Bytes the relay adds to every message as attributes; SQS counts them (name, type and
# value) against the same limit, so the body may use the queue's limit minus this allowance:
# `dispatch_attempt` (about 25 bytes) and, when tracing, `traceparent` (72 bytes).
ATTRIBUTE_BYTES = 128


@dataclass(frozen=True, slots=True)
class BatchLimits:
    max_items: int
    message_limit_bytes: int
    # A cancel marks at most this many processing items in its own transaction; a larger
    # batch's cancel answers at once and the relay's sweeper finishes it (migration 0014).
    cancel_inline_max: int = 5_000

    @classmethod
    def from_settings(cls, batches: BatchSettings, sqs: SqsSettings) -> BatchLimits:
        """The limits from the batches' settings group and the queue's message limit."""
        return cls(
            max_items=batches.max_items,
            message_limit_bytes=sqs.message_limit_bytes,
            cancel_inline_max=batches.cancel_inline_max,
        )


@dataclass(frozen=True, slots=True)
class PreparedItem:
    """One validated item with the ids and the worker message it will be stored with, both
    already rendered as the JSON text COPY sends (each rendered once: the message's text is
    also what its size is measured on)."""

    item_id: str
    child_id: str
    request_json: str
    message_json: str


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    batch_id: str
    type: BatchType
    organization_id: int
    project_id: int
    items: list[PreparedItem]


def message_text(message: dict[str, Any]) -> str:
    """The body the relay sends as PostgreSQL's `jsonb::text` renders it: ', ' and ': '
    separators, non-ASCII characters unescaped (keys keep the model's order, which jsonb
    reorders; the length is the same)."""
    return json.dumps(message, ensure_ascii=False, separators=(", ", ": "))


def message_size(message: dict[str, Any]) -> int:
    """UTF-8 bytes of the body the relay sends (see `message_text`)."""
    return len(message_text(message).encode("utf-8"))


def _field_errors(position: int, exc: ValidationError) -> list[FieldError]:
    errors = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in error["loc"])
        path = f"items.{position}.{loc}" if loc else f"items.{position}"
        errors.append(FieldError(path, str(error["msg"])))
    return errors


def prepare_batch(
    *,
    batch_type: str,
    items: Sequence[Any],
    organization_id: int,
    project_id: int,
    limits: BatchLimits,
) -> PreparedBatch:
    """Validate a batch request and build its rows; raise `InvalidInput` listing positions."""
    if batch_type not in BATCH_TYPES:
        raise InvalidInput(
            f"unknown batch type {batch_type!r}",
            [FieldError("type", f"must be one of {', '.join(BATCH_TYPES)}")],
        )
    if not items:
        raise InvalidInput("a batch needs at least one item", [FieldError("items", "is empty")])
    if len(items) > limits.max_items:
        raise InvalidInput(
            f"a batch holds at most {limits.max_items} items, got {len(items)}",
            [FieldError("items", f"has {len(items)} items; the limit is {limits.max_items}")],
        )
    batch_id = new_id()
    request_model = ITEM_MODELS[batch_type]
    prepared: list[PreparedItem] = []
    errors: list[FieldError] = []
    for position, raw in enumerate(items):
        if not isinstance(raw, dict):
            errors.append(FieldError(f"items.{position}", "must be an object"))
            continue
        try:
            request = request_model.model_validate(raw)
        except ValidationError as exc:
            errors.extend(_field_errors(position, exc))
            continue
        child_id = new_id()
        message: BaseModel
        if isinstance(request, PageImportRequest):
            message = PageImportMessage(
                page_import_id=child_id,
                batch_id=batch_id,
                organization_id=organization_id,
                project_id=project_id,
                request=request,
            )
        else:
            assert isinstance(request, Code2DesRequest)
            message = Code2DesMessage(
                code2des_id=child_id,
                batch_id=batch_id,
                organization_id=organization_id,
                project_id=project_id,
                request=request,
            )
        body = message_text(message.model_dump(mode="json"))
        size = len(body.encode("utf-8"))
        allowed = limits.message_limit_bytes - ATTRIBUTE_BYTES
        if size > allowed:
            errors.append(
                FieldError(
                    f"items.{position}",
                    f"the worker message would be {size} bytes (UTF-8); the queue limit of "
                    f"{limits.message_limit_bytes} leaves {allowed} for the body",
                )
            )
            continue
        prepared.append(
            PreparedItem(
                item_id=new_id(),
                child_id=child_id,
                request_json=request.model_dump_json(exclude_none=True),
                message_json=body,
            )
        )
    if errors:
        shown = errors[:MAX_REPORTED_ERRORS]
        more = len(errors) - len(shown)
        detail = f"{len(errors)} invalid item field(s); nothing was stored"
        if more:
            detail += f" (the first {len(shown)} are listed)"
        raise InvalidInput(detail, shown)
    return PreparedBatch(
        batch_id=batch_id,
        type=batch_type,  # type: ignore[arg-type]
        organization_id=organization_id,
        project_id=project_id,
        items=prepared,
    )


async def insert_batch(conn: Connection, batch: PreparedBatch, *, actor: str) -> dict[str, Any]:
    """Write a prepared batch on the caller's connection, inside the caller's transaction.

    Taking the connection lets the caller make the batch part of a larger unit of work: the
    rows (and the relay's wake-up notification) become visible only when that transaction
    commits and vanish if it rolls back, so an outbox row never exists without its child.
    Two COPY statements carry the children (`jobrelay.children`) and the items, whatever the
    batch size.
    """
    cur = await conn.execute(
        _SQL.insert_batch,
        {
            "id": batch.batch_id,
            "organization_id": batch.organization_id,
            "project_id": batch.project_id,
            "type": batch.type,
            "actor": actor,
            "traceparent": tracing.current_traceparent(),
        },
    )
    row = await cur.fetchone()
    assert row is not None
    await copy_batch_children(
        conn,
        batch.type,
        (NewChild(id=item.child_id, request_json=item.request_json) for item in batch.items),
        organization_id=batch.organization_id,
        project_id=batch.project_id,
        batch_id=batch.batch_id,
        actor=actor,
    )
    async with conn.cursor() as cursor, cursor.copy(_SQL.copy_batch_items) as copy:
        for position, item in enumerate(batch.items):
            await copy.write_row(
                (
                    item.item_id,
                    batch.batch_id,
                    position,
                    item.request_json,
                    item.child_id,
                    item.message_json,
                    actor,
                    actor,
                )
            )
    await conn.execute(_SQL.notify_batch_created, {"batch_id": batch.batch_id})
    return dict(row)
