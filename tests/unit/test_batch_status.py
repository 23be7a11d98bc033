"""Derived item and batch status: the pure table of `domain.batch_status`."""

from __future__ import annotations

import pytest

from jobrelay.domain.batch_status import (
    BATCH_STATUS_NAMES,
    CHILD_STATUS_NAMES,
    BatchCounts,
    BatchStatus,
    ChildStatus,
    ItemState,
    batch_status,
    item_state,
)

C = ChildStatus


@pytest.mark.parametrize(
    ("child", "dispatched", "dispatch_failed", "cancelled", "expected"),
    [
        (C.PROCESSING, False, False, False, ItemState.QUEUED),
        (C.PROCESSING, True, False, False, ItemState.RUNNING),
        (C.PROCESSING, False, True, False, ItemState.FAILED),
        (C.PROCESSING, True, False, True, ItemState.CANCELLED),
        (C.COMPLETED, True, False, False, ItemState.COMPLETED),
        (C.COMPLETED, False, True, False, ItemState.COMPLETED),  # the worker's outcome wins
        (C.FAILED, False, True, False, ItemState.FAILED),
        (C.FAILED, True, False, False, ItemState.FAILED),
        (C.CANCELLED, False, False, True, ItemState.CANCELLED),
    ],
)
def test_item_state(
    child: ChildStatus,
    dispatched: bool,
    dispatch_failed: bool,
    cancelled: bool,
    expected: ItemState,
) -> None:
    assert (
        item_state(
            child_status=child,
            dispatched=dispatched,
            dispatch_failed=dispatch_failed,
            cancelled=cancelled,
        )
        is expected
    )


@pytest.mark.parametrize(
    ("cancelled", "states", "expected"),
    [
        (False, [ItemState.QUEUED, ItemState.COMPLETED], BatchStatus.PROCESSING),
        (False, [ItemState.RUNNING, ItemState.FAILED], BatchStatus.PROCESSING),
        (False, [ItemState.FAILED, ItemState.COMPLETED], BatchStatus.FAILED),
        (False, [ItemState.COMPLETED, ItemState.CANCELLED], BatchStatus.COMPLETED),
        (True, [ItemState.COMPLETED], BatchStatus.CANCELLED),
        (True, [ItemState.RUNNING], BatchStatus.CANCELLED),
    ],
)
def test_batch_status(cancelled: bool, states: list[ItemState], expected: BatchStatus) -> None:
    assert batch_status(cancelled=cancelled, counts=BatchCounts.of(states)) is expected


def test_status_words_are_the_ones_the_console_and_the_cli_show() -> None:
    words = {"0": "processing", "1": "completed", "2": "failed", "3": "cancelled"}
    assert dict(CHILD_STATUS_NAMES) == words
    assert dict(BATCH_STATUS_NAMES) == words
