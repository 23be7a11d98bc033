"""The wire contract between the backend and the external workers.

Two directions, both versioned JSON:
- `messages`: the SQS message bodies the backend stores (batch outbox) or sends (Code2WF
  dispatch) and the workers read. Worker-facing, so snake_case keys (`code2wf_id`, per seed
  004).
- `outcomes`: the terminal outcome a worker posts to `POST /v1/webhooks/worker`, signed per
  Standard Webhooks. Public API, so camelCase keys like every other API body.

Both sides import these models; neither side's internals leak into the other. This package
may import only pydantic and the standard library (the SQS workers depend on it).
"""

from jobrelay.protocol.messages import (
    Code2DesMessage,
    Code2DesRequest,
    Code2WfMessage,
    PageImportMessage,
    PageImportRequest,
    WorkerMessage,
    parse_message,
)
from jobrelay.protocol.outcomes import ChildKind, Outcome, WorkerOutcome

__all__ = [
    "ChildKind",
    "Code2DesMessage",
    "Code2DesRequest",
    "Code2WfMessage",
    "Outcome",
    "PageImportMessage",
    "PageImportRequest",
    "WorkerMessage",
    "WorkerOutcome",
    "parse_message",
]
