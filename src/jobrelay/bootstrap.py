"""Composition root: settings -> database -> pool -> clients -> services.

The only module that wires adapters together. The API and the CLI receive a `Services`
object from here and never construct a pool or a client themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import prometheus_client
import structlog
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import ClientError
from psycopg_pool import AsyncConnectionPool

from jobrelay import content, diagnostics
from jobrelay.auth.local_issuer import LOCAL_CLIENT_ID, LOCAL_ISSUER, LocalIssuer
from jobrelay.auth.tenancy import Tenancy
from jobrelay.auth.tokens import JwksCache, TokenPolicy, TokenVerifier
from jobrelay.aws.clients import (
    AwsEndpoint,
    QueueSender,
    endpoint_reachable,
    ensure_resources,
    s3_client,
)
from jobrelay.aws.emulator import EmulatorError, LocalEmulator, port_is_free
from jobrelay.batches.creation import BatchLimits
from jobrelay.batches.relay import Relay, RelayConfig, RelayMetrics, SqsSender
from jobrelay.batches.service import BatchService
from jobrelay.content.service import MediaService
from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres, EmbeddedPostgresError
from jobrelay.db.errors import DatabaseUnavailable
from jobrelay.db.inspect import DatabaseReport, database_report
from jobrelay.db.pool import Connection, check_connection, open_pool
from jobrelay.domain.errors import FieldError, InvalidInput, JobrelayError, NotFound
from jobrelay.domain.jobs_config import DEFAULT_CLASS, ConfigError, parse_class_counts
from jobrelay.generations import code2wf_dispatch
from jobrelay.generations.children import ChildService
from jobrelay.generations.code2wf import Code2WfService
from jobrelay.generations.webhooks import WorkerWebhooks
from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.enqueue import Enqueuer
from jobrelay.jobs.failpoints import NO_FAILPOINTS, Failpoints
from jobrelay.jobs.loading import AppLoadError, load_app, load_entry_points
from jobrelay.jobs.registry import Registry, RegistryError
from jobrelay.jobs.service import JobsService
from jobrelay.jobs.worker import WorkerConfig
from jobrelay.settings import Settings
from jobrelay.sqs_workers import WorkerConfig as SqsWorkerConfig
from jobrelay.sqs_workers import WorkerStartupError
from jobrelay.sqs_workers import serve as serve_sqs_worker
from jobrelay.webhooks import WebhookVerifier

__all__ = [
    "DatabaseReport",
    "DatabaseUnavailable",
    "EmbeddedPostgresError",
    "EmulatorError",
    "Services",
    "StartupError",
    "WorkerConfig",
    "aws_endpoint",
    "aws_reachable",
    "build_services",
    "database",
    "database_report",
    "deployment_job_types",
    "jobs_registry",
    "jobs_service",
    "local_emulator",
    "local_issuer",
    "migrate_database",
    "parse_slots",
    "prepare_aws",
    "product_job_types",
    "require_free_port",
    "run_relay",
    "run_sqs_worker",
    "worker_config",
]


class StartupError(JobrelayError):
    """A component could not start; the message says what to do."""


@dataclass
class Services:
    """Everything a request handler or command needs, built once per process."""

    settings: Settings
    pool: AsyncConnectionPool[Connection]
    aws: AwsEndpoint
    jobs: JobsService
    media: MediaService
    tokens: TokenVerifier
    tenancy: Tenancy
    batches: BatchService
    children: ChildService
    worker_webhooks: WorkerWebhooks
    code2wf: Code2WfService
    local_issuer: LocalIssuer | None = None

    async def read_result(self, key: str) -> bytes:
        """A stored worker result (or failure artifact) from the results bucket."""
        try:
            async with s3_client(self.aws) as s3:
                response = await s3.get_object(Bucket=self.settings.s3_bucket, Key=key)
                body: bytes = await response["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                raise NotFound("the stored result is gone") from exc
            raise
        return body

    async def database_ready(self, timeout_s: float = 2.0) -> bool:
        """True when a pooled connection answers `SELECT 1` within `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s), self.pool.connection() as conn:
                await conn.execute("SELECT 1")
        except Exception:
            return False
        return True

    async def aws_ready(self) -> bool:
        return await endpoint_reachable(self.aws)


@contextmanager
def database(
    settings: Settings, *, run_migrations: bool = True, own_stack: bool = False
) -> Iterator[str]:
    """Yield the DSN to use: `DATABASE_URL`, or the embedded server of `data_dir`.

    The embedded server is started here and stopped on exit, unless a running `jobrelay up`
    already owns it (its pid in `data_dir/up.pid`): then commands such as `admin`, `ops` and
    `demo` attach to it and leave it running. `own_stack=True` is how `up` claims it.
    """
    if settings.database_url:
        if run_migrations:
            _migrate(settings.database_url, settings)
        yield settings.database_url
        return
    server = EmbeddedPostgres(settings.pgdata_dir)
    owner_file = settings.data_dir.resolve() / "up.pid"
    if not own_stack and server.running_pid() is not None and _alive_pid_in(owner_file):
        yield server.dsn()
        return
    try:
        dsn = server.start()
    except EmbeddedPostgresError as exc:
        raise StartupError(str(exc)) from exc
    try:
        if own_stack:
            owner_file.write_text(str(os.getpid()))
        if run_migrations:
            _migrate(dsn, settings)
        yield dsn
    finally:
        if own_stack:
            owner_file.unlink(missing_ok=True)
        server.stop()


def _alive_pid_in(pid_file: Path) -> bool:
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def _migrate(dsn: str, settings: Settings) -> None:
    asyncio.run(check_connection(dsn, timeout_s=settings.db_connect_timeout_s))
    migrate.upgrade(dsn)


def migrate_database(dsn: str) -> None:
    """Bring the database at `dsn` to the newest schema."""
    migrate.upgrade(dsn)


def aws_endpoint(settings: Settings, endpoint_url: str | None = None) -> AwsEndpoint:
    """The SQS/S3 endpoint from settings (or an emulator's URL)."""
    return AwsEndpoint(
        region=settings.aws_region, endpoint_url=endpoint_url or settings.aws_endpoint_url
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
    if settings.aws_endpoint_url:
        yield settings.aws_endpoint_url
        return
    emulator = LocalEmulator(port=settings.emulator_port)
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
        queue_name=settings.sqs_queue_name,
        dlq_name=settings.sqs_dlq_name,
        bucket=settings.s3_bucket,
        max_receive_count=settings.sqs_max_receive_count,
    )


@asynccontextmanager
async def build_services(
    settings: Settings, dsn: str, endpoint: AwsEndpoint | None = None
) -> AsyncIterator[Services]:
    """Open the pool and clients for one process and close them on exit."""
    pool = await open_pool(
        dsn,
        min_size=settings.db_pool_min,
        max_size=settings.db_pool_max,
        timeout_s=settings.db_connect_timeout_s,
    )
    issuer = local_issuer(settings) if settings.auth_mode == "local" else None
    aws = endpoint or aws_endpoint(settings)
    jobs = jobs_service(settings, pool, aws)
    tenancy = Tenancy(pool)
    try:
        yield Services(
            settings=settings,
            pool=pool,
            aws=aws,
            jobs=jobs,
            media=MediaService(pool),
            tokens=token_verifier(settings, issuer),
            tenancy=tenancy,
            batches=BatchService(pool, batch_limits(settings)),
            children=ChildService(pool),
            worker_webhooks=WorkerWebhooks(pool, webhook_verifier(settings)),
            code2wf=Code2WfService(pool, jobs, tenancy),
            local_issuer=issuer,
        )
    finally:
        await pool.close()


def product_job_types(
    *,
    diag_enabled: bool,
    failpoints: Failpoints = NO_FAILPOINTS,
    send: code2wf_dispatch.MessageSender | None = None,
) -> JobTypes:
    """The product's job types: content, Code2WF dispatch, and diagnostics when enabled."""
    group = JobTypes()
    group.include(content.job_types(failpoints=failpoints))
    group.include(code2wf_dispatch.job_types(send))
    if diag_enabled:
        group.include(diagnostics.job_types)
    return group


def deployment_job_types(
    settings: Settings,
    *,
    failpoints: Failpoints | None = None,
    send: code2wf_dispatch.MessageSender | None = None,
) -> JobTypes:
    """Every job type this deployment runs: the product's, the apps of `JOBRELAY_APP` /
    `--app`, and the packages of the `jobrelay.job_types` entry-point group, all declared
    through the same `JobTypes`."""
    group = product_job_types(
        diag_enabled=settings.diag_jobs_enabled,
        failpoints=failpoints or Failpoints.parse(settings.jobs_failpoints),
        send=send,
    )
    try:
        for reference in settings.app:
            group.include(load_app(reference))
        for installed in load_entry_points():
            group.include(installed)
    except AppLoadError as exc:
        raise StartupError(str(exc)) from None
    return group


def jobs_registry(
    settings: Settings,
    failpoints: Failpoints | None = None,
    send: code2wf_dispatch.MessageSender | None = None,
) -> Registry:
    """The closed registry of this deployment's job types; raises `StartupError` with one
    line naming every problem (an app that does not load, two types with one name, an
    incomplete declaration)."""
    try:
        return deployment_job_types(settings, failpoints=failpoints, send=send).registry()
    except RegistryError as exc:
        raise StartupError(f"job types: {exc}") from None


def jobs_service(
    settings: Settings, pool: AsyncConnectionPool[Connection], endpoint: AwsEndpoint | None = None
) -> JobsService:
    """The jobs engine over `pool`; with an SQS endpoint its Code2WF dispatch can send."""
    failpoints = Failpoints.parse(settings.jobs_failpoints)
    send = None if endpoint is None else QueueSender(endpoint, settings.sqs_queue_name)
    registry = jobs_registry(settings, failpoints, send)
    return JobsService(
        pool=pool,
        registry=registry,
        enqueuer=Enqueuer(
            registry,
            payload_limit_bytes=settings.jobs_payload_limit_bytes,
            failpoints=failpoints,
        ),
        failpoints=failpoints,
    )


def parse_slots(text: str, *, what: str = "--slots", empty_ok: bool = False) -> dict[str, int]:
    """`ai=2,default=8` as slots per class; raises `InvalidInput` naming the bad value."""
    try:
        slots = parse_class_counts(text, what=what, minimum=0)
        if not (empty_ok and not slots) and not any(slots.values()):
            raise ConfigError(f"invalid {what} {text!r}: at least one class needs a slot")
    except ConfigError as exc:
        raise InvalidInput(str(exc), [FieldError(what, str(exc))]) from None
    return slots


def worker_config(
    settings: Settings,
    registry: Registry,
    *,
    concurrency: int | None = None,
    slots: dict[str, int] | None = None,
    metrics_port: int | None = None,
    shutdown_grace_s: float | None = None,
) -> WorkerConfig:
    """The worker's configuration from the registry, settings and CLI overrides.

    Slots per class: `--slots` alone when given (a class left out is not claimed); else the
    classes the job types declare, overridden by `JOBRELAY_WORKER_SLOTS`. `--concurrency N`
    alone lets every known class share N slots. Raises `StartupError` when a job type's
    class has slots nowhere (neither declared nor configured): its jobs could never run.
    """
    configured = parse_slots(settings.worker_slots, what="JOBRELAY_WORKER_SLOTS", empty_ok=True)
    known = {DEFAULT_CLASS: 10, **registry.classes, **configured}
    unserved = registry.unserved_classes({**known, **(slots or {})})
    if unserved:
        listed = ", ".join(f"{name} (class {cls!r})" for name, cls in sorted(unserved.items()))
        raise StartupError(
            f"job types whose concurrency class has no slots anywhere: {listed}; declare the "
            "class with its slots (JobTypes(classes=...)) or set JOBRELAY_WORKER_SLOTS"
        )
    concurrency = concurrency or settings.worker_concurrency
    if slots is None and concurrency is None:
        slots = known
    caps = parse_class_counts(
        settings.jobs_global_caps, what="JOBRELAY_JOBS_GLOBAL_CAPS", minimum=1
    )
    return WorkerConfig(
        concurrency=concurrency,
        slots=slots,
        known_classes=tuple(sorted(known)),
        global_caps=caps,
        lease_s=settings.jobs_lease_s,
        poll_interval_s=settings.worker_poll_interval_s,
        rescue_interval_s=settings.jobs_rescue_interval_s,
        reconcile_interval_s=settings.jobs_reconcile_interval_s,
        prune_interval_s=settings.jobs_prune_interval_s,
        retention_s=settings.jobs_retention_s or None,
        shutdown_grace_s=(
            settings.worker_shutdown_grace_s if shutdown_grace_s is None else shutdown_grace_s
        ),
        prefetch=settings.worker_prefetch,
        listen=settings.worker_listen,
        metrics_port=settings.worker_metrics_port if metrics_port is None else metrics_port,
    )


def batch_limits(settings: Settings) -> BatchLimits:
    return BatchLimits(
        max_items=settings.batch_max_items,
        message_limit_bytes=settings.sqs_message_limit_bytes,
    )


def webhook_verifier(settings: Settings) -> WebhookVerifier:
    """Verifies worker webhooks against every configured secret (rotation)."""
    return WebhookVerifier([secret.get_secret_value() for secret in settings.webhook_secrets])


def relay_config(settings: Settings) -> RelayConfig:
    return RelayConfig(
        lease_s=settings.relay_lease_s,
        claim_size=settings.relay_claim_size,
        workers=settings.relay_workers,
        max_in_flight=settings.relay_max_in_flight,
        poll_interval_s=settings.relay_poll_interval_s,
        retry_delay_s=settings.relay_retry_delay_s,
        message_limit_bytes=settings.sqs_message_limit_bytes,
    )


async def _queue_url(sqs: Any, queue_name: str, stop: asyncio.Event, retry_s: float) -> str:
    """Resolve the work queue's URL, waiting for SQS to answer (no attempt is spent on it)."""
    log = structlog.get_logger("jobrelay.relay")
    while not stop.is_set():
        try:
            response = await sqs.get_queue_url(QueueName=queue_name)
            return str(response["QueueUrl"])
        except Exception as exc:
            log.warning("relay.queue_unavailable", queue=queue_name, error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=retry_s)
    raise StartupError(f"stopped before the queue {queue_name} was reachable")


async def run_relay(
    settings: Settings, dsn: str, endpoint: AwsEndpoint, stop: asyncio.Event
) -> None:
    """Run one relay process until `stop` is set: pool, SQS client, metrics endpoint."""
    config = relay_config(settings)
    metrics = RelayMetrics()
    if settings.relay_metrics_port:
        prometheus_client.start_http_server(
            settings.relay_metrics_port, addr=settings.api_host, registry=metrics.registry
        )
    pool = await open_pool(
        dsn,
        min_size=1,
        max_size=max(2, config.workers + 2),
        timeout_s=settings.db_connect_timeout_s,
    )
    client_kwargs = endpoint.client_kwargs()
    client_kwargs["config"] = client_kwargs["config"].merge(
        AioConfig(max_pool_connections=config.max_in_flight)
    )
    try:
        async with get_session().create_client("sqs", **client_kwargs) as sqs:
            queue_url = await _queue_url(sqs, settings.sqs_queue_name, stop, config.poll_interval_s)
            relay = Relay(
                pool=pool, sender=SqsSender(sqs, queue_url), config=config, metrics=metrics
            )
            await relay.run(stop)
    finally:
        await pool.close()


def local_issuer(settings: Settings) -> LocalIssuer:
    """The development token issuer whose key pair lives in the data directory."""
    return LocalIssuer(settings.data_dir, admin_group=settings.auth_admin_group)


def token_verifier(settings: Settings, issuer: LocalIssuer | None) -> TokenVerifier:
    """The bearer-token verifier: the local issuer's keys, or the Cognito pool's JWKS."""
    if settings.auth_mode == "local":
        assert issuer is not None
        local = issuer

        async def fetch_local() -> dict[str, object]:
            return local.jwks()

        policy = TokenPolicy(
            issuer=LOCAL_ISSUER,
            client_ids=frozenset({LOCAL_CLIENT_ID, *settings.auth_client_ids}),
            token_uses=frozenset(settings.auth_token_uses),
            admin_group=settings.auth_admin_group,
            leeway_s=settings.auth_leeway_s,
        )
        return TokenVerifier(policy, JwksCache(fetch_local, min_refresh_interval_s=0))
    cognito_issuer = settings.cognito_issuer
    if cognito_issuer is None or not settings.auth_client_ids:
        raise StartupError(
            "JOBRELAY_AUTH_MODE=cognito needs JOBRELAY_COGNITO_USER_POOL_ID and "
            "JOBRELAY_AUTH_CLIENT_IDS"
        )
    jwks_url = f"{cognito_issuer}/.well-known/jwks.json"

    async def fetch_cognito() -> dict[str, object]:
        async with httpx.AsyncClient(timeout=5.0) as client:
            response = await client.get(jwks_url)
            response.raise_for_status()
            document: dict[str, object] = response.json()
            return document

    policy = TokenPolicy(
        issuer=cognito_issuer,
        client_ids=frozenset(settings.auth_client_ids),
        token_uses=frozenset(settings.auth_token_uses),
        admin_group=settings.auth_admin_group,
        leeway_s=settings.auth_leeway_s,
    )
    return TokenVerifier(
        policy,
        JwksCache(fetch_cognito, min_refresh_interval_s=settings.auth_jwks_refresh_interval_s),
    )


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
