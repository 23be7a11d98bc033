"""One shape for every long-running loop and every infrastructure retry (STYLE.md #9).

Every part may import this module (it imports nothing of jobrelay), so the jobs engine,
the batch relay, the database listener and the SQS workers share it:

* `Backoff`: a capped exponential delay, `base_s * 2**(failures - 1)` up to `cap_s`, with
  optional jitter. The one formula for "wait longer after each failure".
* `Health`: what a loop knows about its failures. It logs ONE line when the loop goes from
  healthy to failing (`loop.failing`, with the error) and one when it recovers
  (`loop.recovered`, with how many attempts failed), never one per retry: an outage of a
  minute is two lines, not sixty. Hot loops that cannot be a `Loop` (the worker's claim and
  flush loops, the SQS receive loop) use it directly; `ok()` costs one comparison.
* `Loop`: a background loop: validated keyword-only construction, `start()` / `stop()`,
  one named asyncio task, `run_once()` for one iteration (tests may call it directly), then
  `interval_s` of rest; after a failure the rest is the backoff's delay instead (never more
  than `interval_s`), reset by the next success. `signals` counts runs, errors, rows acted
  on and recoveries, so tests poll events instead of sleeping (as River's `TestSignals`).
* `Periodic`: a `Loop` over a callable (a declared sweep, the relay's sweep).
* `retry(...)`: call an infrastructure operation again on the errors that say "try later",
  with a `Backoff`, within a number of attempts and/or a time budget, waking early when a
  `stop` event is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog

log = structlog.get_logger("jobrelay.loops")
T = TypeVar("T")


def positive(name: str, value: float) -> float:
    """`value` if it is > 0, else `ValueError` naming the argument and the value."""
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return value


def describe(exc: BaseException) -> str:
    """`Type: message` of an error, for one log line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


@dataclass(frozen=True, slots=True)
class Backoff:
    """Capped exponential backoff: the delay after the n-th failure in a row is
    `min(cap_s, base_s * 2**(n - 1))`, times a uniform factor in `[1 - jitter, 1]`."""

    base_s: float
    cap_s: float
    jitter: float = 0.0

    def __post_init__(self) -> None:
        positive("base_s", self.base_s)
        positive("cap_s", self.cap_s)
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be in [0, 1], got {self.jitter!r}")

    def delay(self, failures: int) -> float:
        """Seconds to wait after `failures` failures in a row (1 for the first)."""
        # The exponent is bounded so a long outage never overflows the float.
        delay = min(self.cap_s, self.base_s * 2.0 ** min(max(failures, 1) - 1, 60))
        if self.jitter:
            # Spread processes that failed together so they do not retry in lockstep.
            delay *= random.uniform(1 - self.jitter, 1.0)
        return delay


# Background loops retry quickly then settle at one attempt a second, so they resume within
# a second of a dependency's return (the recovery times docs/deploy.md states under network
# partitions and failovers).
LOOP_BACKOFF = Backoff(base_s=0.05, cap_s=1.0)


@dataclass
class LoopSignals:
    """What a loop did so far; tests poll these."""

    runs: int = 0
    errors: int = 0
    acted: int = 0  # rows acted on (rescued, reconciled, pruned, lost, notifications)
    recoveries: int = 0  # failing -> healthy transitions


class Health:
    """Failures in a row of one loop, with one log line per change of state."""

    def __init__(self, name: str, *, backoff: Backoff, signals: LoopSignals | None = None) -> None:
        self.name = name
        self.backoff = backoff
        self.signals = signals if signals is not None else LoopSignals()
        self.failures = 0
        self._last_ok = float("-inf")  # time.monotonic() of the latest success

    @property
    def failing(self) -> bool:
        return self.failures > 0

    def failed(self, exc: BaseException, *, began: float | None = None) -> float:
        """Count a failure (logged when it is the first in a row); return the backoff.

        `began` (time.monotonic()) is when the failed try started, for a health that several
        tries share at once (an SQS worker's messages): a try that began before the latest
        success is a straggler of the outage that success ended, not a new outage, so it
        neither logs nor counts toward the row."""
        if began is not None and began < self._last_ok:
            self.signals.errors += 1
            log.debug("loop.straggler", loop=self.name, error=describe(exc))
            return self.backoff.delay(1)
        self.failures += 1
        self.signals.errors += 1
        if self.failures == 1:
            log.warning("loop.failing", loop=self.name, error=describe(exc), exc_info=exc)
        else:
            log.debug("loop.still_failing", loop=self.name, failures=self.failures)
        return self.backoff.delay(self.failures)

    def ok(self) -> None:
        """Count a success; logs the recovery when the loop was failing."""
        self._last_ok = time.monotonic()
        if self.failures:
            log.info("loop.recovered", loop=self.name, failed_attempts=self.failures)
            self.signals.recoveries += 1
            self.failures = 0


class Loop:
    """A background loop; subclasses set `name` and implement `run_once`.

    `interval_s` is the rest after a successful iteration; after a failure the rest is
    `backoff.delay(failures)`, capped by `interval_s`. An iteration that runs for long (a
    listener holding its connection) calls `self.health.ok()` once it is healthy again.
    """

    name = "loop"  # in logs, and the task is `jobrelay-<name>`

    def __init__(
        self, *, interval_s: float, backoff: Backoff = LOOP_BACKOFF, name: str | None = None
    ) -> None:
        if name is not None:
            self.name = name  # several loops of one class (the declared sweeps)
        self.interval_s = positive("interval_s", interval_s)
        self.signals = LoopSignals()
        self.health = Health(self.name, backoff=backoff, signals=self.signals)
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    async def run_once(self) -> int:
        """One iteration; returns how many rows (or events) it acted on."""
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Run the loop as the task `jobrelay-<name>` until `stop()`."""
        if self._task is not None:
            raise RuntimeError(f"{self.name} already started")
        self._stopping.clear()
        self._task = asyncio.create_task(self._run(), name=f"jobrelay-{self.name}")

    async def stop(self) -> None:
        """Cancel the loop (an iteration in progress is interrupted) and wait for it.

        The loop also checks a stop flag between iterations and rests on it: a cancellation
        swallowed inside an iteration (Python 3.11's `asyncio.wait_for` can lose one that
        arrives as the awaited call completes; libraries catch it) would otherwise leave
        the loop sleeping and iterating for ever, and `stop()` waiting on it (seen: a relay
        that never stopped, its count verifier resting 60 s at a time)."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        while not self._stopping.is_set():
            rest = await self._iterate()
            await self._rest(rest)

    async def _rest(self, seconds: float) -> None:
        """Wait `seconds`, or until `stop()` is called."""
        await wait_or_stop(self._stopping, seconds)

    async def _iterate(self) -> float:
        """Run one iteration, log-and-continue; return how long to rest."""
        try:
            acted = await self.run_once()
        except Exception as exc:
            rest = min(self.interval_s, self.health.failed(exc))
        else:
            self.health.ok()
            self.signals.acted += acted
            rest = self.interval_s
        self.signals.runs += 1
        return rest


class Periodic(Loop):
    """A loop that calls `run()` (returning how many rows it acted on) every `interval_s`:
    the declared sweeps of job types, the relay's sweep of expired last claims."""

    def __init__(
        self,
        *,
        name: str,
        interval_s: float,
        run: Callable[[], Awaitable[int]],
        backoff: Backoff = LOOP_BACKOFF,
    ) -> None:
        super().__init__(interval_s=interval_s, backoff=backoff, name=name)
        self._call = run

    async def run_once(self) -> int:
        acted = await self._call()
        if acted:
            log.info("loop.acted", loop=self.name, rows=acted)
        return acted


async def wait_or_stop(stop: asyncio.Event | None, seconds: float) -> bool:
    """Wait `seconds`, or less if `stop` is set meanwhile; True when `stop` is set."""
    if stop is None:
        await asyncio.sleep(seconds)
        return False
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    return stop.is_set()


class RetryStopped(Exception):
    """`retry` gave up because its `stop` event was set."""


async def retry(
    action: Callable[[], Awaitable[T]],
    *,
    what: str,
    retry_on: Callable[[BaseException], bool],
    backoff: Backoff,
    attempts: int | None = None,
    budget_s: float | None = None,
    stop: asyncio.Event | None = None,
    delay_hint: Callable[[BaseException], float | None] | None = None,
    level: int = logging.WARNING,
) -> T:
    """Return `action()`, calling it again after a backoff while it raises an error for
    which `retry_on` is true (an unreachable database, a 503, a deadlock).

    Gives up, raising the last error, after `attempts` calls or when the next wait would
    end past `budget_s` seconds from the first call (either, both or neither); raises
    `RetryStopped` when `stop` is set. `delay_hint(error)` may ask for a longer wait (a
    `Retry-After`), honoured up to the backoff's cap. Each retry is logged at `level`.
    """
    if attempts is not None and attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts!r}")
    clock = asyncio.get_running_loop()
    deadline = None if budget_s is None else clock.time() + budget_s
    failures = 0
    while True:
        if stop is not None and stop.is_set():
            raise RetryStopped(f"stopped before {what} succeeded")
        try:
            return await action()
        except Exception as exc:
            if not retry_on(exc):
                raise
            failures += 1
            delay = backoff.delay(failures)
            hint = delay_hint(exc) if delay_hint is not None else None
            if hint is not None:
                delay = max(delay, min(hint, backoff.cap_s))
            if attempts is not None and failures >= attempts:
                raise
            if deadline is not None and clock.time() + delay > deadline:
                raise
            log.log(
                level,
                "retry.waiting",
                what=what,
                attempt=failures,
                delay_s=round(delay, 3),
                error=describe(exc),
            )
            if await wait_or_stop(stop, delay):
                raise RetryStopped(f"stopped before {what} succeeded") from exc
