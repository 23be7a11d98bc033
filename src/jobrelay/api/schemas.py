"""Shared response-model building blocks: camelCase JSON on the wire, snake_case in Python."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from jobrelay.domain.batch_status import BatchStatus, ChildStatus, ItemState


class ApiModel(BaseModel):
    """Base of every request and response body: camelCase aliases, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", from_attributes=True
    )


# Status codes are strings on the wire (seeds 000 and 004); the schema names their meaning so
# a client need not read the design to tell "2" from "3".
BatchStatusCode = Annotated[
    BatchStatus,
    Field(
        description="Derived batch status: '0' processing (an item is queued or running), "
        "'1' completed (every item completed), '2' failed (no item left to run and at least "
        "one failed), '3' cancelled (the batch was cancelled)"
    ),
]
ChildStatusCode = Annotated[
    ChildStatus,
    Field(
        description="'0' processing, '1' completed (resultUrl set), '2' failed "
        "(errorMessage set), '3' cancelled (its batch was cancelled)"
    ),
]
GenerationStatus = Literal["0", "1", "2"]
GENERATION_STATUS = (
    "Generation status: '0' processing, '1' completed (resultUrl set), '2' failed "
    "(errorMessage set)"
)
GenerationStatusCode = Annotated[GenerationStatus, Field(description=GENERATION_STATUS)]
ItemStateName = Annotated[
    ItemState,
    Field(
        description="Derived item state: queued (not yet sent to the queue), running (sent, "
        "its child is processing), completed, failed (its child failed or dispatch gave up "
        "after three attempts), cancelled"
    ),
]
