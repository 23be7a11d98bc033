"""The relay's circuit breaker on the queue endpoint (issue 24).

Closed, the relay claims and sends as usual. A send that finds the endpoint unreachable (a
connection error, no answer within the send timeout, a 5xx or throttling answer: an outage,
not a refusal of the message) opens it: the items of that send are given back without
counting the attempt, and the relay's send loops stop claiming. While it is open one send
loop at a time probes, after a capped backoff: it claims one item and sends it with a short
timeout. The first probe (or any send) that is accepted closes the circuit and every send
loop claims again. Each change of state is one log line with the endpoint and the last error;
nothing is logged per probe.
"""

from __future__ import annotations

import asyncio
import time

import structlog

from jobrelay.loops import Backoff

log = structlog.get_logger("jobrelay.relay")

PROBE_BACKOFF = Backoff(base_s=0.1, cap_s=1.0)
"""Probes come quickly, then once a second: the relay resumes within about a second of the
endpoint answering again, however long the outage."""


class Circuit:
    """The state of one relay's circuit on its queue endpoint (`endpoint` names it in logs)."""

    def __init__(self, endpoint: str, *, backoff: Backoff = PROBE_BACKOFF) -> None:
        self.endpoint = endpoint
        self.backoff = backoff
        self.turn = asyncio.Lock()
        """Held by the send loop that probes; the others wait for it and find the result."""
        self._opened_at: float | None = None
        self._failures = 0
        self.last_error: str | None = None
        self.openings = 0

    @property
    def is_open(self) -> bool:
        return self._opened_at is not None

    def trip(self, error: str) -> None:
        """A send found the endpoint unreachable: open (logged once), or count a failed probe."""
        self._failures += 1
        self.last_error = error
        if self._opened_at is None:
            self._opened_at = time.monotonic()
            self.openings += 1
            log.warning("relay.circuit_open", endpoint=self.endpoint, error=error)

    def reset(self) -> None:
        """A send was accepted: close (logged once, with how long it was open)."""
        if self._opened_at is not None:
            log.info(
                "relay.circuit_closed",
                endpoint=self.endpoint,
                open_s=round(time.monotonic() - self._opened_at, 3),
                failed_probes=self._failures - 1,
                last_error=self.last_error,
            )
        self._opened_at = None
        self._failures = 0

    def probe_delay(self) -> float:
        """How long to wait before the next probe."""
        return self.backoff.delay(self._failures)
