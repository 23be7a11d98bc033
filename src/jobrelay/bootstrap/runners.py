"""Long-running processes wired from settings: the relay and the reference SQS worker."""

from __future__ import annotations

import asyncio

import prometheus_client
from botocore.exceptions import BotoCoreError, ClientError

from jobrelay.aws.clients import AwsEndpoint
from jobrelay.aws.sqs_sender import SqsSender
from jobrelay.batches.relay import Relay
from jobrelay.batches.relay_config import RelayConfig
from jobrelay.batches.relay_metrics import RelayMetrics
from jobrelay.bootstrap.database import listen_conninfo
from jobrelay.bootstrap.errors import StartupError
from jobrelay.bootstrap.local_stack import aws_endpoint
from jobrelay.db.pool import open_pool
from jobrelay.loops import Backoff, RetryStopped, retry
from jobrelay.settings import Settings
from jobrelay.sqs_workers import WorkerConfig as SqsWorkerConfig
from jobrelay.sqs_workers import WorkerStartupError
from jobrelay.sqs_workers import serve as serve_sqs_worker


def relay_pool_size(settings: Settings) -> int:
    """Connections of a relay's pool: JOBRELAY_RELAY_DB_POOL_MAX, else one per claim loop
    plus two (the sweeper, a recording in flight). The LISTEN connection comes on top."""
    if settings.relay.db_pool_max is not None:
        return settings.relay.db_pool_max
    return max(2, settings.relay.workers + 2)


async def _queue_url(
    sender: SqsSender, queue_name: str, stop: asyncio.Event, retry_s: float
) -> str:
    """Resolve the work queue's URL, waiting for SQS to answer (no attempt is spent on it)."""
    try:
        return await retry(
            sender.queue_url,
            what=f"the queue {queue_name}",
            retry_on=lambda exc: isinstance(exc, BotoCoreError | ClientError),
            backoff=Backoff(base_s=min(0.05, retry_s), cap_s=retry_s),
            stop=stop,
        )
    except RetryStopped:
        raise StartupError(f"stopped before the queue {queue_name} was reachable") from None


async def run_relay(
    settings: Settings, dsn: str, endpoint: AwsEndpoint, stop: asyncio.Event
) -> None:
    """Run one relay process until `stop` is set: pool, SQS client, metrics endpoint."""
    config = RelayConfig.from_settings(settings.relay, settings.sqs)
    metrics = RelayMetrics()
    if settings.relay.metrics_port:
        prometheus_client.start_http_server(
            settings.relay.metrics_port, addr=settings.api.host, registry=metrics.registry
        )
    pool = await open_pool(
        dsn, **settings.db.pool_options(min_size=1, max_size=relay_pool_size(settings))
    )
    sender = SqsSender(
        endpoint, queue_name=settings.sqs.queue_name, max_connections=config.max_in_flight
    )
    try:
        async with sender:
            await _queue_url(sender, settings.sqs.queue_name, stop, config.poll_interval_s)
            relay = Relay(
                pool=pool,
                sender=sender,
                config=config,
                metrics=metrics,
                listen_conninfo=listen_conninfo(settings, "relay"),
                endpoint=sender.endpoint,
            )
            await relay.run(stop)
    finally:
        await pool.close()


async def run_sqs_worker(
    settings: Settings,
    stop: asyncio.Event,
    *,
    abandon: asyncio.Event | None = None,
    endpoint_url: str | None = None,
) -> None:
    """Run one reference SQS worker until `stop` (no database: it only needs SQS, S3 and
    the webhook URL). `abandon` cuts the shutdown grace short."""
    try:
        await serve_sqs_worker(
            SqsWorkerConfig.from_settings(settings),
            aws_endpoint(settings, endpoint_url),
            stop,
            abandon=abandon,
        )
    except WorkerStartupError as exc:
        raise StartupError(str(exc)) from exc
