"""Lost pool connections are retried at most every half second, whatever the outage's
length, and the patch refuses a psycopg_pool that no longer works the way it expects."""

from __future__ import annotations

import pytest
from psycopg_pool import pool_async
from psycopg_pool.base import AttemptWithBackoff

from jobrelay.db import pool as db_pool


def test_reconnect_attempts_are_capped() -> None:
    db_pool._install_capped_reconnect()
    db_pool._install_capped_reconnect()  # idempotent
    assert pool_async.AttemptWithBackoff is db_pool._CappedAttempt
    attempt = pool_async.AttemptWithBackoff(timeout=300.0)
    delays = []
    for second in range(12):
        attempt.update_delay(float(second))
        delays.append(attempt.delay)
    assert delays[0] <= 0.11  # the first retry comes fast
    assert max(delays) == db_pool.RECONNECT_CAP_S  # doubling, then flat at the cap


def test_the_patch_refuses_a_pool_that_builds_attempts_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Other(AttemptWithBackoff):
        pass

    monkeypatch.setattr(pool_async, "AttemptWithBackoff", Other)
    with pytest.raises(db_pool.PoolPatchError, match="capped reconnect"):
        db_pool._install_capped_reconnect()
