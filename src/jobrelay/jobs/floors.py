"""Claim floors: where a worker's claim may start reading the pending indexes (issue 27).

An UPDATE leaves the old version of a row, and its index entries, until vacuum removes
them, and vacuum removes nothing newer than the oldest open snapshot. A claimed job's
entry in the pending indexes therefore stays, ahead of every pending job in (priority,
available_at, id) order, for as long as someone holds a transaction open: an idle psql, a
migration, an analytics report on REPEATABLE READ. Without a floor every claim visits all
of them (a heap fetch each, since the version is still visible to that old snapshot), so
the claim's cost grows with the minutes the horizon has been pinned.

A floor is a lower bound on the available_at of every pending job of a class
(`claim_floors.sql`) that never passes the database's clock, so jobs
due later (a waiting parent, a `runAt` ahead) cannot hide one that becomes due sooner (a
retry without backoff, a new enqueue). The claim reads only `available_at >= floor`. The
worker keeps one per class in memory (nothing is written, so the floors add no dead rows
themselves) and refreshes them on the claim connection:

* every `refresh_s` (1 s), looking back `lookback_s` (60 s) before the current floor: the
  cost is the jobs claimed in that window, whatever the age of the horizon;
* in full (from the start of the index) every `full_refresh_s` (30 s), and at the next
  claim after a notification that a job went back to pending in its old place in the queue
  (`BEHIND`: release and lease rescue keep a job's available_at), or after the listener
  reconnected (a notification may have been missed).

What may sit behind a floor, and so waits for the next refresh: a job enqueued in a
transaction that began before the previous refresh and committed after it (at most
`refresh_s`; further than `lookback_s` back: the next full refresh), a job whose `runAt`
lies more than `lookback_s` in the past (the next full refresh), and a job released or
rescued while its notification was lost (the next full refresh). None is lost.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries

_QUERIES = Queries("jobrelay.jobs")
# The NOTIFY payload of statements that put a job back at its old place in the queue.
BEHIND = "behind"


class ClaimFloors:
    """Per-class floors of one claimer (not shared between processes; see module doc)."""

    def __init__(
        self,
        *,
        refresh_s: float = 1.0,
        full_refresh_s: float = 30.0,
        lookback_s: float = 60.0,
    ) -> None:
        self.refresh_s = refresh_s
        self.full_refresh_s = full_refresh_s
        self.lookback = timedelta(seconds=lookback_s)
        self._floors: dict[str, datetime] = {}
        self._refreshed_at = float("-inf")
        self._full_at = float("-inf")

    def noticed(self, payload: str | None) -> None:
        """A notification on the jobs channel: `BEHIND`, or None (the listener reconnected,
        some may be lost), makes the next refresh read everything."""
        if payload is None or payload == BEHIND:
            self._full_at = float("-inf")

    def current(self, classes: Iterable[str]) -> dict[str, datetime]:
        """The floors known for `classes` (a class not refreshed yet has none)."""
        return {c: self._floors[c] for c in classes if c in self._floors}

    async def refresh(self, conn: Connection, classes: Iterable[str]) -> Mapping[str, datetime]:
        """Refresh the floors of `classes` when due and return them; a class seen for the
        first time, or a full refresh, reads from the start of the index."""
        names = sorted(classes)
        now = time.monotonic()
        full = now - self._full_at >= self.full_refresh_s or any(
            c not in self._floors for c in names
        )
        if not names or (not full and now - self._refreshed_at < self.refresh_s):
            return self.current(names)
        since = [None if full else self._floors[c] - self.lookback for c in names]
        cursor = await conn.execute(
            _QUERIES.claim_floors,
            {"classes": names, "since": since},
        )
        for row in await cursor.fetchall():
            floor = row["floor"]
            assert isinstance(floor, datetime)
            self._floors[str(row["concurrency_class"])] = floor
        self._refreshed_at = now
        if full:
            self._full_at = now
        return self.current(names)
