"""Derived batch status (docs/explanation/batches.md, derived status): pure functions, no
stored counters.

An item's state follows from its dispatch metadata (`batch_item`) and its child row
(`page_import` / `code2des`). The batch status follows from the item states and whether the
batch was cancelled. The SQL aggregate `batches/queries/batch_counts_*.sql` computes the same
thing in the database; a property test holds the two together.

Item state, first match wins:

| child status | item                         | state       |
|--------------|------------------------------|-------------|
| '1'          | any                          | completed   |
| '2'          | any                          | failed      |
| '3'          | any                          | cancelled   |
| '0'          | cancelled_at set             | cancelled   |
| '0'          | error_message set            | failed      |
| '0'          | dispatched_at set            | running     |
| '0'          | otherwise                    | queued      |

The child's terminal status wins over dispatch metadata: it is what a worker actually
reported (an item whose first send was accepted but not recorded may later exhaust its
attempts while the worker completes the child from the first message).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

MAX_DISPATCH_ATTEMPTS = 3
"""Seed 000: queue delivery is attempted up to three times with the same child id and body."""


class ChildStatus(StrEnum):
    """`wf2des_status` of a child row (seed 000)."""

    PROCESSING = "0"
    COMPLETED = "1"
    FAILED = "2"
    CANCELLED = "3"


CHILD_STATUS_NAMES: Mapping[str, str] = MappingProxyType(
    {status.value: status.name.lower() for status in ChildStatus}
)
"""A child status code's word, as the console and the CLI show it (`'0'` is `processing`)."""


class ItemState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class BatchStatus(StrEnum):
    """The API's batch status code."""

    PROCESSING = "0"
    COMPLETED = "1"
    FAILED = "2"
    CANCELLED = "3"


BATCH_STATUS_NAMES: Mapping[str, str] = MappingProxyType(
    {status.value: status.name.lower() for status in BatchStatus}
)
"""A batch status code's word, as the console and the CLI show it."""

TERMINAL_ITEM_STATES = frozenset({ItemState.COMPLETED, ItemState.FAILED, ItemState.CANCELLED})


def item_state(
    *,
    child_status: ChildStatus,
    dispatched: bool,
    dispatch_failed: bool,
    cancelled: bool,
) -> ItemState:
    """The derived state of one batch item (see the module table)."""
    if child_status is ChildStatus.COMPLETED:
        return ItemState.COMPLETED
    if child_status is ChildStatus.FAILED:
        return ItemState.FAILED
    if child_status is ChildStatus.CANCELLED or cancelled:
        return ItemState.CANCELLED
    if dispatch_failed:
        return ItemState.FAILED
    if dispatched:
        return ItemState.RUNNING
    return ItemState.QUEUED


@dataclass(frozen=True, slots=True)
class BatchCounts:
    total: int = 0
    queued: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0

    @classmethod
    def of(cls, states: Iterable[ItemState]) -> BatchCounts:
        tally = dict.fromkeys(ItemState, 0)
        for state in states:
            tally[state] += 1
        return cls(
            total=sum(tally.values()),
            queued=tally[ItemState.QUEUED],
            running=tally[ItemState.RUNNING],
            completed=tally[ItemState.COMPLETED],
            failed=tally[ItemState.FAILED],
            cancelled=tally[ItemState.CANCELLED],
        )


def batch_status(*, cancelled: bool, counts: BatchCounts) -> BatchStatus:
    """'3' when cancelled; else '0' while any item is queued or running; else '2' when any
    item failed; else '1'."""
    if cancelled:
        return BatchStatus.CANCELLED
    if counts.queued or counts.running:
        return BatchStatus.PROCESSING
    if counts.failed:
        return BatchStatus.FAILED
    return BatchStatus.COMPLETED
