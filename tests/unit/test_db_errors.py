"""Connection strings in messages never carry credentials."""

from __future__ import annotations

import pytest

from jobrelay.db.errors import describe_dsn


@pytest.mark.parametrize(
    ("dsn", "described"),
    [
        ("postgresql://user:secret@db.example:5433/jobs", "db.example:5433/jobs"),
        ("postgresql://postgres@/jobs?host=%2Ftmp%2Fpg", "/tmp/pg/jobs"),
        ("postgresql://localhost", "localhost/"),
    ],
)
def test_describe_dsn_drops_credentials(dsn: str, described: str) -> None:
    assert describe_dsn(dsn) == described
    assert "secret" not in describe_dsn(dsn)
