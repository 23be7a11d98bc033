"""How a handler says a message cannot be completed.

- `HandlerFailed`: permanent (bad input, refused URL, page 404, missing manifest). The
  worker reports a `failed` outcome carrying `str(exc)`, which must be safe to show a user.
- `TransientFailure`: might work later (network error, 5xx, S3 hiccup). The message is
  released for redelivery; on its last delivery before the dead-letter queue the worker
  reports a `failed` outcome instead, so the child still ends.
"""

from __future__ import annotations


class HandlerFailed(Exception):
    """The child cannot succeed; the message is a safe, user-facing reason."""


class TransientFailure(Exception):
    """The child might succeed on a later delivery."""
