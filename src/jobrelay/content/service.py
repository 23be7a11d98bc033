"""`MediaService`: where each media id's tagging stands (its newest `media.process` job)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries

_QUERIES = Queries("jobrelay.content")


@dataclass(frozen=True, slots=True)
class MediaStatus:
    """The newest `media.process` job of a media id, or `status == "none"` when there is none."""

    media_id: str
    status: str
    job_id: uuid.UUID | None
    revision: int | None
    failure_kind: str | None


@dataclass
class MediaService:
    pool: AsyncConnectionPool[Connection]

    async def media_status(self, media_ids: Sequence[str]) -> list[MediaStatus]:
        """Per media id (in request order, duplicates once): its newest media.process job."""
        wanted = list(dict.fromkeys(media_ids))
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_QUERIES.media_status, {"media_ids": wanted})
            rows = {str(row["media_id"]): row for row in await cursor.fetchall()}
        statuses: list[MediaStatus] = []
        for media_id in wanted:
            row = rows.get(media_id)
            if row is None:
                statuses.append(MediaStatus(media_id, "none", None, None, None))
            else:
                statuses.append(
                    MediaStatus(
                        media_id=media_id,
                        status=str(row["status"]),
                        job_id=cast(uuid.UUID, row["id"]),
                        revision=cast(int, row["revision"]),
                        failure_kind=cast(str | None, row["failure_kind"]),
                    )
                )
        return statuses
