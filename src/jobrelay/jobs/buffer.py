"""A size-or-time buffer: items wait until one flush writes many of them in one statement.

The completer records finished jobs through one (`jobs.completer`) and the lease keeper
sends its heartbeats through another (`jobs.maintenance.LeaseKeeper`). The contract:

* `add(item)` is synchronous and O(1): a hot path (one per finished job) adds no await.
* A flush is due when `max_size` items wait, or `max_wait_s` after the oldest waiting item
  arrived (0: as soon as one waits; items arriving while a flush runs ride in the next one,
  a group commit), or once the buffer is closed. `wait()` returns when one is due.
* `flush(write)` hands at most `max_size` items, oldest first, to `write`; while it runs
  they count as in flight (`pending` = waiting + in flight). A flush that fails puts its
  items back in front, in order, for the next one, and raises.

It does no I/O and owns no task: the caller's loop decides when to wait, how to back off
and when to give up (PgQueuer's `TimedOverflowBuffer` is the shape, without its tasks).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar

from jobrelay.loops import positive

T = TypeVar("T")
R = TypeVar("R")


class Buffer(Generic[T]):
    """Items waiting for a batched write, flushed `max_size` at a time on size or time."""

    def __init__(self, *, max_size: int, max_wait_s: float = 0.0) -> None:
        self.max_size = int(positive("max_size", max_size))
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must be >= 0, got {max_wait_s!r}")
        self.max_wait_s = max_wait_s
        self._waiting: list[T] = []
        self._in_flight = 0
        self._oldest = 0.0  # loop time at which the oldest waiting item arrived
        self._due = asyncio.Event()
        self.closed = False

    @property
    def waiting(self) -> int:
        """Items no flush has taken yet."""
        return len(self._waiting)

    @property
    def pending(self) -> int:
        """Items not yet written: waiting, plus those of the flush in progress."""
        return len(self._waiting) + self._in_flight

    def add(self, item: T) -> None:
        """Queue one item (no await: callers on a hot path stay synchronous)."""
        self._waiting.append(item)
        if not self.max_wait_s or len(self._waiting) >= self.max_size:
            self._due.set()
        elif len(self._waiting) == 1:
            self._oldest = asyncio.get_running_loop().time()
            self._due.set()  # a waiter starts the clock of the oldest item

    def replace(self, items: Iterable[T]) -> None:
        """Let `items` be all that waits (a snapshot, as the lease keeper's held jobs)."""
        self._waiting = list(items)
        self._oldest = asyncio.get_running_loop().time()
        if self._waiting:
            self._due.set()

    def drain(self) -> list[T]:
        """Take every waiting item out without writing it (giving up on them)."""
        items, self._waiting = self._waiting, []
        return items

    def close(self) -> None:
        """No more waiting for size or time: every flush is due now (a stop)."""
        self.closed = True
        self._due.set()

    async def wait(self) -> None:
        """Return when a flush is due: `max_size` items wait, the oldest waited
        `max_wait_s`, or the buffer is closed."""
        while True:
            self._due.clear()
            if self.closed or len(self._waiting) >= self.max_size:
                return
            if not self._waiting:
                await self._due.wait()
                continue
            left = self._oldest + self.max_wait_s - asyncio.get_running_loop().time()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._due.wait(), left)

    async def flush(self, write: Callable[[list[T]], Awaitable[R]]) -> tuple[list[T], R]:
        """Write the oldest `max_size` waiting items with `write`; return them and what
        `write` returned. On any error (or cancellation) they wait again, in front."""
        # Items left behind keep the clock of the oldest: they are flushed early, never late.
        oldest = self._oldest
        batch, self._waiting = self._waiting[: self.max_size], self._waiting[self.max_size :]
        self._in_flight = len(batch)
        try:
            result = await write(batch)
        except BaseException:
            self._waiting[:0] = batch
            self._oldest = oldest
            raise
        finally:
            self._in_flight = 0
        return batch, result
