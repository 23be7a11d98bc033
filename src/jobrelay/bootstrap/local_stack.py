"""The SQS/S3 endpoint: configured, or the local emulator started here."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from jobrelay.aws.clients import AwsEndpoint, endpoint_reachable, ensure_resources
from jobrelay.aws.emulator import EmulatorError, LocalEmulator, port_is_free
from jobrelay.bootstrap.errors import StartupError
from jobrelay.settings import Settings


def aws_endpoint(settings: Settings, endpoint_url: str | None = None) -> AwsEndpoint:
    """The SQS/S3 endpoint from settings (or an emulator's URL)."""
    return AwsEndpoint(
        region=settings.aws.region,
        endpoint_url=endpoint_url or settings.aws.endpoint_url,
        connect_timeout_s=settings.aws.connect_timeout_s,
        read_timeout_s=settings.aws.read_timeout_s,
    )


def require_free_port(host: str, port: int, *, what: str, setting: str) -> None:
    """Raise `StartupError` naming the port and the setting to change when it is taken."""
    if not port_is_free(host, port):
        raise StartupError(
            f"port {port} on {host} is already in use; pass --port or set {setting} "
            f"to a free port (needed by {what})"
        )


def aws_reachable(settings: Settings) -> bool:
    """True when the configured SQS/S3 endpoint answers."""
    return asyncio.run(endpoint_reachable(aws_endpoint(settings)))


@contextmanager
def local_emulator(settings: Settings) -> Iterator[str | None]:
    """Start the emulator unless an endpoint is configured; yield the endpoint URL to use."""
    if settings.aws.endpoint_url:
        yield settings.aws.endpoint_url
        return
    emulator = LocalEmulator(port=settings.aws.emulator_port)
    try:
        url = emulator.start()
    except EmulatorError as exc:
        raise StartupError(str(exc)) from exc
    try:
        yield url
    finally:
        emulator.stop()


async def prepare_aws(settings: Settings, endpoint: AwsEndpoint) -> None:
    """Create the queues and the bucket the stack uses (idempotent)."""
    await ensure_resources(
        endpoint,
        queue_name=settings.sqs.queue_name,
        dlq_name=settings.sqs.dlq_name,
        bucket=settings.aws.s3_bucket,
        max_receive_count=settings.sqs.max_receive_count,
    )
