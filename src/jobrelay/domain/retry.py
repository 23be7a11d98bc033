"""Retry policy: a pure function of (attempt, error class, a random number).

Exponential backoff with a cap and full jitter: the delay of attempt `n` is uniform in
`[0, min(cap, base * 2 ** (n - 1))]` (AWS "full jitter"). The random number is an argument,
so the policy is tested with a table and no clock. Errors are first classified: retryable
(transient I/O, timeouts) or permanent (invalid payload, unknown type, target gone).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from jobrelay.domain.jobs import FailureKind


class ErrorClass(StrEnum):
    RETRYABLE = "retryable"
    PERMANENT = "permanent"


class RetryableError(Exception):
    """Raise from a handler for a transient failure (the job is retried with backoff)."""


class PermanentError(Exception):
    """Raise from a handler when retrying cannot help (the job fails now)."""


class TargetGone(PermanentError):
    """The thing the job works on no longer exists."""


_PERMANENT_BUILTINS: tuple[type[BaseException], ...] = (
    PermanentError,
    ValueError,
    TypeError,
    KeyError,
    LookupError,
    NotImplementedError,
)
_RETRYABLE_BUILTINS: tuple[type[BaseException], ...] = (
    RetryableError,
    TimeoutError,
    ConnectionError,
    OSError,
)


def classify(exc: BaseException) -> ErrorClass:
    """Retryable for transient I/O and timeouts, permanent for bad input or a missing target.

    Anything else is treated as retryable: retries are bounded by `max_attempts`, and a bug
    that fails every attempt still ends `failed`.
    """
    if isinstance(exc, _RETRYABLE_BUILTINS):
        return ErrorClass.RETRYABLE
    if isinstance(exc, _PERMANENT_BUILTINS):
        return ErrorClass.PERMANENT
    return ErrorClass.RETRYABLE


@dataclass(frozen=True, slots=True)
class RetryAfter:
    """Put the job back to pending, available in `delay_s` seconds (database time)."""

    delay_s: float


@dataclass(frozen=True, slots=True)
class GiveUp:
    """End the job `failed` with this failure kind."""

    kind: FailureKind


RetryDecision = RetryAfter | GiveUp


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Per job type: how many attempts and how long to wait between them."""

    max_attempts: int = 5
    base_s: float = 1.0
    cap_s: float = 300.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.base_s < 0 or self.cap_s < self.base_s:
            raise ValueError(f"need 0 <= base_s <= cap_s, got {self.base_s} and {self.cap_s}")

    def ceiling_s(self, attempt: int) -> float:
        """The largest delay after failed attempt `attempt` (1-based), before jitter."""
        exponent = min(max(attempt, 1) - 1, 62)  # 2**62 * base is past any cap
        return min(self.cap_s, self.base_s * float(2**exponent))

    def decide(
        self,
        *,
        attempt: int,
        max_attempts: int,
        error: ErrorClass,
        jitter: float,
        delay_s: float | None = None,
    ) -> RetryDecision:
        """What to do after attempt `attempt` of `max_attempts` failed with `error`.

        `jitter` is a number in [0, 1) (from `random.random()` in production); `delay_s`,
        when the handler asked for a specific delay, replaces the backoff.
        """
        if not 0.0 <= jitter < 1.0:
            raise ValueError(f"jitter must be in [0, 1), got {jitter}")
        if error is ErrorClass.PERMANENT:
            return GiveUp(FailureKind.PERMANENT)
        if attempt >= max_attempts:
            return GiveUp(FailureKind.RETRYABLE)
        if delay_s is not None:
            return RetryAfter(max(0.0, delay_s))
        return RetryAfter(jitter * self.ceiling_s(attempt))
