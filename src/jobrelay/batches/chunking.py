"""Splitting a pass's messages into `SendMessageBatch` calls.

The sender port takes at most `MAX_ENTRIES` messages that fit the queue's byte limit together
and leaves the splitting to its caller (`jobrelay.aws.sender`). The rule is pure, with no
pool, queue or clock, so it lives apart from the relay's loop and is tested without one.
"""

from __future__ import annotations

from collections.abc import Sequence

from jobrelay.aws.sender import MAX_ENTRIES, OutgoingMessage
from jobrelay.batches.creation import ATTRIBUTE_BYTES


def message_bytes(message: OutgoingMessage) -> int:
    """What SQS counts of one message against the call's limit: its UTF-8 body and the
    allowance for its attributes."""
    return len(message.body.encode("utf-8")) + ATTRIBUTE_BYTES


def chunk_messages(
    messages: Sequence[OutgoingMessage], *, byte_limit: int
) -> list[list[OutgoingMessage]]:
    """Split into `SendMessageBatch` calls: at most ten entries and `byte_limit` bytes each."""
    chunks: list[list[OutgoingMessage]] = []
    current: list[OutgoingMessage] = []
    size = 0
    for message in messages:
        message_size = message_bytes(message)
        if current and (len(current) == MAX_ENTRIES or size + message_size > byte_limit):
            chunks.append(current)
            current, size = [], 0
        current.append(message)
        size += message_size
    if current:
        chunks.append(current)
    return chunks
