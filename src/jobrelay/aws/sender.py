"""The message sender port: how the product hands worker messages to a queue.

Contract (every implementation keeps it; the relay and the Code2WF dispatch rely on it):
- `send_batch` takes at most `MAX_ENTRIES` messages whose bodies (plus attributes) fit the
  queue's byte limit together; splitting larger sets is the caller's job (the relay's
  `jobrelay.batches.chunking.chunk_messages`).
- Each message succeeds or fails on its own. The answer names every message exactly once:
  `accepted` maps its `item_id` to the queue's message id, `failed` to a short reason.
- A call that fails as a whole raises: nothing is known to have been accepted. When the
  queue could not be reached or did not answer (a connection error, a timeout, a 5xx or
  throttling answer) it raises `QueueUnreachable`: an outage, which says nothing about the
  messages (the relay gives them back without counting the attempt and opens its circuit).
  Any other error (an access or configuration error) fails every message of the call.
- A message may be accepted although the caller later sees a failure (a lost answer), so
  delivery is at least once; the same `item_id` and body may be sent again and the receiving
  side is idempotent on the child id.
- `attempt`, when set, travels as the `dispatch_attempt` number attribute (the relay's
  claimed attempt; the reference workers read it). Messages without one carry no attribute.
- `traceparent`, when set, travels as the `traceparent` string attribute (W3C trace
  context, `jobrelay.tracing`): the worker that handles the message continues the trace.
- A sender holds its connection resources for its whole life and is closed by its owner.

`jobrelay.aws.sqs_sender.SqsSender` is the one implementation; tests wrap it to inject
failures or delays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

MAX_ENTRIES = 10
"""SQS `SendMessageBatch` takes at most ten entries per call."""


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One message to send: the outbox row it comes from, its child, the attempt it is
    sent for (None: no `dispatch_attempt` attribute), the body exactly as stored and the
    trace context it carries (None: no `traceparent` attribute)."""

    item_id: str
    child_id: str
    attempt: int | None
    body: str
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class SendResult:
    """The answer of one `send_batch` call, per message `item_id`."""

    accepted: Mapping[str, str] = field(default_factory=dict)
    """Message id given by the queue, per accepted message."""
    failed: Mapping[str, str] = field(default_factory=dict)
    """Reason, per rejected message."""


class QueueUnreachable(Exception):
    """The queue endpoint could not be reached or did not answer: nothing was refused."""

    def __init__(self, endpoint: str, reason: str) -> None:
        super().__init__(f"{endpoint}: {reason}")
        self.endpoint = endpoint
        self.reason = reason


class MessageSender(Protocol):
    """Sends up to `MAX_ENTRIES` messages in one call (see the module contract)."""

    async def send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult: ...
