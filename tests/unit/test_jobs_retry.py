"""The retry policy is a pure function: a table of attempts, no database, no clock."""

from __future__ import annotations

import pytest

from jobrelay.domain.jobs import FailureKind
from jobrelay.domain.retry import (
    ErrorClass,
    GiveUp,
    PermanentError,
    RetryableError,
    RetryAfter,
    RetryPolicy,
    TargetGone,
    classify,
)

POLICY = RetryPolicy(max_attempts=6, base_s=2.0, cap_s=20.0)


@pytest.mark.parametrize(
    ("attempt", "jitter", "expected"),
    [
        (1, 0.0, RetryAfter(0.0)),
        (1, 0.5, RetryAfter(1.0)),
        (2, 0.5, RetryAfter(2.0)),
        (3, 0.5, RetryAfter(4.0)),
        (4, 0.999, RetryAfter(0.999 * 16.0)),
        (5, 0.5, RetryAfter(10.0)),  # capped at 20 before jitter
        (6, 0.5, GiveUp(FailureKind.RETRYABLE)),  # last attempt used
        (9, 0.5, GiveUp(FailureKind.RETRYABLE)),
    ],
)
def test_backoff_table(attempt: int, jitter: float, expected: object) -> None:
    decision = POLICY.decide(
        attempt=attempt, max_attempts=6, error=ErrorClass.RETRYABLE, jitter=jitter
    )
    assert decision == expected


def test_permanent_errors_give_up_at_once() -> None:
    decision = POLICY.decide(attempt=1, max_attempts=6, error=ErrorClass.PERMANENT, jitter=0.3)
    assert decision == GiveUp(FailureKind.PERMANENT)


def test_requested_delay_replaces_backoff_but_not_the_limit() -> None:
    assert POLICY.decide(
        attempt=1, max_attempts=6, error=ErrorClass.RETRYABLE, jitter=0.9, delay_s=42
    ) == RetryAfter(42)
    assert POLICY.decide(
        attempt=6, max_attempts=6, error=ErrorClass.RETRYABLE, jitter=0.9, delay_s=42
    ) == GiveUp(FailureKind.RETRYABLE)


def test_huge_attempt_numbers_stay_at_the_cap() -> None:
    assert POLICY.ceiling_s(10_000) == 20.0


@pytest.mark.parametrize(
    ("kwargs", "jitter"),
    [({"max_attempts": 0}, 0.1), ({"base_s": 5, "cap_s": 1}, 0.1), ({}, 1.0), ({}, -0.1)],
)
def test_invalid_values_are_named(kwargs: dict[str, float], jitter: float) -> None:
    with pytest.raises(ValueError, match=r"max_attempts|base_s|jitter"):
        RetryPolicy(**kwargs).decide(  # type: ignore[arg-type]
            attempt=1, max_attempts=3, error=ErrorClass.RETRYABLE, jitter=jitter
        )


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TimeoutError(), ErrorClass.RETRYABLE),
        (ConnectionResetError(), ErrorClass.RETRYABLE),
        (OSError("disk"), ErrorClass.RETRYABLE),
        (RetryableError("flaky"), ErrorClass.RETRYABLE),
        (RuntimeError("bug?"), ErrorClass.RETRYABLE),
        (ValueError("bad payload"), ErrorClass.PERMANENT),
        (KeyError("missing"), ErrorClass.PERMANENT),
        (TargetGone("media deleted"), ErrorClass.PERMANENT),
        (PermanentError("no"), ErrorClass.PERMANENT),
    ],
)
def test_classification(exc: BaseException, expected: ErrorClass) -> None:
    assert classify(exc) is expected
