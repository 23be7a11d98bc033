"""The one LISTEN loop: a dedicated connection waiting for NOTIFY wake-ups, reconnecting.

The jobs worker listens on `jobrelay_jobs`, the batch relay on `jobrelay_batch_items`; each
passes its own LISTEN statement(s) (one query file per channel) and a callback. Both keep
polling while the listener is down, so a lost connection only costs latency: the listener
reconnects with the loop backoff and, once listening again, calls the callback once, because
a notification sent while it was disconnected is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import LiteralString

import psycopg
import structlog

from jobrelay.loops import LOOP_BACKOFF, Backoff, Loop

log = structlog.get_logger("jobrelay.db.listen")


_ROUND_S = 5.0  # one wait for notifications; the connection stays open across rounds


class NotifyListener(Loop):
    """LISTEN on a dedicated connection; `notified()` runs on each notification and once
    after every (re)connect, so a notification missed while disconnected costs one wake-up.

    `noticed(payload)`, when given, runs before each `notified()` with the notification's
    payload, and with None after a (re)connect (notifications may have been missed).

    `connected` and `backend_pid` say whether and where it listens (tests terminate that
    backend). A clean end of the connection is followed by `interval_s` before reconnecting;
    a failure by the backoff (at most `interval_s`).
    """

    name = "notify-listener"

    def __init__(
        self,
        *,
        conninfo: str,
        listen: Sequence[LiteralString],
        notified: Callable[[], None],
        noticed: Callable[[str | None], None] | None = None,
        name: str | None = None,
        interval_s: float = 1.0,
        backoff: Backoff = LOOP_BACKOFF,
    ) -> None:
        if isinstance(listen, str) or not listen:
            raise ValueError(
                f"listen must be a non-empty list of LISTEN statements, got {listen!r}"
            )
        super().__init__(interval_s=interval_s, backoff=backoff, name=name)
        self._conninfo = conninfo
        self._listen = tuple(listen)
        self._notified = notified
        self._noticed = noticed
        self.connected = False
        self.backend_pid: int | None = None

    async def run_once(self) -> int:
        """Connect, LISTEN, wake the owner, then wake it on each notification until the
        connection ends (a terminated backend raises, which the loop logs once)."""
        conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        async with conn:
            for statement in self._listen:
                await conn.execute(statement)
            self.connected = True
            self.backend_pid = conn.info.backend_pid
            self.health.ok()  # listening again: the end of an outage, if there was one
            log.debug("listener.listening", loop=self.name, backend=self.backend_pid)
            try:
                if self._noticed is not None:
                    self._noticed(None)
                self._notified()
                # In rounds, so a stop whose cancellation got lost still ends the listener.
                while not self._stopping.is_set():
                    async for notify in conn.notifies(timeout=_ROUND_S):
                        self.signals.acted += 1
                        if self._noticed is not None:
                            self._noticed(notify.payload)
                        self._notified()
            finally:
                self.connected = False
        return 0
