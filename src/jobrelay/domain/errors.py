"""The errors callers of jobrelay see. Adapters translate their own failures into these."""

from __future__ import annotations

from dataclasses import dataclass, field


class JobrelayError(Exception):
    """Base of every error jobrelay raises on purpose."""


class NotFound(JobrelayError):
    """The resource does not exist or the caller may not see it (the two look the same)."""


class Conflict(JobrelayError):
    """The request contradicts the current state (a 409)."""


class Paused(JobrelayError):
    """Enqueueing is paused by the operator (quiesce)."""


@dataclass(frozen=True, slots=True)
class FieldError:
    """One invalid input: the path to the field (e.g. `items.3.url`) and what is wrong."""

    path: str
    message: str


@dataclass
class InvalidInput(JobrelayError):
    """Input failed validation; nothing was stored."""

    detail: str
    errors: list[FieldError] = field(default_factory=list)

    def __str__(self) -> str:
        """The detail and each field error it does not already say, e.g. for the CLI:
        `invalid payload for job type 'diag.sleep': payload.seconds: Field required`."""
        extra = [f"{e.path}: {e.message}" for e in self.errors if e.message not in self.detail]
        return f"{self.detail}: {'; '.join(extra)}" if extra else self.detail


class Unauthenticated(JobrelayError):
    """No valid bearer token (a 401). The message says what was wrong, never the token."""


class Forbidden(JobrelayError):
    """Authenticated, but the action needs a role the caller lacks (a 403)."""
