"""Test doubles with real sockets for the SQS worker tests: a webhook receiver that verifies
Standard Webhooks signatures and plays the API's terminal-outcome rules, a page server on
127.0.0.1 (with pages the test can hold open), and the worker running in its own thread."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3

from jobrelay.aws.clients import AwsEndpoint
from jobrelay.sqs_workers import SqsWorker, WorkerConfig, serve
from jobrelay.webhooks import WebhookRejected, WebhookVerifier
from tests.harness import AwsTestResources, wait_until

SECRET = "whsec_dGVzdC1zcXMtd29ya2VyLXNlY3JldC0wMDAx"
WEBHOOK_PATH = "/v1/webhooks/worker"


@dataclass(frozen=True)
class Delivery:
    webhook_id: str
    body: bytes
    payload: dict[str, Any]
    status: int


@dataclass
class Page:
    body: bytes
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    hold: threading.Event | None = None  # respond only once set


class Receiver:
    """The API's webhook endpoint and a page server, on one loopback HTTP server.

    Webhooks: a bad signature is a 401 (and counted); otherwise the next scripted status
    is answered, else `always`, else the API's rules: the first outcome of a child is
    recorded (200), the same outcome again is 200, a different one is 409."""

    def __init__(self) -> None:
        self._verifier = WebhookVerifier([SECRET])
        self._lock = threading.Lock()
        self.deliveries: list[Delivery] = []
        self.unverified = 0
        self.script: deque[int] = deque()
        self.always: int | None = None
        self.webhook_headers: dict[str, str] = {}  # sent with every webhook answer
        self.ended: dict[str, dict[str, Any]] = {}
        self.pages: dict[str, Page] = {}
        self.page_requests: Counter[str] = Counter()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def webhook_url(self) -> str:
        return self.base_url + WEBHOOK_PATH

    def page_url(self, name: str) -> str:
        return f"{self.base_url}/pages/{name}"

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def close(self) -> None:
        for page in self.pages.values():
            if page.hold is not None:
                page.hold.set()
        self._server.shutdown()
        self._server.server_close()

    def deliveries_for(self, child_id: str) -> list[Delivery]:
        with self._lock:
            return [d for d in self.deliveries if d.payload.get("id") == child_id]

    def accepted(self, child_id: str) -> Delivery | None:
        return next((d for d in self.deliveries_for(child_id) if d.status == 200), None)

    def _answer_webhook(self, headers: dict[str, str], body: bytes) -> int:
        try:
            verified = self._verifier.verify(headers, body)
        except WebhookRejected as exc:
            with self._lock:
                self.unverified += 1
            return exc.status_code
        payload = verified.payload
        with self._lock:
            if self.script:
                status = self.script.popleft()
            elif self.always is not None:
                status = self.always
            else:
                previous = self.ended.setdefault(payload["id"], payload)
                status = 200 if previous == payload else 409
            self.deliveries.append(Delivery(verified.webhook_id, body, payload, status))
        return status

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                if self.path != WEBHOOK_PATH:
                    self._send(404, b"")
                    return
                status = receiver._answer_webhook(dict(self.headers.items()), body)
                self._send(status, b"{}", "application/json", receiver.webhook_headers)

            def do_GET(self) -> None:
                name = self.path.removeprefix("/pages/")
                page = receiver.pages.get(name)
                with receiver._lock:
                    receiver.page_requests[name] += 1
                if page is None:
                    self._send(404, b"not found", "text/plain")
                    return
                if page.hold is not None:
                    page.hold.wait(timeout=60)
                self._send(page.status, page.body, page.content_type, page.headers)

            def _send(
                self,
                status: int,
                body: bytes,
                content_type: str = "text/plain",
                headers: dict[str, str] | None = None,
            ) -> None:
                try:
                    self.send_response(status)
                    self.send_header("content-type", content_type)
                    self.send_header("content-length", str(len(body)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


@contextmanager
def running_receiver() -> Iterator[Receiver]:
    receiver = Receiver().start()
    try:
        yield receiver
    finally:
        receiver.close()


def worker_config(
    resources: AwsTestResources, receiver: Receiver, **overrides: Any
) -> WorkerConfig:
    """Short timeouts so redelivery and backoff take seconds, not minutes."""
    base = WorkerConfig(
        queue_name=queue_name(resources.queues.work),
        bucket=resources.bucket,
        webhook_url=receiver.webhook_url,
        webhook_secret=SECRET,
        concurrency=4,
        visibility_timeout_s=5,
        heartbeat_s=1.0,
        poll_wait_s=1,
        handler_timeout_s=30,
        webhook_timeout_s=5,
        webhook_retry_s=10,
        webhook_backoff_base_s=0.05,
        webhook_backoff_cap_s=0.5,
        shutdown_grace_s=5,
        fetch_timeout_s=30,
    )
    return replace(base, **overrides)


def queue_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[1]


class WorkerThread:
    """`serve()` in a thread with its own event loop, so the test can poll synchronously."""

    def __init__(self, config: WorkerConfig, endpoint: AwsEndpoint) -> None:
        self.config = config
        self.endpoint = endpoint
        self.worker: SqsWorker | None = None
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def start(self) -> WorkerThread:
        self._thread.start()
        wait_until(lambda: self._ready.is_set() or self.error, what="the worker to start")
        if self.error is not None:
            raise self.error
        return self

    def stop(self, timeout_s: float = 30) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the worker did not stop"
        if self.error is not None:
            raise self.error

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self.error = exc

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        def ready(worker: SqsWorker) -> None:
            self.worker = worker
            self._ready.set()

        await serve(self.config, self.endpoint, self._stop, on_ready=ready)


@contextmanager
def running_worker(config: WorkerConfig, endpoint: AwsEndpoint) -> Iterator[WorkerThread]:
    thread = WorkerThread(config, endpoint).start()
    try:
        yield thread
    finally:
        thread.stop()


class Aws:
    """Synchronous boto3 clients for the test's own checks."""

    def __init__(self, endpoint: AwsEndpoint, resources: AwsTestResources) -> None:
        kwargs: dict[str, Any] = {
            "endpoint_url": endpoint.endpoint_url,
            "region_name": endpoint.region,
            "aws_access_key_id": "local",
            "aws_secret_access_key": "local",
        }
        self.sqs = boto3.client("sqs", **kwargs)
        self.s3 = boto3.client("s3", **kwargs)
        self.resources = resources

    def send(self, body: dict[str, Any] | str) -> str:
        text = body if isinstance(body, str) else json.dumps(body)
        response = self.sqs.send_message(QueueUrl=self.resources.queues.work, MessageBody=text)
        return str(response["MessageId"])

    def counts(self, url: str | None = None) -> tuple[int, int]:
        """(visible, in flight) messages of the work queue (or `url`)."""
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=url or self.resources.queues.work,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return (
            int(attributes["ApproximateNumberOfMessages"]),
            int(attributes["ApproximateNumberOfMessagesNotVisible"]),
        )

    def queue_empty(self) -> bool:
        return self.counts() == (0, 0)

    def dead_letters(self) -> list[str]:
        """Bodies on the dead-letter queue (received with a 0 s visibility timeout)."""
        response = self.sqs.receive_message(
            QueueUrl=self.resources.queues.dead_letter,
            MaxNumberOfMessages=10,
            VisibilityTimeout=0,
        )
        return [m["Body"] for m in response.get("Messages", [])]

    def object(self, key: str) -> bytes:
        return bytes(self.s3.get_object(Bucket=self.resources.bucket, Key=key)["Body"].read())

    def keys(self, prefix: str) -> list[str]:
        response = self.s3.list_objects_v2(Bucket=self.resources.bucket, Prefix=prefix)
        return [item["Key"] for item in response.get("Contents", [])]


def page_import_message(child_id: str, **request: str) -> dict[str, Any]:
    return {
        "kind": "page_import",
        "page_import_id": child_id,
        "batch_id": "batch-1",
        "organization_id": 1,
        "project_id": 1,
        "request": request,
    }


def code2des_message(child_id: str, html: str, css: str | None = None) -> dict[str, Any]:
    request: dict[str, str] = {"html": html}
    if css is not None:
        request["css"] = css
    return {
        "kind": "code2des",
        "code2des_id": child_id,
        "organization_id": 1,
        "project_id": 1,
        "request": request,
    }


def code2wf_message(child_id: str, manifest_key: str, screen_id: str = "desktop") -> dict[str, Any]:
    return {
        "kind": "code2wf",
        "code2wf_id": child_id,
        "page_import_id": "p",
        "figma_file_key": "FIGMA1",
        "screen_id": screen_id,
        "organization_id": 1,
        "project_id": 1,
        "page_import_result_url": manifest_key,
    }
