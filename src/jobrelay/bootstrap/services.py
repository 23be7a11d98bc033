"""Database -> services: the pool, clients and services one process needs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from botocore.exceptions import ClientError
from psycopg_pool import AsyncConnectionPool

from jobrelay.auth.local_issuer import LOCAL_CLIENT_ID, LOCAL_ISSUER, LocalIssuer
from jobrelay.auth.tenancy import Tenancy
from jobrelay.auth.tokens import JwksCache, TokenPolicy, TokenVerifier
from jobrelay.aws.clients import AwsEndpoint, endpoint_reachable, s3_client
from jobrelay.aws.sqs_sender import SqsSender
from jobrelay.batches.creation import BatchLimits
from jobrelay.batches.service import BatchService
from jobrelay.bootstrap.database import require_own_data_dir
from jobrelay.bootstrap.errors import StartupError
from jobrelay.bootstrap.job_types import jobs_service
from jobrelay.bootstrap.local_stack import aws_endpoint
from jobrelay.children.service import ChildService
from jobrelay.console import ConsoleService
from jobrelay.content.service import MediaService
from jobrelay.db.network import deadline
from jobrelay.db.pool import Connection, open_pool
from jobrelay.domain.errors import NotFound
from jobrelay.generations.code2wf import Code2WfService
from jobrelay.generations.webhooks import WorkerWebhooks
from jobrelay.idempotency import IdempotentRequests
from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.service import JobsService
from jobrelay.jobs.workflows.service import WorkflowsService
from jobrelay.settings import Settings
from jobrelay.webhooks import WebhookVerifier


@dataclass
class Services:
    """Everything a request handler or command needs, built once per process."""

    settings: Settings
    pool: AsyncConnectionPool[Connection]
    aws: AwsEndpoint
    jobs: JobsService
    workflows: WorkflowsService
    media: MediaService
    tokens: TokenVerifier
    tenancy: Tenancy
    batches: BatchService
    children: ChildService
    worker_webhooks: WorkerWebhooks
    code2wf: Code2WfService
    console: ConsoleService
    idempotency: IdempotentRequests
    local_issuer: LocalIssuer | None = None

    async def read_result(self, key: str) -> bytes:
        """A stored worker result (or failure artifact) from the results bucket."""
        try:
            async with s3_client(self.aws) as s3:
                response = await s3.get_object(Bucket=self.settings.aws.s3_bucket, Key=key)
                body: bytes = await response["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                raise NotFound("the stored result is gone") from exc
            raise
        return body

    async def database_ready(self, timeout_s: float = 0.8) -> bool:
        """True when a pooled connection answers `SELECT 1` within `timeout_s`, waiting for
        the connection included. A connection that does not answer in time is severed, not
        cancelled (a cancel request would cross the same silent network and hang)."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + timeout_s
        try:
            async with self.pool.connection(timeout=timeout_s) as conn:
                left = max(give_up - loop.time(), 0.01)
                async with deadline(conn, left, what="the readiness check"):
                    await conn.execute("SELECT 1")
        except Exception:
            return False
        return True

    async def aws_ready(self) -> bool:
        return await endpoint_reachable(self.aws)


@asynccontextmanager
async def build_services(
    settings: Settings,
    dsn: str,
    endpoint: AwsEndpoint | None = None,
    *,
    serves_api: bool = False,
    bounded_calls: bool = True,
    apps: Sequence[JobTypes] = (),
) -> AsyncIterator[Services]:
    """Open the pool and clients for one process and close them on exit.

    `serves_api`: requests wait at most `JOBRELAY_API_DB_WAIT_S` for a connection (then 503),
    instead of the connect-timeout-based wait that suits background loops.
    `bounded_calls=False`: no JOBRELAY_DB_CALL_DEADLINE_S on borrowed connections (the
    `ops` commands, whose conversions run long statements on purpose).
    `apps`: job types already loaded, beside those the settings name (the pytest plugin's).
    """
    pool = await open_pool(
        dsn,
        **settings.db.pool_options(
            wait_s=settings.api.db_wait_s if serves_api else None, bounded_calls=bounded_calls
        ),
    )
    issuer = local_issuer(settings) if settings.auth.mode == "local" else None
    aws = endpoint or aws_endpoint(settings)
    # One SQS client for the Code2WF dispatch of this process, opened on its first send.
    sender = SqsSender(aws, queue_name=settings.sqs.queue_name)
    jobs = jobs_service(settings, pool, sender, apps)
    tenancy = Tenancy(pool)
    try:
        yield Services(
            settings=settings,
            pool=pool,
            aws=aws,
            jobs=jobs,
            workflows=WorkflowsService(
                pool, jobs.enqueuer, max_steps=settings.jobs.workflows_max_steps
            ),
            media=MediaService(pool),
            tokens=token_verifier(settings, issuer),
            tenancy=tenancy,
            batches=BatchService(pool, BatchLimits.from_settings(settings.batches, settings.sqs)),
            children=ChildService(pool),
            worker_webhooks=WorkerWebhooks(
                pool, webhook_verifier(settings), lock_timeout_s=settings.api.lock_timeout_s
            ),
            code2wf=Code2WfService(pool, jobs),
            console=ConsoleService(pool, jobs.global_caps),
            idempotency=IdempotentRequests(pool),
            local_issuer=issuer,
        )
    finally:
        await sender.aclose()
        await pool.close()


def webhook_verifier(settings: Settings) -> WebhookVerifier:
    """Verifies worker webhooks against every configured secret (rotation)."""
    return WebhookVerifier([secret.get_secret_value() for secret in settings.webhooks.secrets])


def local_issuer(settings: Settings) -> LocalIssuer:
    """The development token issuer whose key pair lives in the data directory."""
    require_own_data_dir(settings)
    return LocalIssuer(settings.data_dir, admin_group=settings.auth.admin_group)


def token_verifier(settings: Settings, issuer: LocalIssuer | None) -> TokenVerifier:
    """The bearer-token verifier: the local issuer's keys, or the Cognito pool's JWKS."""
    if settings.auth.mode == "local":
        assert issuer is not None
        local = issuer

        async def fetch_local() -> dict[str, object]:
            return local.jwks()

        policy = TokenPolicy(
            issuer=LOCAL_ISSUER,
            client_ids=frozenset({LOCAL_CLIENT_ID, *settings.auth.client_ids}),
            token_uses=frozenset(settings.auth.token_uses),
            admin_group=settings.auth.admin_group,
            leeway_s=settings.auth.leeway_s,
        )
        return TokenVerifier(policy, JwksCache(fetch_local, min_refresh_interval_s=0))
    cognito_issuer = settings.cognito_issuer
    if cognito_issuer is None or not settings.auth.client_ids:
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
        # The console's app client (its Hosted UI login) is accepted like the API's clients.
        client_ids=frozenset(
            [*settings.auth.client_ids, *filter(None, [settings.ui.cognito_client_id])]
        ),
        token_uses=frozenset(settings.auth.token_uses),
        admin_group=settings.auth.admin_group,
        leeway_s=settings.auth.leeway_s,
    )
    return TokenVerifier(
        policy,
        JwksCache(fetch_cognito, min_refresh_interval_s=settings.auth.jwks_refresh_interval_s),
    )
