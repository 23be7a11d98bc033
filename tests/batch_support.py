"""Helpers of the batch, relay and webhook suites: create batches, sign outcomes, drain SQS."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import httpx

from jobrelay.auth.tenancy import ProjectScope
from jobrelay.aws.clients import AwsEndpoint, sqs_client
from jobrelay.webhooks import WebhookSigner
from tests.harness import ApiHarness

# The default of settings.webhooks.secrets: what the API verifies against in tests.
SECRET = "whsec_bG9jYWwtZGV2ZWxvcG1lbnQtc2VjcmV0LTAwMQ=="


def page_items(count: int, *, start: int = 0) -> list[dict[str, Any]]:
    return [{"url": f"https://example.com/page/{start + i}"} for i in range(count)]


async def create_batch(
    api: ApiHarness,
    scope: ProjectScope,
    items: list[dict[str, Any]],
    *,
    batch_type: str = "page_import",
    sub: str = "alice",
) -> dict[str, Any]:
    response = await api.client.post(
        f"/v1/projects/{scope.project_id}/batches",
        json={"type": batch_type, "items": items},
        headers=api.headers(sub),
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def outcome(
    child_id: str, result: str = "completed", *, kind: str = "page_import", **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": kind, "id": child_id, "outcome": result}
    if result == "completed":
        body["resultUrl"] = f"results/{child_id}/manifest.json"
        if kind == "page_import":
            body["manifestHash"] = "ab" * 32
    else:
        body["errorMessage"] = "the page could not be fetched"
    body.update(extra)
    return body


def signed(
    body: dict[str, Any] | bytes,
    *,
    webhook_id: str | None = None,
    timestamp: datetime | None = None,
    secret: str = SECRET,
) -> tuple[bytes, dict[str, str]]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = WebhookSigner(secret).headers(raw, webhook_id=webhook_id, timestamp=timestamp)
    headers["content-type"] = "application/json"
    return raw, headers


async def post_webhook(
    client: httpx.AsyncClient, body: dict[str, Any] | bytes, **kwargs: Any
) -> httpx.Response:
    raw, headers = signed(body, **kwargs)
    return await client.post("/v1/webhooks/worker", content=raw, headers=headers)


async def drain(
    aws: AwsEndpoint, queue_url: str, *, expect: int = 0, timeout_s: float = 60.0
) -> list[dict[str, Any]]:
    """Receive until the queue shows no message and at least `expect` distinct ones arrived
    (or `timeout_s` passed: the caller's assertions then report what is missing), then delete
    them. Each message is returned once: SQS (and moto, whose receives are not atomic) may
    deliver one twice, and a duplicate counted toward `expect` would end the drain early.

    Deletion waits until the receiving is over because moto's `DeleteMessage` rebuilds the
    queue's message list without the lock `SendMessage` appends under: a message sent while a
    delete runs is acknowledged to its sender and then dropped. Until then the received
    messages stay in flight, hidden by the queue's visibility timeout."""
    received: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    async with sqs_client(aws) as sqs:
        empty_receives = 0
        while time.monotonic() < deadline:
            enough = len(received) >= expect
            response = await sqs.receive_message(
                QueueUrl=queue_url,
                MaxNumberOfMessages=10,
                MessageAttributeNames=["All"],
                WaitTimeSeconds=0 if enough else 1,
                # Hidden for the whole drain: on a loaded machine the receives can outlast the
                # queue's visibility timeout, and a message received again gets a new receipt
                # handle (the one kept here would then be refused at the delete).
                VisibilityTimeout=int(timeout_s) + 60,
            )
            batch = response.get("Messages", [])
            if not batch:
                empty_receives += 1
                if enough and empty_receives >= 2:
                    break
                continue
            empty_receives = 0
            received.update((m["MessageId"], m) for m in batch)
        messages = list(received.values())
        for start in range(0, len(messages), 10):
            chunk = messages[start : start + 10]
            response = await sqs.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)
                ],
            )
            assert not response.get("Failed"), response["Failed"]
    return messages


async def queue_depth(aws: AwsEndpoint, queue_url: str) -> int:
    async with sqs_client(aws) as sqs:
        attributes = (
            await sqs.get_queue_attributes(
                QueueUrl=queue_url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                ],
            )
        )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )
