"""The batch relay: delivers the durable outbox messages of `batch_item` to SQS.

The relay is the pump: its send loops, the passes and the sends through a
`jobrelay.aws.sender.MessageSender`. Its configuration is `jobrelay.batches.relay_config`, its
metrics `jobrelay.batches.relay_metrics` and the split of a pass into calls
`jobrelay.batches.chunking`. Every write it makes is a transition of `jobrelay.batches.outbox`
(claim, record, retry, fail, sweep, settle cancels).

Contract (seed 000; docs/explanation/batches.md, "Relay guarantees"):
- A claim is one statement: due items (not dispatched, not cancelled, not failed, not
  deleted, lease free or expired, fewer than three attempts) are locked with `FOR NO KEY
  UPDATE SKIP LOCKED`, leased for `lease_s` (90 s) and their `dispatch_attempts`
  incremented; the claim commits before anything is sent. Any number of relays run side
  by side.
- Claimed items are sent with `SendMessageBatch` (at most 10 entries and the queue's byte
  limit per call, several calls in flight). Each entry succeeds or fails on its own.
- The body is the stored `message` exactly as PostgreSQL renders it, so every delivery of an
  item (every attempt, every relay) carries the same bytes and the same child id. The claimed
  attempt travels as the `dispatch_attempt` message attribute; when tracing, each item is
  sent in a span of its own under its batch's context (`batch.traceparent`), which it carries
  as the `traceparent` attribute.
- Accepted entries get `dispatched_at`, guarded by the attempt that was claimed: a relay whose
  lease was taken over records nothing. Failed entries become due again after a delay; a
  failure on the third attempt sets `error_message` and fails the child ('2'). A sweep fails
  items whose third claim expired without a recorded send.
- No write waits unboundedly for a lock (issue 40): an outcome whose item (or batch, or
  child) another transaction holds is deferred, kept by the relay and written with a later
  pass, once, by the attempt guards; the rest of the pass is recorded at once. A lock never
  fails an item or counts an attempt (`lock_timeout_s` bounds every other wait;
  `jobrelay_relay_rows_deferred_total` counts the rows held back).
- Delivery is at least once: a relay that dies after SQS accepted a message and before the
  record leaves the item to be sent again when its lease expires. SQS workers and the
  webhook are idempotent on the child id.
- An outage of the queue endpoint fails no item (issue 24): a send that cannot reach it or
  gets no answer within `send_timeout_s` gives its items back without counting the attempt
  and opens the relay's circuit (`jobrelay.batches.circuit`): no claims, one probe of one
  item at a time with a capped backoff, and every send loop resumes when a probe is accepted.

Fair dispatch (issue 17): each organization may hold `window` items in flight (times its
weight): claimed or sent, child not yet terminal (`batch_item.settled_at`, set by a trigger
when the child completes or fails). A claim serves every organization with room, in
proportion to its weight, oldest batch first within one; the rest waits in the outbox, not in
SQS, so a small batch submitted behind a large one of another organization goes out on the
next claim. Claims take turns on an advisory lock (one short transaction each) so the window
is exact across relays and their send loops. When organizations with waiting work are at
their window, an idle send loop looks again after `window_poll_s` (settling items sends no
NOTIFY).

The send loops are woken by `NOTIFY jobrelay_batch_items` (sent by batch creation; received
by the `db.listen.NotifyListener` the jobs worker uses too, which also wakes the relay after
each reconnect) and poll every `poll_interval_s` otherwise (lease expiries, retries, missed
notifications). The sweep runs every `poll_interval_s` as a `jobrelay.loops.Periodic`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from dataclasses import dataclass

import structlog
from psycopg import errors as pg_errors
from psycopg_pool import AsyncConnectionPool

from jobrelay import tracing
from jobrelay.aws.sender import MessageSender, OutgoingMessage, QueueUnreachable
from jobrelay.batches import outbox
from jobrelay.batches.chunking import chunk_messages
from jobrelay.batches.circuit import Circuit
from jobrelay.batches.outbox import Outcomes
from jobrelay.batches.relay_config import RelayConfig
from jobrelay.batches.relay_metrics import RelayMetrics
from jobrelay.batches.verify import verify_sample
from jobrelay.db.listen import NotifyListener
from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.batch_status import MAX_DISPATCH_ATTEMPTS
from jobrelay.loops import LOOP_BACKOFF, Health, Loop, Periodic

_SQL = Queries("jobrelay.batches")
log = structlog.get_logger("jobrelay.relay")

__all__ = ["PassResult", "Relay"]


@dataclass(frozen=True, slots=True)
class PassResult:
    """What one claim-send-record pass did."""

    claimed: int = 0
    sent: int = 0
    retried: int = 0
    failed: int = 0
    held_back: int = 0
    """Organizations with waiting items that were at their window when this pass claimed."""
    given_back: int = 0
    """Items not sent because the queue was unreachable, given back uncounted."""
    deferred: int = 0
    """Outcomes (of this pass or earlier ones) left for a later round by a lock."""


class Relay:
    """Claims, sends and records batch items; see the module docstring for the contract."""

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Connection],
        sender: MessageSender,
        config: RelayConfig | None = None,
        metrics: RelayMetrics | None = None,
        actor: str = "relay",
        listen_conninfo: str | None = None,
        endpoint: str = "the queue endpoint",
    ) -> None:
        self._pool = pool
        self._sender = sender
        self._config = config or RelayConfig()
        self.metrics = metrics or RelayMetrics()
        self._actor = actor
        self._claim_limits = self._config.claim_limits
        self._probe_limits = dataclasses.replace(self._claim_limits, limit=1)
        self.circuit = Circuit(endpoint)
        self._in_flight = asyncio.Semaphore(self._config.max_in_flight)
        self._wakeup = asyncio.Event()
        self._generation = 0
        # Outcomes a lock held back, written with the next pass's (or on the next poll).
        self._deferred = Outcomes()
        # The send loops' passes share one health: a database or SQS outage is one line when
        # the passes start failing and one when they succeed again, however many loops run.
        self._passes = Health("relay-pass", backoff=LOOP_BACKOFF)
        self.sweeper = Periodic(
            name="relay-sweeper", interval_s=self._config.poll_interval_s, run=self.sweep
        )
        self.verifier = Periodic(
            name="count-verifier",
            interval_s=self._config.verify_interval_s,
            run=self.verify_counts,
        )
        # LISTEN needs a session: `listen_conninfo` is a direct connection when the pool goes
        # through a transaction pooler; "" disables listening (poll only), and so does a pool
        # with computed connection strings (none to LISTEN with).
        conninfo = pool.conninfo if listen_conninfo is None else listen_conninfo
        self.listener = (
            NotifyListener(
                conninfo=conninfo,
                listen=[_SQL.listen_batch_items],
                notified=self.wake,
                name="relay-listener",
                interval_s=self._config.poll_interval_s,
            )
            if isinstance(conninfo, str) and conninfo
            else None
        )

    # -- one pass -------------------------------------------------------------------------

    async def run_once(self, *, probe: bool = False) -> PassResult:
        """Claim up to `claim_size` due items, send them, record the outcome of every one.
        `probe`: one item with the probe's short timeout (the circuit is open)."""
        limits = self._probe_limits if probe else self._claim_limits
        claim = await outbox.claim(self._pool, limits, actor=self._actor)
        self.metrics.claimed.inc(len(claim.messages))
        if not claim.messages:
            deferred = await self.flush_deferred() if self._deferred else 0
            return PassResult(held_back=claim.held_back, deferred=deferred)
        claimed_at = time.monotonic()
        timeout_s = (
            min(self._config.probe_timeout_s, self._config.send_timeout_s)
            if probe
            else self._config.send_timeout_s
        )
        chunks = chunk_messages(claim.messages, byte_limit=self._config.message_limit_bytes)
        outcomes = await asyncio.gather(
            *(self._send(chunk, claimed_at, timeout_s) for chunk in chunks)
        )
        sent: list[OutgoingMessage] = []
        failures: list[tuple[OutgoingMessage, str]] = []
        given_back: list[OutgoingMessage] = []
        outage: str | None = None
        for chunk, (failed, unreachable) in zip(chunks, outcomes, strict=True):
            if unreachable is not None:
                outage = unreachable
                given_back.extend(chunk)
                continue
            for message in chunk:
                if message.item_id in failed:
                    failures.append((message, failed[message.item_id]))
                else:
                    sent.append(message)
        retry = [(m, e) for m, e in failures if _attempt(m) < MAX_DISPATCH_ATTEMPTS]
        final = [(m, e) for m, e in failures if _attempt(m) >= MAX_DISPATCH_ATTEMPTS]
        recorded = await self._record(
            Outcomes(
                sent=tuple(sent),
                retry=tuple((m, self._config.retry_delay_s * _attempt(m)) for m, _ in retry),
                final=tuple(final),
                given_back=tuple(given_back),
            )
        )
        if outage is not None:
            self.circuit.trip(outage)
        elif sent:
            self.circuit.reset()
        self.metrics.circuit_open.set(1 if self.circuit.is_open else 0)
        self.metrics.given_back.inc(len(given_back))
        if recorded.lost:
            self.metrics.lost_claims.inc(recorded.lost)
        self.metrics.sent.inc(len(sent))
        self.metrics.failed_attempts.inc(len(failures))
        if failures:
            log.warning(
                "relay.send_failed",
                failed=len(failures),
                final=len(final),
                first_error=failures[0][1],
            )
        return PassResult(
            claimed=len(claim.messages),
            sent=len(sent),
            retried=len(retry),
            failed=recorded.failed,
            held_back=claim.held_back,
            given_back=len(given_back),
            deferred=len(recorded.deferred),
        )

    async def flush_deferred(self) -> int:
        """Write the outcomes a lock held back in earlier passes; returns how many are still
        held back."""
        return len((await self._record(Outcomes())).deferred)

    async def _record(self, outcomes: Outcomes) -> outbox.Recorded:
        """Record `outcomes` with every outcome still deferred, and keep what a lock holds
        back now for the next round (the attempt guards make a late write apply once, or
        not at all when the claim was taken over meanwhile)."""
        pending, self._deferred = self._deferred, Outcomes()
        todo = pending + outcomes
        try:
            recorded = await outbox.record(
                self._pool,
                sent=todo.sent,
                retry=todo.retry,
                final=todo.final,
                given_back=todo.given_back,
                actor=self._actor,
                lock_timeout_s=self._config.lock_timeout_s,
            )
        except BaseException:
            self._deferred = pending + self._deferred  # this pass's outcomes are lost as before
            raise
        self._deferred = self._deferred + recorded.deferred
        self._count_deferred(recorded.deferred)
        if recorded.failed:
            self.metrics.terminal_failures.labels(reason="attempts").inc(recorded.failed)
        if recorded.unstorable:
            self.metrics.rows_unstorable.inc(recorded.unstorable)
        return recorded

    def _count_deferred(self, deferred: Outcomes) -> None:
        for write, rows in (
            ("sent", deferred.sent),
            ("retry", deferred.retry),
            ("final", deferred.final),
            ("give_back", deferred.given_back),
        ):
            if rows:
                self.metrics.rows_deferred.labels(write=write).inc(len(rows))

    async def sweep(self) -> int:
        """Fail items whose last allowed claim expired without a recorded send, and finish
        the cancels of large batches (`outbox.settle_cancels`)."""
        try:
            cancelled = await outbox.settle_cancels(
                self._pool, actor=self._actor, lock_timeout_s=self._config.lock_timeout_s
            )
        except pg_errors.LockNotAvailable:
            # The rest of a cancel waits for children someone holds: the next sweep.
            self.metrics.rows_deferred.labels(write="settle_cancel").inc()
            cancelled = 0
        if cancelled:
            log.info("relay.settled_cancels", children=cancelled)
        swept = await outbox.sweep_expired(
            self._pool, actor=self._actor, lock_timeout_s=self._config.lock_timeout_s
        )
        if swept.deferred:
            self.metrics.rows_deferred.labels(write="sweep").inc(len(swept.deferred))
        if swept.unstorable:
            self.metrics.rows_unstorable.inc(swept.unstorable)
        if swept.failed:
            self.metrics.terminal_failures.labels(reason="lease_expired").inc(swept.failed)
            log.warning("relay.swept_expired", failed=swept.failed)
        return swept.failed

    async def verify_counts(self) -> int:
        """Verify the kept counts of a few batches picked at random and repair any drift
        (`jobrelay.batches.verify`); returns how many had drifted."""
        sample = await verify_sample(
            self._pool, size=self._config.verify_sample, lock_timeout_s=self._config.lock_timeout_s
        )
        if sample.deferred:
            self.metrics.rows_deferred.labels(write="count_correction").inc(sample.deferred)
        drifts = sample.drifts
        for drift in drifts:
            self.metrics.count_drift.inc()
            log.warning(
                "relay.count_drift_repaired",
                batch_id=drift.batch_id,
                kept=str(drift.kept),
                recount=str(drift.recount),
            )
        return len(drifts)

    async def _send(
        self, chunk: list[OutgoingMessage], claimed_at: float, timeout_s: float
    ) -> tuple[dict[str, str], str | None]:
        """`_send_chunk`, each message in a send span of its own when tracing: a child of
        its batch's context, whose own context the message carries to the SQS worker."""
        if not tracing.enabled():
            return await self._send_chunk(chunk, claimed_at, timeout_s)
        spans = [
            tracing.start_span(
                "jobrelay.relay.send",
                kind="producer",
                parent=message.traceparent,
                attributes={
                    "messaging.system": "aws_sqs",
                    "messaging.operation.type": "send",
                    "jobrelay.batch_item.id": message.item_id,
                    "jobrelay.child.id": message.child_id,
                    "jobrelay.dispatch.attempt": message.attempt or 0,
                },
            )
            for message in chunk
        ]
        traced = [
            dataclasses.replace(message, traceparent=tracing.span_traceparent(span))
            for message, span in zip(chunk, spans, strict=True)
        ]
        failed: dict[str, str] = {}
        unreachable: str | None = "cancelled"
        try:
            failed, unreachable = await self._send_chunk(traced, claimed_at, timeout_s)
        finally:
            for message, span in zip(chunk, spans, strict=True):
                tracing.end_span(span, error=unreachable or failed.get(message.item_id))
        return failed, unreachable

    async def _send_chunk(
        self, chunk: list[OutgoingMessage], claimed_at: float, timeout_s: float
    ) -> tuple[dict[str, str], str | None]:
        """Send one chunk: the failed entries with their reasons (all of them when the whole
        call failed: nothing is known to have been accepted), and why the queue was
        unreachable when it was (an outage: nothing failed, the chunk is given back)."""
        async with self._in_flight:
            try:
                async with asyncio.timeout(timeout_s):
                    result = await self._sender.send_batch(chunk)
            except QueueUnreachable as exc:
                return {}, exc.reason
            except TimeoutError:
                return {}, f"no answer within {timeout_s:g} s"
            except Exception as exc:  # refused as a whole: every entry failed
                reason = f"{type(exc).__name__}: {exc}"[:400]
                return {m.item_id: reason for m in chunk}, None
        failed = dict(result.failed)
        elapsed = time.monotonic() - claimed_at
        for message in chunk:
            if message.item_id not in failed:
                self.metrics.claim_to_send.observe(elapsed)
        return failed, None

    # -- the send loops -------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Run the send loops, the sweeper and the NOTIFY listener until `stop` is set;
        passes in progress finish (and record) before this returns."""
        background: list[Loop] = [self.sweeper, self.verifier]
        if self.listener is not None:
            background.insert(0, self.listener)
        for loop in background:
            await loop.start()
        tasks = [
            asyncio.create_task(self._send_loop(stop), name=f"relay-send-{i}")
            for i in range(self._config.workers)
        ]
        log.info("relay.started", workers=self._config.workers, lease_s=self._config.lease_s)
        try:
            await asyncio.gather(*tasks)
        finally:
            for loop in background:
                await loop.stop()
            if self._deferred:
                # One last try: an outcome left unwritten is sent again after its lease.
                with contextlib.suppress(Exception):
                    await self.flush_deferred()
            log.info("relay.stopped", deferred=len(self._deferred))

    async def _send_loop(self, stop: asyncio.Event) -> None:
        """Claim, send and record pass after pass; probe instead while the circuit is open."""
        while not stop.is_set():
            if self.circuit.is_open:
                await self._probe(stop)
                continue
            generation = self._generation
            result = await self._pass()
            if result.given_back:
                continue  # the circuit is open now: probe instead of claiming
            if result.claimed < self._config.claim_size and generation == self._generation:
                # Organizations at their window: their items settle without a NOTIFY.
                await self._idle(stop, self._config.window_poll_s if result.held_back else None)

    async def _pass(self, *, probe: bool = False) -> PassResult:
        try:
            result = await self.run_once(probe=probe)
        except Exception as exc:
            self._passes.failed(exc)  # the send loop idles one poll interval, then retries
            return PassResult()
        self._passes.ok()
        return result

    async def _probe(self, stop: asyncio.Event) -> None:
        """While the circuit is open, one send loop at a time waits the circuit's backoff and
        sends one item; the others wait for their turn and find the circuit's new state."""
        async with self.circuit.turn:
            if not self.circuit.is_open or stop.is_set():
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.circuit.probe_delay())
            if stop.is_set():
                return
            result = await self._pass(probe=True)
            if result.claimed == 0:  # nothing due to probe with: wait for work
                await self._idle(stop)

    async def _idle(self, stop: asyncio.Event, timeout_s: float | None = None) -> None:
        waiters = {
            asyncio.ensure_future(self._wakeup.wait()),
            asyncio.ensure_future(stop.wait()),
        }
        _, pending = await asyncio.wait(
            waiters,
            timeout=min(timeout_s or self._config.poll_interval_s, self._config.poll_interval_s),
            return_when=asyncio.FIRST_COMPLETED,
        )
        for task in pending:
            task.cancel()

    def wake(self) -> None:
        """Make idle send loops claim now (called on NOTIFY)."""
        self._generation += 1
        self._wakeup.set()
        self._wakeup.clear()


def _attempt(message: OutgoingMessage) -> int:
    """The claimed attempt of a message the outbox claimed (always set)."""
    assert message.attempt is not None
    return message.attempt
