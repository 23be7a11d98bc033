"""Backend identifiers: UUIDv7, time-ordered so new rows land at the right edge of indexes."""

from __future__ import annotations

import uuid

import uuid_utils


def new_uuid() -> uuid.UUID:
    """A fresh UUIDv7 as a stdlib `uuid.UUID` (what psycopg adapts to `uuid`)."""
    return uuid.UUID(bytes=uuid_utils.uuid7().bytes)


def new_id() -> str:
    """A fresh UUIDv7 as text, for the varchar(255) ids of the seeds."""
    return str(uuid_utils.uuid7())
