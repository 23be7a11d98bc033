"""The worker loop: receive, work several messages at once, report, then delete.

What happens to each message (the full table is in docs/explanation/sqs_workers.md):
- deleted only after the webhook answered 2xx, or 409 (the child already ended otherwise);
- left for redelivery (and, after maxReceiveCount receives, the dead-letter queue) when the
  webhook rejected it (other 4xx);
- held (visibility extended) and delivered again, round after round, while the API is
  unavailable (5xx, 429, network): an outage of the API spends no receive (issue 24);
- an invalid body whose child id is readable is reported `failed` with a safe error; one
  with no readable kind/id is released at once and so reaches the dead-letter queue;
- a transient handler error releases the message with backoff; on its last receive before
  the dead-letter queue a `failed` outcome is posted instead, so the child still ends;
- on shutdown, messages not finished within the grace are abandoned (visibility 0).

While a message is worked its visibility is extended every `heartbeat_s` seconds, so a
slow handler never lets it reappear; a crashed worker stops extending and the message
reappears after `visibility_timeout_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import httpx
import structlog
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from jobrelay import tracing
from jobrelay.aws.clients import AwsEndpoint, s3_client, sqs_client
from jobrelay.domain.errors import JobrelayError
from jobrelay.loops import Backoff, Health, wait_or_stop
from jobrelay.protocol import (
    Code2DesMessage,
    Code2WfMessage,
    PageImportMessage,
    WorkerOutcome,
    parse_message,
)
from jobrelay.protocol.outcomes import ChildKind
from jobrelay.sqs_workers.config import WorkerConfig
from jobrelay.sqs_workers.errors import HandlerFailed, TransientFailure
from jobrelay.sqs_workers.fetch import PageFetcher
from jobrelay.sqs_workers.handlers import HANDLERS, Handler, HandlerContext
from jobrelay.sqs_workers.storage import ResultStore
from jobrelay.sqs_workers.webhook import WebhookClient
from jobrelay.webhooks import WebhookSigner

if TYPE_CHECKING:  # the published stubs are a dev dependency: annotations only
    from types_aiobotocore_sqs import SQSClient
    from types_aiobotocore_sqs.type_defs import MessageTypeDef

log = structlog.get_logger(__name__)

_ID_FIELDS: dict[str, str] = {
    "page_import": "page_import_id",
    "code2des": "code2des_id",
    "code2wf": "code2wf_id",
}
_MAX_ERROR = 500
_RECEIVE_BACKOFF = Backoff(base_s=0.4, cap_s=5.0)  # 0.4 s, 0.8 s, ... 5 s between receives
AnyMessage = PageImportMessage | Code2DesMessage | Code2WfMessage


class WorkerStartupError(JobrelayError):
    """The worker cannot start (queue missing, endpoint unreachable)."""


@dataclass(frozen=True)
class Disposition:
    action: Literal["delete", "release", "leave"]
    delay_s: int = 0
    reason: str = ""


@dataclass(frozen=True)
class ChildRef:
    kind: ChildKind
    id: str
    attempt: int


class SqsWorker:
    """One worker process's loop over one queue (see the module docstring for the rules)."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        sqs: SQSClient,
        queue_url: str,
        max_receive_count: int,
        store: ResultStore,
        fetcher: PageFetcher,
        webhook: WebhookClient,
        handlers: dict[str, Handler[Any]] | None = None,
    ) -> None:
        self.config = config
        self._sqs = sqs
        self.queue_url = queue_url
        self.max_receive_count = max_receive_count
        self._context = HandlerContext(store=store, fetcher=fetcher)
        self._store = store
        self._webhook = webhook
        self._handlers = handlers if handlers is not None else HANDLERS
        self._inflight: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()
        # One line when receiving starts failing (SQS unreachable) and one when it is back.
        self.receiving = Health("sqs-receive", backoff=_RECEIVE_BACKOFF)
        # The same for reporting outcomes (the API unreachable), however many messages wait.
        self.reporting = Health("sqs-webhook", backoff=_RECEIVE_BACKOFF)

    async def run(self, stop: asyncio.Event, abandon: asyncio.Event | None = None) -> None:
        """Work messages until `stop` is set, then drain (see `shutdown_grace_s`)."""
        log.info(
            "sqs worker started",
            queue=self.queue_url,
            concurrency=self.config.concurrency,
            max_receive_count=self.max_receive_count,
        )
        try:
            while not stop.is_set():
                if not await self._wait_for_slot(stop):
                    break
                free = self.config.concurrency - len(self._inflight)
                try:
                    messages = await self._receive(min(10, free), stop)
                except (BotoCoreError, ClientError) as exc:
                    await wait_or_stop(stop, self.receiving.failed(exc))
                    continue
                self.receiving.ok()
                for message in messages:
                    task = asyncio.create_task(self._handle(message))
                    self._inflight.add(task)
                    task.add_done_callback(self._finished)
        finally:
            await self._drain(abandon)
        log.info("sqs worker stopped")

    # -- loop helpers -----------------------------------------------------------------

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._slot_freed.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("message task crashed", exc_info=task.exception())

    async def _wait_for_slot(self, stop: asyncio.Event) -> bool:
        while len(self._inflight) >= self.config.concurrency:
            self._slot_freed.clear()
            await _first(self._slot_freed.wait(), stop.wait())
            if stop.is_set():
                return False
        return True

    async def _receive(self, count: int, stop: asyncio.Event) -> list[MessageTypeDef]:
        receive = asyncio.ensure_future(
            self._sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=count,
                WaitTimeSeconds=self.config.poll_wait_s,
                VisibilityTimeout=self.config.visibility_timeout_s,
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
                MessageAttributeNames=["dispatch_attempt", "traceparent"],
            )
        )
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({receive, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not receive.done():
            # Anything SQS handed out in the cancelled call reappears after the timeout.
            receive.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await receive
            return []
        return receive.result().get("Messages", [])

    async def _drain(self, abandon: asyncio.Event | None) -> None:
        if not self._inflight:
            return
        log.info("finishing in-flight messages", count=len(self._inflight))
        pending = set(self._inflight)
        waiters: list[Awaitable[Any]] = [asyncio.wait(pending)]
        if abandon is not None:
            waiters.append(abandon.wait())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.config.shutdown_grace_s):
                await _first(*waiters)
        unfinished = [task for task in pending if not task.done()]
        if unfinished:
            log.warning("abandoning in-flight messages", count=len(unfinished))
            for task in unfinished:
                task.cancel()
            await asyncio.gather(*unfinished, return_exceptions=True)

    # -- one message ------------------------------------------------------------------

    async def _handle(self, message: MessageTypeDef) -> None:
        receipt = message["ReceiptHandle"]
        receives = int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        attributes = message.get("MessageAttributes", {})
        dispatch = attributes.get("dispatch_attempt")
        # The first receive of the relay's first send: no earlier delivery can have stored a
        # result, so the worker does not look for one (one S3 call less per item); the
        # conditional put still makes the first stored result win.
        first = receives == 1 and dispatch is not None and dispatch.get("StringValue") == "1"
        with (
            _process_span(message, receives),
            structlog.contextvars.bound_contextvars(
                sqs_message_id=message.get("MessageId"), receive_count=receives
            ),
        ):
            heartbeat = asyncio.create_task(self._extend_visibility(receipt))
            try:
                disposition = await self._work(message.get("Body", ""), receives, first=first)
            except asyncio.CancelledError:
                heartbeat.cancel()
                await asyncio.shield(self._change_visibility(receipt, 0))
                log.warning("message abandoned; visible again")
                raise
            finally:
                heartbeat.cancel()
            await self._dispose(receipt, disposition)

    async def _work(self, body: str, receives: int, *, first: bool = False) -> Disposition:
        try:
            message = parse_message(body)
        except ValidationError as exc:
            return await self._invalid(body, exc)
        with structlog.contextvars.bound_contextvars(
            child_id=message.child_id,
            kind=message.kind,
            attempt=message.attempt,
            batch_id=getattr(message, "batch_id", None),
        ):
            log.info("message received")
            outcome = await self._outcome(message, receives, first=first)
            if outcome is None:
                delay = min(self.config.visibility_timeout_s, 2**receives)
                return Disposition("release", delay, "transient failure")
            return await self._report(outcome)

    async def _outcome(
        self, message: AnyMessage, receives: int, *, first: bool = False
    ) -> WorkerOutcome | None:
        handler = self._handlers[message.kind]
        key = handler.result_key(message)
        try:
            async with asyncio.timeout(self.config.handler_timeout_s):
                stored = None if first else await self._store.get(key)
                if stored is None:
                    produced = await handler.produce(message, self._context)
                    stored = await self._store.put_once(key, produced, "application/json")
                    log.info("result stored", key=key, bytes=len(stored))
                else:
                    log.info("result already stored", key=key, bytes=len(stored))
                return handler.completed(message, key, stored)
        except HandlerFailed as exc:
            log.info("handler failed", error=str(exc))
            return _failed(ChildRef(message.kind, message.child_id, message.attempt), str(exc))
        except Exception as exc:  # transient or a bug: retried, and failed at the last receive
            reason = _transient_reason(exc)
            if receives >= self.max_receive_count:
                log.error("giving up after the last delivery", error=reason, exc_info=exc)
                return _failed(
                    ChildRef(message.kind, message.child_id, message.attempt),
                    f"gave up after {receives} deliveries: {reason}",
                )
            log.warning("transient failure; the message will be redelivered", error=reason)
            return None

    async def _invalid(self, body: str, error: ValidationError) -> Disposition:
        ref = child_ref(body)
        if ref is None:
            log.error("unreadable message without a child id; left for the dead-letter queue")
            return Disposition("release", 0, "unreadable")
        with structlog.contextvars.bound_contextvars(
            child_id=ref.id, kind=ref.kind, attempt=ref.attempt
        ):
            reason = validation_summary(error)
            log.warning("invalid message reported as failed", error=reason)
            return await self._report(_failed(ref, f"invalid message: {reason}"))

    async def _report(self, outcome: WorkerOutcome) -> Disposition:
        """Deliver the outcome. While the API cannot be reached (every try of a round failed
        with a network error, a 5xx or a 429) the message is held, its visibility extended,
        and delivered again: an API outage of any length spends no receive of the message
        and loses no result (a stop abandons it: visible again, its result stored in S3)."""
        while True:
            began = time.monotonic()
            delivery = await self._webhook.deliver(outcome)
            if delivery.verdict != "gave_up":
                break
            self.reporting.failed(
                WebhookUnavailable(f"{self.config.webhook_url}: status {delivery.status_code}"),
                began=began,
            )
        self.reporting.ok()
        fields = {
            "outcome": outcome.outcome,
            "status": delivery.status_code,
            "tries": delivery.attempts,
        }
        if delivery.verdict == "accepted":
            log.info("webhook accepted", **fields)
            return Disposition("delete")
        if delivery.verdict == "conflict":
            log.warning("webhook conflict: the child already ended otherwise", **fields)
            return Disposition("delete")
        if delivery.verdict == "rejected":
            log.error("webhook rejected; message left for redelivery and the DLQ", **fields)
            return Disposition("leave", reason="webhook rejected")
        raise AssertionError(f"unexpected webhook verdict {delivery.verdict!r}")

    async def _dispose(self, receipt: str, disposition: Disposition) -> None:
        try:
            if disposition.action == "delete":
                await self._sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=receipt)
                log.info("message deleted")
            elif disposition.action == "release":
                await self._change_visibility(receipt, disposition.delay_s)
        except (BotoCoreError, ClientError) as exc:
            log.warning("could not settle the message", error=_describe(exc))

    async def _extend_visibility(self, receipt: str) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            await self._change_visibility(receipt, self.config.visibility_timeout_s)

    async def _change_visibility(self, receipt: str, seconds: int) -> None:
        try:
            await self._sqs.change_message_visibility(
                QueueUrl=self.queue_url, ReceiptHandle=receipt, VisibilityTimeout=seconds
            )
        except (BotoCoreError, ClientError) as exc:
            log.warning("visibility change failed", error=_describe(exc), seconds=seconds)


# -- helpers -------------------------------------------------------------------------------


class WebhookUnavailable(Exception):
    """A round of webhook tries found the API unreachable (for `Health`'s log line)."""


def _process_span(message: MessageTypeDef, receives: int) -> AbstractContextManager[Any]:
    """The span of one delivery of a message, under the relay's send span (the message's
    `traceparent` attribute); the webhook calls are its children."""
    if not tracing.enabled():
        return tracing.span("jobrelay.sqs_worker.process")  # the shared no-op
    attribute = message.get("MessageAttributes", {}).get("traceparent")
    carried = None if attribute is None else attribute.get("StringValue")
    return tracing.span(
        "jobrelay.sqs_worker.process",
        kind="consumer",
        parent=carried,
        attributes={
            "messaging.system": "aws_sqs",
            "messaging.operation.type": "process",
            "messaging.message.id": message.get("MessageId", ""),
            "messaging.message.delivery_count": receives,
        },
    )


def child_ref(body: str) -> ChildRef | None:
    """Kind, child id and attempt of a message that failed validation, when readable."""
    try:
        raw = json.loads(body)
    except (ValueError, TypeError):
        return None
    if not isinstance(raw, dict):
        return None
    kind = raw.get("kind")
    if not isinstance(kind, str) or kind not in _ID_FIELDS:
        return None
    child_id = raw.get(_ID_FIELDS[kind])
    if not isinstance(child_id, str) or not 1 <= len(child_id) <= 255:
        return None
    attempt = raw.get("attempt", 1)
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        attempt = 1
    return ChildRef(kind, child_id, attempt)  # type: ignore[arg-type]


def validation_summary(error: ValidationError) -> str:
    """Field paths and messages only: never the offending input values."""
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        path = list(item["loc"])
        if path and path[0] in _ID_FIELDS:  # the union's tag: the kind is known already
            path = path[1:]
        location = ".".join(str(part) for part in path) or "body"
        parts.append(f"{location}: {item['msg']}")
    return "; ".join(parts)[:_MAX_ERROR]


def _failed(ref: ChildRef, reason: str) -> WorkerOutcome:
    return WorkerOutcome(
        kind=ref.kind,
        id=ref.id,
        outcome="failed",
        attempt=ref.attempt,
        error_message=reason[:_MAX_ERROR] or "failed",
    )


def _transient_reason(exc: BaseException) -> str:
    if isinstance(exc, TransientFailure):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return "the handler timed out"
    return "internal error in the worker"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", "ClientError"))
    return type(exc).__name__


async def _first(*awaitables: Awaitable[Any]) -> None:
    tasks = [asyncio.ensure_future(item) for item in awaitables]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


async def _queue_max_receive_count(sqs: SQSClient, queue_url: str) -> int | None:
    attributes = (
        await sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["RedrivePolicy"])
    ).get("Attributes", {})
    try:
        return int(json.loads(attributes["RedrivePolicy"])["maxReceiveCount"])
    except (KeyError, ValueError, TypeError):
        return None


async def serve(
    config: WorkerConfig,
    endpoint: AwsEndpoint,
    stop: asyncio.Event,
    *,
    abandon: asyncio.Event | None = None,
    on_ready: Callable[[SqsWorker], None] | None = None,
) -> None:
    """Run one worker against `endpoint` until `stop` is set; clients are closed on exit."""
    async with (
        sqs_client(endpoint, long_poll_s=config.poll_wait_s) as sqs,
        s3_client(endpoint) as s3,
        httpx.AsyncClient(trust_env=False) as http,
    ):
        try:
            queue_url = (await sqs.get_queue_url(QueueName=config.queue_name))["QueueUrl"]
            max_receives = await _queue_max_receive_count(sqs, queue_url)
        except ClientError as exc:
            raise WorkerStartupError(
                f"the work queue {config.queue_name!r} is not available ({_describe(exc)}); "
                "start the stack (`jobrelay up`) or set JOBRELAY_SQS_QUEUE_NAME"
            ) from exc
        except BotoCoreError as exc:
            raise WorkerStartupError(
                f"cannot reach SQS ({_describe(exc)}); check JOBRELAY_AWS_ENDPOINT_URL"
            ) from exc
        worker = SqsWorker(
            config,
            sqs=sqs,
            queue_url=queue_url,
            max_receive_count=max_receives or config.max_receive_count,
            store=ResultStore(s3, config.bucket),
            fetcher=PageFetcher(
                http,
                file_root=config.file_root,
                max_bytes=config.fetch_max_bytes,
                timeout_s=config.fetch_timeout_s,
            ),
            webhook=WebhookClient(
                http,
                url=config.webhook_url,
                signer=WebhookSigner(config.webhook_secret),
                request_timeout_s=config.webhook_timeout_s,
                retry_budget_s=config.webhook_retry_s,
                backoff_base_s=config.webhook_backoff_base_s,
                backoff_cap_s=config.webhook_backoff_cap_s,
            ),
        )
        if on_ready is not None:
            on_ready(worker)
        await worker.run(stop, abandon)
