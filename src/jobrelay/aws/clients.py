"""SQS and S3 clients from one aiobotocore session, plus idempotent resource creation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

if TYPE_CHECKING:  # the published stubs are a dev dependency: annotations only
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_sqs import SQSClient

# Local emulators accept any credentials; real deployments use the default AWS chain.
_LOCAL_CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}


# Error codes of an answer that says the service, not the request, is in trouble.
_SERVICE_TROUBLE = frozenset(
    {
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "RequestThrottled",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
    }
)


@dataclass(frozen=True)
class AwsEndpoint:
    """Where SQS and S3 live: None means AWS itself (credentials from the default chain).

    `connect_timeout_s` bounds opening a connection, `read_timeout_s` each wait for bytes of
    an answer (a long poll adds its own wait on top, `sqs_client(long_poll_s=...)`), so a
    silent endpoint fails a call in seconds instead of botocore's 60 s defaults.
    """

    region: str
    endpoint_url: str | None = None
    connect_timeout_s: float = 2.0
    read_timeout_s: float = 10.0

    def describe(self) -> str:
        """The endpoint as logs name it."""
        return self.endpoint_url or f"AWS {self.region}"

    def client_kwargs(self, *, long_poll_s: float = 0.0) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "region_name": self.region,
            "config": AioConfig(
                retries={"max_attempts": 2, "mode": "standard"},
                connect_timeout=self.connect_timeout_s,
                read_timeout=self.read_timeout_s + long_poll_s,
            ),
        }
        if self.endpoint_url:
            kwargs["endpoint_url"] = self.endpoint_url
            kwargs.update(_LOCAL_CREDENTIALS)
        return kwargs


def unreachable_reason(exc: BaseException) -> str | None:
    """Why a failed call means the endpoint is unreachable or in trouble (a connection
    error, a timeout, a 5xx or throttling answer), or None when the endpoint answered and
    refused the request (access, a missing queue, a bad parameter)."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        code = str(error.get("Code", ""))
        if status >= 500 or code in _SERVICE_TROUBLE:
            return f"{code or status}: {error.get('Message', '')}".strip()[:300]
        return None
    if isinstance(exc, HTTPClientError | BotoConnectionError | TimeoutError | OSError):
        return f"{type(exc).__name__}: {exc}"[:300]
    if type(exc).__module__.startswith("aiohttp"):  # a transport error aiobotocore let out
        return f"{type(exc).__name__}: {exc}"[:300]
    return None


@asynccontextmanager
async def sqs_client(
    endpoint: AwsEndpoint, *, config: AioConfig | None = None, long_poll_s: float = 0.0
) -> AsyncIterator[SQSClient]:
    """An aiobotocore SQS client for `endpoint`; `config` overrides the endpoint's client
    settings (the relay sizes its HTTP pool with `max_pool_connections`); `long_poll_s`: the
    longest `WaitTimeSeconds` its receives use, added to the read timeout."""
    kwargs = endpoint.client_kwargs(long_poll_s=long_poll_s)
    if config is not None:
        kwargs["config"] = kwargs["config"].merge(config)
    async with get_session().create_client("sqs", **kwargs) as client:
        yield client


@asynccontextmanager
async def s3_client(endpoint: AwsEndpoint) -> AsyncIterator[S3Client]:
    """An aiobotocore S3 client for `endpoint`."""
    async with get_session().create_client("s3", **endpoint.client_kwargs()) as client:
        yield client


@dataclass(frozen=True)
class QueueUrls:
    work: str
    dead_letter: str


async def ensure_resources(
    endpoint: AwsEndpoint,
    *,
    queue_name: str,
    dlq_name: str,
    bucket: str,
    max_receive_count: int,
) -> QueueUrls:
    """Create the work queue (redriving to the dead-letter queue) and the bucket if missing."""
    async with sqs_client(endpoint) as sqs:
        dlq_url = (await sqs.create_queue(QueueName=dlq_name))["QueueUrl"]
        dlq_arn = (await sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"]))[
            "Attributes"
        ]["QueueArn"]
        redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count})
        work_url = (
            await sqs.create_queue(
                QueueName=queue_name,
                Attributes={"RedrivePolicy": redrive, "VisibilityTimeout": "60"},
            )
        )["QueueUrl"]
    async with s3_client(endpoint) as s3:
        existing = {b["Name"] for b in (await s3.list_buckets()).get("Buckets", [])}
        if bucket not in existing:
            await s3.create_bucket(Bucket=bucket)
    return QueueUrls(work=work_url, dead_letter=dlq_url)


async def endpoint_reachable(endpoint: AwsEndpoint) -> bool:
    """True when SQS answers a ListQueues call."""
    try:
        async with sqs_client(endpoint) as sqs:
            await sqs.list_queues()
    except Exception:
        return False
    return True
