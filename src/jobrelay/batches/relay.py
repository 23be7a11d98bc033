"""The batch relay: delivers the durable outbox messages of `batch_item` to SQS.

Contract (DESIGN.md section 4, seed 000):
- A claim is one statement: due items (not dispatched, not cancelled, not failed, not
  deleted, lease free or expired, fewer than three attempts) are locked with `FOR UPDATE SKIP
  LOCKED`, leased for `lease_s` (90 s) and their `dispatch_attempts` incremented; the claim
  commits before anything is sent. Any number of relays run side by side.
- Claimed items are sent with `SendMessageBatch` (at most 10 entries and the queue's byte
  limit per call, several calls in flight). Each entry succeeds or fails on its own.
- The body is the stored `message` exactly as PostgreSQL renders it, so every delivery of an
  item (every attempt, every relay) carries the same bytes and the same child id. The claimed
  attempt travels as the `dispatch_attempt` message attribute.
- Accepted entries get `dispatched_at`, guarded by the attempt that was claimed: a relay whose
  lease was taken over records nothing. Failed entries become due again after a delay; a
  failure on the third attempt sets `error_message` and fails the child ('2'). A sweep fails
  items whose third claim expired without a recorded send.
- Delivery is at least once: a relay that dies after SQS accepted a message and before the
  record leaves the item to be sent again when its lease expires. Workers and the webhook
  are idempotent on the child id.

Fair dispatch (issue 17): each organization may hold `window` items in flight (times its
weight): claimed or sent, child not yet terminal (`batch_item.settled_at`, set by a trigger
when the child completes or fails). A claim serves every organization with room, in
proportion to its weight, oldest batch first within one; the rest waits in the outbox, not in
SQS, so a small batch submitted behind a large one of another organization goes out on the
next claim. Claims take turns on an advisory lock (one short transaction each) so the window
is exact across relays and workers. When organizations with waiting work are at their window,
an idle worker looks again after `window_poll_s` (settling items sends no NOTIFY).

The loop is woken by `NOTIFY jobrelay_batch_items` (sent by batch creation; received by the
`db.listen.NotifyListener` the jobs worker uses too, which also wakes the relay after each
reconnect) and polls every `poll_interval_s` otherwise (lease expiries, retries, missed
notifications). The sweep runs every `poll_interval_s` as a `jobrelay.loops.Periodic`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram
from psycopg_pool import AsyncConnectionPool

from jobrelay.batches.creation import ATTRIBUTE_BYTES
from jobrelay.batches.service import fail_children, retry_on_deadlock, settle_cancels
from jobrelay.db.listen import NotifyListener
from jobrelay.db.pool import Connection, transaction
from jobrelay.db.sql import Queries
from jobrelay.domain.batch_status import MAX_DISPATCH_ATTEMPTS
from jobrelay.loops import LOOP_BACKOFF, Health, Periodic
from jobrelay.settings import RelaySettings, SqsSettings

if TYPE_CHECKING:  # the published stubs are a dev dependency: annotations only
    from types_aiobotocore_sqs import SQSClient
    from types_aiobotocore_sqs.type_defs import SendMessageBatchRequestEntryTypeDef

_SQL = Queries("jobrelay.batches")
log = structlog.get_logger("jobrelay.relay")

SQS_MAX_ENTRIES = 10
LEASE_EXPIRED_ERROR = "the dispatch lease expired on the last attempt without a recorded send"


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One claimed item to send: its id, the claimed attempt and the stored body."""

    item_id: str
    child_id: str
    attempt: int
    body: str

    @property
    def size(self) -> int:
        return len(self.body.encode("utf-8")) + ATTRIBUTE_BYTES


class MessageSender(Protocol):
    """Sends up to ten messages in one call.

    Returns the failed entries as `{item_id: reason}` (an empty dict when all were accepted);
    raises when the whole call failed (nothing is known to have been accepted)."""

    async def send_batch(self, messages: Sequence[OutgoingMessage]) -> dict[str, str]: ...


class SqsSender:
    """`MessageSender` over an aiobotocore SQS client (its lifetime is the caller's)."""

    def __init__(self, client: SQSClient, queue_url: str) -> None:
        self._client = client
        self.queue_url = queue_url

    async def send_batch(self, messages: Sequence[OutgoingMessage]) -> dict[str, str]:
        entries: list[SendMessageBatchRequestEntryTypeDef] = [
            {
                "Id": str(index),
                "MessageBody": message.body,
                "MessageAttributes": {
                    "dispatch_attempt": {"DataType": "Number", "StringValue": str(message.attempt)}
                },
            }
            for index, message in enumerate(messages)
        ]
        response = await self._client.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        return {
            messages[int(failure["Id"])].item_id: (
                f"{failure.get('Code', 'error')}: {failure.get('Message', 'rejected by SQS')}"
            )
            for failure in response.get("Failed", [])
        }


@dataclass
class RelayMetrics:
    """Prometheus metrics of one relay process (its own registry, served by the CLI)."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.claimed = Counter(
            "jobrelay_relay_claimed", "Items claimed (dispatch attempts started)", registry=r
        )
        self.sent = Counter("jobrelay_relay_items_sent", "Items accepted by SQS", registry=r)
        self.failed_attempts = Counter(
            "jobrelay_relay_failed_attempts", "Dispatch attempts that failed", registry=r
        )
        self.terminal_failures = Counter(
            "jobrelay_relay_terminal_failures",
            "Items failed for good (third failed attempt or expired last claim)",
            ["reason"],
            registry=r,
        )
        self.lost_claims = Counter(
            "jobrelay_relay_lost_claims",
            "Sends whose claim was taken over before they were recorded",
            registry=r,
        )
        self.claim_to_send = Histogram(
            "jobrelay_relay_claim_to_send_seconds",
            "Time from the claim's commit to SQS accepting the item",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )


@dataclass(frozen=True, slots=True)
class RelayConfig:
    lease_s: float = 90.0
    claim_size: int = 100
    workers: int = 4
    max_in_flight: int = 16
    poll_interval_s: float = 1.0
    retry_delay_s: float = 2.0
    message_limit_bytes: int = 256 * 1024
    send_timeout_s: float = 30.0
    window: int = 200
    weights: tuple[tuple[int, float], ...] = ()
    in_flight_expiry_s: float = 900.0
    window_poll_s: float = 0.05

    def __post_init__(self) -> None:
        if self.lease_s <= 0:
            raise ValueError(f"lease_s must be positive, got {self.lease_s}")
        if self.claim_size < 1:
            raise ValueError(f"claim_size must be at least 1, got {self.claim_size}")
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {self.max_in_flight}")
        if self.poll_interval_s <= 0:
            raise ValueError(f"poll_interval_s must be positive, got {self.poll_interval_s}")
        if self.retry_delay_s < 0:
            raise ValueError(f"retry_delay_s must not be negative, got {self.retry_delay_s}")
        if self.window < 1:
            raise ValueError(f"window must be at least 1, got {self.window}")
        for organization_id, weight in self.weights:
            if not weight > 0:
                raise ValueError(f"weight of organization {organization_id} must be positive")
        if self.in_flight_expiry_s <= 0:
            raise ValueError(f"in_flight_expiry_s must be positive, got {self.in_flight_expiry_s}")
        if self.window_poll_s <= 0:
            raise ValueError(f"window_poll_s must be positive, got {self.window_poll_s}")

    @classmethod
    def from_settings(cls, relay: RelaySettings, sqs: SqsSettings) -> RelayConfig:
        """The relay's configuration from its settings group and the queue's message limit."""
        return cls(
            lease_s=relay.lease_s,
            claim_size=relay.claim_size,
            workers=relay.workers,
            max_in_flight=relay.max_in_flight,
            poll_interval_s=relay.poll_interval_s,
            retry_delay_s=relay.retry_delay_s,
            message_limit_bytes=sqs.message_limit_bytes,
            window=relay.org_window,
            weights=relay.organization_weights(),
            in_flight_expiry_s=relay.in_flight_expiry_s,
            window_poll_s=relay.window_poll_s,
        )


@dataclass(frozen=True, slots=True)
class PassResult:
    """What one claim-send-record pass did."""

    claimed: int = 0
    sent: int = 0
    retried: int = 0
    failed: int = 0
    held_back: int = 0
    """Organizations with waiting items that were at their window when this pass claimed."""


def chunk_messages(
    messages: Sequence[OutgoingMessage], *, byte_limit: int
) -> list[list[OutgoingMessage]]:
    """Split into `SendMessageBatch` calls: at most ten entries and `byte_limit` bytes each."""
    chunks: list[list[OutgoingMessage]] = []
    current: list[OutgoingMessage] = []
    size = 0
    for message in messages:
        if current and (len(current) == SQS_MAX_ENTRIES or size + message.size > byte_limit):
            chunks.append(current)
            current, size = [], 0
        current.append(message)
        size += message.size
    if current:
        chunks.append(current)
    return chunks


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
    ) -> None:
        self._pool = pool
        self._sender = sender
        self._config = config or RelayConfig()
        self.metrics = metrics or RelayMetrics()
        self._actor = actor
        self._in_flight = asyncio.Semaphore(self._config.max_in_flight)
        self._wakeup = asyncio.Event()
        self._generation = 0
        # Workers' passes share one health: a database or SQS outage is one line when the
        # passes start failing and one when they succeed again, however many workers run.
        self._passes = Health("relay-pass", backoff=LOOP_BACKOFF)
        self.sweeper = Periodic(
            name="relay-sweeper", interval_s=self._config.poll_interval_s, run=self.sweep
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

    async def run_once(self) -> PassResult:
        """Claim up to `claim_size` due items, send them, record the outcome of every one."""
        messages, held_back = await self._claim()
        if not messages:
            return PassResult(held_back=held_back)
        claimed_at = time.monotonic()
        chunks = chunk_messages(messages, byte_limit=self._config.message_limit_bytes)
        outcomes = await asyncio.gather(*(self._send(chunk, claimed_at) for chunk in chunks))
        sent: list[OutgoingMessage] = []
        failures: list[tuple[OutgoingMessage, str]] = []
        for chunk, failed in zip(chunks, outcomes, strict=True):
            for message in chunk:
                if message.item_id in failed:
                    failures.append((message, failed[message.item_id]))
                else:
                    sent.append(message)
        retry = [(m, e) for m, e in failures if m.attempt < MAX_DISPATCH_ATTEMPTS]
        final = [(m, e) for m, e in failures if m.attempt >= MAX_DISPATCH_ATTEMPTS]
        failed_now = await retry_on_deadlock(lambda: self._record(sent, retry, final))
        self.metrics.sent.inc(len(sent))
        self.metrics.failed_attempts.inc(len(failures))
        if failed_now:
            self.metrics.terminal_failures.labels(reason="attempts").inc(failed_now)
        if failures:
            log.warning(
                "relay.send_failed",
                failed=len(failures),
                final=len(final),
                first_error=failures[0][1],
            )
        return PassResult(
            claimed=len(messages),
            sent=len(sent),
            retried=len(retry),
            failed=failed_now,
            held_back=held_back,
        )

    async def sweep(self) -> int:
        """Fail items whose last allowed claim expired without a recorded send, and finish
        the cancels of large batches (`settle_cancels`)."""
        cancelled = await settle_cancels(self._pool, actor=self._actor)
        if cancelled:
            log.info("relay.settled_cancels", children=cancelled)
        async with transaction(self._pool) as conn:
            rows = await (
                await conn.execute(
                    _SQL.sweep_expired,
                    {
                        "max_attempts": MAX_DISPATCH_ATTEMPTS,
                        "limit": 1000,
                        "error": LEASE_EXPIRED_ERROR,
                        "actor": self._actor,
                    },
                )
            ).fetchall()
            await fail_children(conn, rows, actor=self._actor)
        failed = len(rows)
        if failed:
            self.metrics.terminal_failures.labels(reason="lease_expired").inc(failed)
            log.warning("relay.swept_expired", failed=failed)
        return failed

    async def _claim(self) -> tuple[list[OutgoingMessage], int]:
        config = self._config
        async with transaction(self._pool) as conn:
            await conn.execute(_SQL.claim_lock)
            rows = await (
                await conn.execute(
                    _SQL.claim_items,
                    {
                        "max_attempts": MAX_DISPATCH_ATTEMPTS,
                        "limit": config.claim_size,
                        "lease_s": config.lease_s,
                        "actor": self._actor,
                        "window": config.window,
                        "weight_orgs": [org for org, _ in config.weights],
                        "weights": [weight for _, weight in config.weights],
                        "in_flight_expiry_s": config.in_flight_expiry_s,
                    },
                )
            ).fetchall()
        held_back = int(str(rows[0]["held_back"])) if rows else 0
        claimed = [r for r in rows if r["id"] is not None]
        self.metrics.claimed.inc(len(claimed))
        messages = sorted(
            (
                OutgoingMessage(
                    item_id=str(r["id"]),
                    child_id=str(r["job_id"]),
                    attempt=int(str(r["dispatch_attempts"])),
                    body=str(r["body"]),
                )
                for r in claimed
            ),
            key=lambda m: m.item_id,
        )
        return messages, held_back

    async def _send(self, chunk: list[OutgoingMessage], claimed_at: float) -> dict[str, str]:
        async with self._in_flight:
            try:
                async with asyncio.timeout(self._config.send_timeout_s):
                    failed = await self._sender.send_batch(chunk)
            except Exception as exc:  # the whole call failed: every entry failed
                reason = f"{type(exc).__name__}: {exc}"[:400]
                return {m.item_id: reason for m in chunk}
        elapsed = time.monotonic() - claimed_at
        for message in chunk:
            if message.item_id not in failed:
                self.metrics.claim_to_send.observe(elapsed)
        return failed

    async def _record(
        self,
        sent: list[OutgoingMessage],
        retry: list[tuple[OutgoingMessage, str]],
        final: list[tuple[OutgoingMessage, str]],
    ) -> int:
        actor = self._actor
        failed_now = 0
        async with transaction(self._pool) as conn:
            if sent:
                cur = await conn.execute(
                    _SQL.record_sent,
                    {
                        "ids": [m.item_id for m in sent],
                        "attempts": [m.attempt for m in sent],
                        "actor": actor,
                    },
                )
                lost = len(sent) - cur.rowcount
                if lost > 0:
                    self.metrics.lost_claims.inc(lost)
            if retry:
                await conn.execute(
                    _SQL.retry_later,
                    {
                        "ids": [m.item_id for m, _ in retry],
                        "attempts": [m.attempt for m, _ in retry],
                        "delays": [self._config.retry_delay_s * m.attempt for m, _ in retry],
                        "actor": actor,
                    },
                )
            if final:
                rows = await (
                    await conn.execute(
                        _SQL.fail_items,
                        {
                            "ids": [m.item_id for m, _ in final],
                            "attempts": [m.attempt for m, _ in final],
                            "errors": [
                                f"dispatch failed after {m.attempt} attempts: {e}"[:500]
                                for m, e in final
                            ],
                            "actor": actor,
                        },
                    )
                ).fetchall()
                await fail_children(conn, rows, actor=actor)
                failed_now = len(rows)
        return failed_now

    # -- the loop -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Run workers, the sweeper and the NOTIFY listener until `stop` is set; passes in
        progress finish (and record) before this returns."""
        background = [self.sweeper] if self.listener is None else [self.listener, self.sweeper]
        for loop in background:
            await loop.start()
        tasks = [
            asyncio.create_task(self._worker(stop), name=f"relay-worker-{i}")
            for i in range(self._config.workers)
        ]
        log.info("relay.started", workers=self._config.workers, lease_s=self._config.lease_s)
        try:
            await asyncio.gather(*tasks)
        finally:
            for loop in background:
                await loop.stop()
            log.info("relay.stopped")

    async def _worker(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            generation = self._generation
            try:
                result = await self.run_once()
            except Exception as exc:
                self._passes.failed(exc)  # the worker idles one poll interval, then retries
                result = PassResult()
            else:
                self._passes.ok()
            if result.claimed < self._config.claim_size and generation == self._generation:
                # Organizations at their window: their items settle without a NOTIFY.
                await self._idle(stop, self._config.window_poll_s if result.held_back else None)

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
        """Make idle workers claim now (called on NOTIFY)."""
        self._generation += 1
        self._wakeup.set()
        self._wakeup.clear()
