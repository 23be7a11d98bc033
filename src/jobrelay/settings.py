"""Typed settings, read from the environment once by the composition root.

Every setting has an env var (`JOBRELAY_<NAME>`, except `DATABASE_URL`) and a default that
makes the local stack work with nothing configured. Nothing here runs at import time: call
`load_settings()` from `bootstrap` or a CLI entry point and pass the object down.

The settings are grouped by the part that reads them, one model per group: `settings.db`,
`settings.api`, `settings.relay`, `settings.worker`, ... (`env` and `data_dir` belong to the
whole process and sit on `Settings` itself). A group's field has its flat name as validation
alias, derived from the group's prefix and the field's name (`group_config("db")`:
`settings.db.pool_max` is `db_pool_max`) unless the field declares its own: the variable is
`JOBRELAY_` + that name upper-cased, and a validation error names it (`db.db_pool_max`).
How they are read is `jobrelay.settings_sources` (the loader: every group's variables in one
pass over the environment, secret files, values given in code); `setting_fields()` lists
every setting with its variables (for the reference page, the CLI's error lines, the secret
files).

Secrets (`DATABASE_URL` and every `SecretStr` field) may also be given as a file, the
container convention: `<VARIABLE>_FILE` names a file whose content, stripped, is the value.
Which defaults production refuses is decided in `jobrelay.bootstrap.environment`.

Each part builds its configuration from its group: `RelayConfig.from_settings(settings.relay,
settings.sqs)`, `BatchLimits.from_settings(...)`, the SQS workers' `WorkerConfig.from_settings`.
The jobs engine and the database pool are libraries that never import this module, so their
groups hand them keyword arguments as typed dicts instead: `settings.worker.worker_config()`
and `settings.jobs.worker_config()` for `jobrelay.jobs.WorkerConfig`,
`settings.db.pool_options()` for `jobrelay.db.pool.open_pool`; mypy checks every key and
type against the signature they are unpacked into.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict
from urllib.parse import urlsplit

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from jobrelay.domain.fair_dispatch import parse_organization_weights
from jobrelay.domain.jobs_config import (
    Rate,
    parse_class_counts,
    parse_class_rates,
    parse_failpoints,
    parse_type_retention,
)
from jobrelay.settings_sources import (
    GroupedEnvSource,
    KeysByAlias,
    SecretFileSource,
    SettingField,
    SettingsGroup,
    fields_of,
    group_config,
    groups_of,
    setting_at,
)

Environment = Literal["development", "production"]

"""The prefix of every variable but `DATABASE_URL`'s."""

# Public (it is in the source): production refuses to start with it.
DEVELOPMENT_WEBHOOK_SECRET = "whsec_bG9jYWwtZGV2ZWxvcG1lbnQtc2VjcmV0LTAwMQ=="
# Public too: signs the console's session cookie in development; production refuses it.
DEVELOPMENT_UI_SESSION_SECRET = "jobrelay-local-development-ui-session-secret"

# libpq's key=value form: `host=db port=5432 password='a b'` (psycopg is not imported here:
# the SQS workers read these settings and must not depend on a database driver).
_CONNINFO_PAIRS = re.compile(r"\s*(?:\w+\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s']+)\s*)+")

# Marks a plain-text field as a secret: it may come from `<VARIABLE>_FILE` like SecretStr ones.
_SECRET: dict[str, Any] = {"secret": True}


def _split_csv(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


# A list setting is one comma-separated variable: "a, b" is ["a", "b"].
_CSV = BeforeValidator(_split_csv)


class PoolOptions(TypedDict):
    """The keyword arguments of `jobrelay.db.pool.open_pool` that the settings decide."""

    min_size: int
    max_size: int
    timeout_s: float
    wait_s: float | None
    transaction_pooler: bool
    idle_in_transaction_timeout_s: float
    call_deadline_s: float | None


class NetworkOptions(TypedDict):
    """The keyword arguments of `jobrelay.db.network.NetworkTimeouts`."""

    connect_timeout_s: float
    keepalives_idle_s: float
    keepalives_interval_s: float
    keepalives_count: int
    tcp_user_timeout_s: float


class DatabaseSettings(SettingsGroup):
    """The database: `DATABASE_URL` or the embedded server, and each process's pool."""

    model_config = group_config("db")

    url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("DATABASE_URL", "JOBRELAY_DATABASE_URL"),
        description="PostgreSQL URL; unset means start the embedded server in JOBRELAY_DATA_DIR "
        "(development only).",
        json_schema_extra=_SECRET,
    )
    direct_url: str | None = Field(
        validation_alias="database_direct_url",
        default=None,
        description=(
            "A direct (session) PostgreSQL URL to the same database as DATABASE_URL, for "
            "LISTEN and migrations when DATABASE_URL goes through a transaction pooler; unset: "
            "DATABASE_URL serves both (through a transaction pooler: polling, no LISTEN)."
        ),
    )
    pooler: Literal["none", "transaction"] = Field(
        validation_alias="database_pooler",
        default="none",
        description=(
            "`transaction` when DATABASE_URL goes through a transaction pooler such as "
            "PgBouncer with pool_mode=transaction: no prepared statements, no session "
            "settings, LISTEN only over JOBRELAY_DATABASE_DIRECT_URL; startup refuses (exit 2) "
            "a DATABASE_URL whose clients each keep their own server session."
        ),
    )
    pool_min: int = Field(
        default=1,
        ge=0,
        description="Connections kept open per process.",
    )
    pool_max: int = Field(
        default=10,
        ge=1,
        description="Connection cap of the pool of the API and the one-shot commands (a "
        "worker's pool is JOBRELAY_WORKER_DB_POOL_MAX).",
    )
    connect_timeout_s: float = Field(
        default=2.0,
        gt=0,
        allow_inf_nan=False,
        description="How long one connection attempt may take, in seconds (libpq rounds up "
        "to whole seconds, at least 2). Short, so that a process cut off from the database "
        "tries again often and is connected again soon after the network heals.",
    )
    keepalives_idle_s: float = Field(
        default=1.0,
        gt=0,
        allow_inf_nan=False,
        description="A database connection silent this long gets a TCP keepalive probe "
        "(whole seconds): a peer that stopped answering is found even while the connection "
        "waits for a reply.",
    )
    keepalives_interval_s: float = Field(
        default=1.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds between unanswered keepalive probes (whole seconds).",
    )
    keepalives_count: int = Field(
        default=3,
        ge=1,
        description="Unanswered keepalive probes that end a database connection.",
    )
    tcp_user_timeout_s: float = Field(
        default=2.0,
        gt=0,
        allow_inf_nan=False,
        description="A database connection whose sent data or keepalive probe stays "
        "unacknowledged this long is ended by the kernel (Linux TCP_USER_TIMEOUT): a silent "
        "network fails the call in about this time instead of about 15 minutes.",
    )
    call_deadline_s: float = Field(
        default=30.0,
        gt=0,
        allow_inf_nan=False,
        description="The longest a long-running process (API, worker, relay) may hold a "
        "pooled connection for one call; past it the connection is cut and discarded (a "
        "server that acknowledges packets but never answers). One-shot `ops` commands have "
        "none.",
    )
    idle_in_transaction_timeout_s: float = Field(
        default=120.0,
        ge=0,
        description="The server ends a session of this process left idle inside a transaction "
        "this long (a frozen process then holds no row locks and no xmin horizon); 0 turns it "
        "off. Direct connections only: through a transaction pooler set "
        "idle_in_transaction_session_timeout on the role instead.",
    )

    @field_validator("url")
    @classmethod
    def _valid_database_url(cls, value: str | None) -> str | None:
        if value:
            problem = database_url_problem(value)
            if problem:
                # The value is not echoed: it may hold a password.
                raise ValueError(f"malformed PostgreSQL URL: {problem}")
        return value

    @property
    def through_transaction_pooler(self) -> bool:
        """True when DATABASE_URL is declared to go through a transaction pooler."""
        return bool(self.url) and self.pooler == "transaction"

    def pool_options(
        self,
        *,
        min_size: int | None = None,
        max_size: int | None = None,
        wait_s: float | None = None,
        bounded_calls: bool = True,
    ) -> PoolOptions:
        """`open_pool`'s keyword arguments for one process; `min_size` and `max_size`
        default to JOBRELAY_DB_POOL_MIN and JOBRELAY_DB_POOL_MAX, `wait_s` to none (the
        pool's own connect-timeout-based wait). `bounded_calls=False` (commands that run
        long statements on purpose) lends connections without JOBRELAY_DB_CALL_DEADLINE_S."""
        return PoolOptions(
            min_size=self.pool_min if min_size is None else min_size,
            max_size=self.pool_max if max_size is None else max_size,
            timeout_s=self.connect_timeout_s,
            wait_s=wait_s,
            transaction_pooler=self.through_transaction_pooler,
            idle_in_transaction_timeout_s=self.idle_in_transaction_timeout_s,
            call_deadline_s=self.call_deadline_s if bounded_calls else None,
        )

    def network_options(self) -> NetworkOptions:
        """`NetworkTimeouts`' keyword arguments: how long a connection may wait on a silent
        network."""
        return NetworkOptions(
            connect_timeout_s=self.connect_timeout_s,
            keepalives_idle_s=self.keepalives_idle_s,
            keepalives_interval_s=self.keepalives_interval_s,
            keepalives_count=self.keepalives_count,
            tcp_user_timeout_s=self.tcp_user_timeout_s,
        )


class ApiSettings(SettingsGroup):
    """The HTTP API: where it listens, how long a request waits, its /metrics."""

    model_config = group_config("api")

    host: str = Field(default="127.0.0.1", description="API listen address.")
    port: int = Field(default=8000, ge=0, le=65535, description="API port.")
    db_wait_s: float = Field(
        default=1.0,
        gt=0,
        description="How long an API request waits for a database connection before it "
        "answers 503 with Retry-After (a database outage is never a hang).",
    )
    lock_timeout_s: float = Field(
        default=0.3,
        gt=0,
        allow_inf_nan=False,
        description="How long a statement of a request's transaction waits for a row another "
        "transaction holds (a webhook's child or batch item, a cancelled job or its parent); "
        "past it the request answers 503 row-locked with Retry-After and stores nothing, "
        "instead of hanging.",
    )
    metrics_token: SecretStr | None = Field(
        default=None,
        description="Bearer token Prometheus presents on the API's /metrics; unset, /metrics "
        "needs an admin's JWT like the console endpoints.",
    )
    metrics_timeout_s: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="How long one /metrics scrape may read the database; groups not read by "
        "then are left out (jobrelay_db_scrape_complete 0), nothing read at all is a 503.",
    )
    max_body_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        description="Request body cap (larger is a 413).",
    )


class AwsSettings(SettingsGroup):
    """SQS and S3: the endpoint (or the local emulator) and the results bucket."""

    model_config = group_config("aws")

    endpoint_url: str | None = Field(
        default=None,
        description="SQS/S3 endpoint; unset locally means start the emulator.",
    )
    region: str = Field(default="us-east-1", description="AWS region of SQS and S3.")
    emulator_port: int = Field(
        validation_alias="emulator_port",
        default=0,
        ge=0,
        le=65535,
        description="Emulator port; 0 picks a free one.",
    )
    s3_bucket: str = Field(
        validation_alias="s3_bucket",
        default="jobrelay-results",
        description="Bucket of worker results.",
    )
    connect_timeout_s: float = Field(
        default=2.0,
        gt=0,
        allow_inf_nan=False,
        description="How long opening a connection to SQS or S3 may take, in seconds.",
    )
    read_timeout_s: float = Field(
        default=10.0,
        gt=0,
        allow_inf_nan=False,
        description="How long an SQS or S3 call may wait for bytes of its answer, in seconds "
        "(a long poll's own wait comes on top): a silent endpoint fails a call in this time.",
    )


class SqsSettings(SettingsGroup):
    """The work queue, its dead-letter queue and its message size limit."""

    model_config = group_config("sqs")

    queue_name: str = Field(default="jobrelay-work", description="The work queue.")
    dlq_name: str = Field(
        default="jobrelay-work-dlq",
        description="Dead-letter queue of the work queue.",
    )
    max_receive_count: int = Field(
        default=5,
        ge=1,
        description="Receives before a message moves to the dead-letter queue.",
    )
    message_limit_bytes: int = Field(
        default=256 * 1024,
        ge=1024,
        le=1024 * 1024,
        description="Message size limit in UTF-8 bytes (SQS allows up to 1 MiB).",
    )


class WebhookSettings(SettingsGroup):
    """Standard Webhooks: the secrets the SQS workers sign with and the API verifies."""

    model_config = group_config("webhook")

    secrets: Annotated[list[SecretStr], _CSV] = Field(
        default_factory=lambda: [SecretStr(DEVELOPMENT_WEBHOOK_SECRET)],
        description="Standard Webhooks secrets, comma separated; the first signs, all verify.",
    )


class AuthSettings(SettingsGroup):
    """Bearer tokens: the local issuer or a Cognito user pool, and the admin group."""

    model_config = group_config("auth")

    mode: Literal["local", "cognito"] = Field(
        default="local",
        description="local: tokens from the local issuer; cognito: a Cognito user pool.",
    )
    cognito_user_pool_id: str | None = Field(
        validation_alias="cognito_user_pool_id",
        default=None,
        description="The Cognito user pool, e.g. eu-west-1_AbC123.",
    )
    cognito_region: str | None = Field(
        validation_alias="cognito_region",
        default=None,
        description="Region of the user pool; unset: JOBRELAY_AWS_REGION.",
    )
    client_ids: Annotated[list[str], _CSV] = Field(
        default_factory=list,
        description="App client ids whose tokens are accepted (csv); local mode: jobrelay-local.",
    )
    token_uses: Annotated[list[str], _CSV] = Field(
        default_factory=lambda: ["access"],
        description="Accepted token_use values (csv).",
    )
    admin_group: str = Field(
        default="jobrelay-admins",
        description="cognito:groups entry that grants the admin role (jobs endpoints).",
    )
    leeway_s: float = Field(
        default=10.0,
        ge=0,
        le=300,
        description="Clock leeway for exp/nbf/iat, in seconds.",
    )
    jwks_refresh_interval_s: float = Field(
        default=30.0,
        ge=0,
        description="An unknown kid refetches the JWKS at most this often.",
    )


class UiSettings(SettingsGroup):
    """The console (/ui): its session cookie and its Cognito Hosted UI login."""

    model_config = group_config("ui")

    session_secret: SecretStr = Field(
        default=SecretStr(DEVELOPMENT_UI_SESSION_SECRET),
        description="Signs the console's (/ui) session cookie (itsdangerous); production "
        "refuses the built-in development value.",
    )
    session_ttl_s: int = Field(
        default=8 * 3600,
        ge=60,
        le=7 * 86400,
        description="How long a console session (its cookie and the token inside) lasts.",
    )
    cognito_domain: str | None = Field(
        default=None,
        description="Base URL of the Cognito Hosted UI (the user pool's domain), e.g. "
        "https://myapp.auth.eu-west-1.amazoncognito.com: with JOBRELAY_AUTH_MODE=cognito the "
        "console's login is the authorization-code flow with PKCE through its "
        "/oauth2/authorize and /oauth2/token (https; http only on a loopback host).",
    )
    cognito_client_id: str | None = Field(
        default=None,
        description="The Cognito app client of the console's login (its tokens are accepted "
        "like JOBRELAY_AUTH_CLIENT_IDS'); allowed callback URL: JOBRELAY_UI_COGNITO_REDIRECT_URL, "
        "allowed sign-out URL: the same origin's /ui/logged-out.",
    )
    cognito_client_secret: SecretStr | None = Field(
        default=None,
        description="The console app client's secret, when it has one (sent with HTTP Basic "
        "to /oauth2/token); unset: a public client (PKCE only).",
    )
    cognito_redirect_url: str | None = Field(
        default=None,
        description="The console's callback as registered in the app client, "
        "https://<api host>/ui/auth/callback; unset (development only): derived from the "
        "request's host.",
    )

    @field_validator("cognito_domain", "cognito_redirect_url")
    @classmethod
    def _https_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value.strip())
        loopback = parts.hostname in {"127.0.0.1", "localhost", "::1"}
        if not parts.hostname or not (
            parts.scheme == "https" or (parts.scheme == "http" and loopback)
        ):
            raise ValueError("give an https:// URL (http:// only on a loopback host)")
        return value.strip().rstrip("/")


class SqsWorkerSettings(SettingsGroup):
    """The reference SQS workers (`jobrelay sqs-worker`): receive, work, post outcomes."""

    model_config = group_config("sqs_worker")

    webhook_url: str = Field(
        default="http://127.0.0.1:8000/v1/webhooks/worker",
        description="Where the SQS workers post their signed outcomes.",
    )
    concurrency: int = Field(
        default=8,
        ge=1,
        le=256,
        description="Messages one sqs-worker process works at once.",
    )
    visibility_timeout_s: int = Field(
        default=30,
        ge=1,
        le=43200,
        description="Visibility timeout a worker asks for per receive.",
    )
    heartbeat_s: float = Field(
        default=10.0,
        gt=0,
        description="How often an in-flight message's visibility is extended.",
    )
    poll_wait_s: int = Field(
        default=10,
        ge=0,
        le=20,
        description="SQS long poll.",
    )
    handler_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="A handler running longer counts as a transient failure.",
    )
    webhook_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Timeout of one webhook request.",
    )
    webhook_retry_s: float = Field(
        default=120.0,
        ge=0,
        description="How long one message's webhook is retried (5xx, 429).",
    )
    shutdown_grace_s: float = Field(
        default=20.0,
        ge=0,
        description="On SIGTERM/SIGINT, how long in-flight messages may finish before they are "
        "made visible again.",
    )
    file_root: Path | None = Field(
        default=None,
        description="Directory file:// page URLs may read from; unset refuses them.",
    )
    fetch_max_bytes: int = Field(
        default=5 * 1024 * 1024,
        ge=1024,
        description="Largest page a Page Import fetch reads.",
    )

    @model_validator(mode="after")
    def _heartbeat_inside_the_visibility_timeout(self) -> SqsWorkerSettings:
        if self.heartbeat_s >= self.visibility_timeout_s:
            raise ValueError(
                "JOBRELAY_SQS_WORKER_HEARTBEAT_S must be shorter than "
                "JOBRELAY_SQS_WORKER_VISIBILITY_TIMEOUT_S"
            )
        return self


class BatchSettings(SettingsGroup):
    """Batches: their size and how a cancel is carried out."""

    model_config = group_config("batch")

    max_items: int = Field(
        default=10_000,
        ge=1,
        description="Items per batch; more is a 422.",
    )
    cancel_inline_max: int = Field(
        default=5_000,
        ge=0,
        description="A cancel with at most this many processing items marks them in its own "
        "transaction; above it the cancel answers 202 at once and the relay finishes it.",
    )


class RelaySettings(SettingsGroup):
    """The batch relay (`jobrelay relay`): claims, sends, windows per organization."""

    model_config = group_config("relay")

    lease_s: float = Field(
        default=90.0,
        gt=0,
        description="How long a relay's claim on an item lasts.",
    )
    send_timeout_s: float = Field(
        default=10.0,
        gt=0,
        allow_inf_nan=False,
        description="How long one SendMessageBatch call may take; one that does not answer "
        "in time is an outage of the queue endpoint (its items are given back uncounted and "
        "the relay's circuit opens), not a failed attempt.",
    )
    lock_timeout_s: float = Field(
        default=0.3,
        gt=0,
        allow_inf_nan=False,
        description="How long a relay's write waits for a lock another transaction holds "
        "(beyond the items and batches it skips when locked); past it the rows are left for "
        "the next round, never failed and never charged an attempt.",
    )
    claim_size: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="Items one relay loop claims per statement.",
    )
    workers: int = Field(
        default=4,
        ge=1,
        le=64,
        description="Claim-send-record loops per relay process.",
    )
    db_pool_max: int | None = Field(
        default=None,
        ge=2,
        description="Connections of a relay's pool; unset: JOBRELAY_RELAY_WORKERS + 2. A relay "
        "also holds one LISTEN connection.",
    )
    max_in_flight: int = Field(
        default=16,
        ge=1,
        le=256,
        description="SendMessageBatch calls in flight per relay process.",
    )
    poll_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="How often an idle relay looks for due items (NOTIFY wakes it sooner).",
    )
    retry_delay_s: float = Field(
        default=2.0,
        ge=0,
        description="Delay before a failed dispatch is retried, times the attempt.",
    )
    metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port of the relay's /metrics; 0 serves none.",
    )
    org_window: int = Field(
        default=200,
        ge=1,
        description="Items one organization may have in flight (claimed or sent to SQS, child "
        "not yet terminal); the rest waits in the outbox, so another organization's batch is "
        "not queued behind it in SQS. Size it a few times what the consumers hold at once "
        "(SQS-worker processes x JOBRELAY_SQS_WORKER_CONCURRENCY): smaller starves the "
        "consumers of one organization, larger lets a newcomer wait behind more items.",
    )
    org_weights: str = Field(
        default="",
        description="Weights of organizations, e.g. 42=2,7=0.5: an organization's window and "
        "share of each claim are multiplied by its weight (a positive number; unlisted: 1).",
    )
    in_flight_expiry_s: float = Field(
        default=900.0,
        gt=0,
        description="A sent item whose child got no outcome for this long stops counting "
        "against its organization's window (a lost message does not hold a slot forever).",
    )
    window_poll_s: float = Field(
        default=0.05,
        gt=0,
        description="How soon an idle relay looks again while organizations with waiting "
        "items are at their window (finished items wake no relay).",
    )

    @field_validator("org_weights")
    @classmethod
    def _valid_weights(cls, value: str) -> str:
        _organization_weights(value)
        return value

    def organization_weights(self) -> tuple[tuple[int, float], ...]:
        """JOBRELAY_RELAY_ORG_WEIGHTS parsed: (organization id, weight) pairs."""
        return _organization_weights(self.org_weights)


class JobsWorkerOptions(TypedDict):
    """The keyword arguments of `jobrelay.jobs.WorkerConfig` that `settings.jobs` decides:
    the lease and the maintenance loops every worker runs."""

    lease_s: float
    rescue_interval_s: float
    reconcile_interval_s: float
    unserved_fail_after_s: float
    prune_interval_s: float
    retention_s: float | None
    retention_by_type: dict[str, int | None]
    prune_log_threshold: int
    schedule_grace_s: float
    workflow_retention_s: float | None
    workflow_max_steps: int


class JobsSettings(SettingsGroup):
    """The jobs engine: job types, payloads, leases, limits across workers, schedules,
    pruning."""

    model_config = group_config("jobs")

    app: Annotated[list[str], _CSV] = Field(
        validation_alias="app",
        default_factory=list,
        description="Job types of your own: package.module:attribute (a JobTypes), "
        "comma-separated; the worker's and the API's --app add to it.",
    )
    diag_enabled: bool = Field(
        validation_alias="diag_jobs_enabled", default=True, description="Enable diag.* job types."
    )
    payload_limit_bytes: int = Field(
        default=256 * 1024,
        ge=1,
        description="Largest job payload, in UTF-8 bytes of JSON.",
    )
    lease_s: float = Field(
        default=30.0,
        gt=0,
        description="Lease of a claimed job; heartbeats renew it.",
    )
    rescue_interval_s: float = Field(
        default=5.0,
        gt=0,
        description="How often a worker reclaims expired leases.",
    )
    global_caps: str = Field(
        default="",
        description="Running jobs per class across all workers, e.g. ai=4.",
    )
    rates: str = Field(
        default="",
        description="Job starts per class across all workers, e.g. ai=60/min,default=30/10s; "
        "adds to (and overrides) the rates the job types declare.",
    )
    reconcile_interval_s: float = Field(
        default=10.0,
        gt=0,
        description="How often a worker repairs parents left behind.",
    )
    unserved_fail_after_s: float = Field(
        default=3600.0,
        gt=0,
        allow_inf_nan=False,
        description="Workers claim only the job types they have handlers for; a pending job "
        "whose type no worker has had a handler for during this long (longer than any "
        "rolling deploy) is failed permanently as an unknown type, so its parent still ends.",
    )
    prune_interval_s: float = Field(
        default=300.0,
        gt=0,
        description="How often a worker applies the retention of finished jobs (creates the "
        "coming days' partitions, drops the partitions past their day, moves jobs finished "
        "in place).",
    )
    retention_s: float = Field(
        default=7 * 24 * 3600.0,
        ge=0,
        description="Finished jobs are kept at least this long, then dropped with the "
        "partition of their purge day (finish time plus this, as a UTC date); 0 keeps them "
        "forever. Every process finishing jobs reads the value the workers wrote; it applies "
        "to jobs that finish after the change.",
    )
    workflows_max_steps: int = Field(
        validation_alias="workflows_max_steps",
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Steps a workflow may have, those its running steps add included; a "
        "bigger workflow is a 422 and a fan-out past it fails the adding step.",
    )
    workflows_retention_s: float = Field(
        validation_alias="workflows_retention_s",
        default=7 * 24 * 3600.0,
        ge=0,
        description="An ended workflow is kept this long after its last step ended, its "
        "steps' results with it whatever the retention of their types, then pruned by the "
        "workers' maintenance; 0 keeps workflows forever.",
    )
    retention_by_type: str = Field(
        default="",
        description="Retention of the finished jobs of some types, overriding "
        "JOBRELAY_JOBS_RETENTION_S, e.g. audit.record=365d,media.process=2d (units s, m, h, "
        "d, w; forever keeps them). Applies to jobs that finish after the change.",
    )
    prune_log_threshold: int = Field(
        default=1000,
        ge=0,
        description="A prune pass deleting more finished jobs than this logs one warning with "
        "the count (smaller passes log at INFO).",
    )
    failpoints: str = Field(
        default="",
        description="Injected failures for drills and tests, e.g. name=2,name.",
    )
    schedules: str = Field(
        validation_alias="schedules",
        default="",
        description="Schedules as a JSON list of objects: name, cron (a 6th field is "
        "seconds), jobType, and optionally payload, timezone (default UTC), catchUp "
        "(one, the default, or skip); added to those the job types declare.",
    )
    schedules_grace_s: float = Field(
        validation_alias="schedules_grace_s",
        default=10.0,
        gt=0,
        description="A schedule tick a worker reaches later than this after it was due was "
        "missed (its catch-up policy applies); a younger one gets its own job.",
    )

    @field_validator("global_caps")
    @classmethod
    def _valid_caps(cls, value: str) -> str:
        _class_caps(value)
        return value

    @field_validator("rates")
    @classmethod
    def _valid_rates(cls, value: str) -> str:
        _class_rates(value)
        return value

    @field_validator("retention_by_type")
    @classmethod
    def _valid_retention(cls, value: str) -> str:
        _type_retention(value)
        return value

    @field_validator("failpoints")
    @classmethod
    def _valid_failpoints(cls, value: str) -> str:
        parse_failpoints(value)
        return value

    @field_validator("schedules")
    @classmethod
    def _valid_schedules(cls, value: str) -> str:
        if value.strip():
            try:
                entries = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"JOBRELAY_SCHEDULES is not JSON: {exc}") from None
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise ValueError("JOBRELAY_SCHEDULES must be a JSON list of objects")
        return value

    def class_caps(self) -> dict[str, int]:
        """JOBRELAY_JOBS_GLOBAL_CAPS parsed: running jobs per class across all workers."""
        return _class_caps(self.global_caps)

    def class_rates(self) -> dict[str, Rate]:
        """JOBRELAY_JOBS_RATES parsed: job starts per class across all workers."""
        return _class_rates(self.rates)

    def worker_config(self) -> JobsWorkerOptions:
        """This group's keyword arguments of `jobrelay.jobs.WorkerConfig`."""
        return JobsWorkerOptions(
            lease_s=self.lease_s,
            rescue_interval_s=self.rescue_interval_s,
            reconcile_interval_s=self.reconcile_interval_s,
            unserved_fail_after_s=self.unserved_fail_after_s,
            prune_interval_s=self.prune_interval_s,
            retention_s=self.retention_s or None,  # 0 keeps finished jobs forever
            retention_by_type=_type_retention(self.retention_by_type),
            prune_log_threshold=self.prune_log_threshold,
            schedule_grace_s=self.schedules_grace_s,
            workflow_retention_s=self.workflows_retention_s or None,  # 0 keeps them forever
            workflow_max_steps=self.workflows_max_steps,
        )


class WorkerOptions(TypedDict):
    """The keyword arguments of `jobrelay.jobs.WorkerConfig` that `settings.worker` decides
    on its own (slots, listening and what a command line overrides are bootstrap's)."""

    poll_interval_s: float
    prefetch: int
    fair_claims: bool
    hold_slot_until_recorded: bool
    lock_timeout_s: float
    result_limit_bytes: int


class WorkerSettings(SettingsGroup):
    """A jobs worker (`jobrelay worker`): slots, claiming, its pool, shutdown, /metrics."""

    model_config = group_config("worker")

    concurrency: int | None = Field(
        default=None,
        ge=1,
        description="Total jobs run at once per worker; alone, every class shares them.",
    )
    slots: str = Field(
        default="",
        description="Jobs run at once per concurrency class, e.g. ai=2,default=8; "
        "overrides the slots the job types declare.",
    )
    poll_interval_s: float = Field(
        default=0.25,
        gt=0,
        description="Worker wait between claims when idle (LISTEN/NOTIFY wakes it sooner).",
    )
    db_pool_max: int | None = Field(
        default=None,
        ge=3,
        description="Connections of a jobs worker's pool; unset: the larger of "
        "JOBRELAY_DB_POOL_MAX and the worker's total slots + 6, at most 50. A worker also "
        "holds one claim connection and one LISTEN connection.",
    )
    listen: bool = Field(default=True, description="Wake workers by LISTEN/NOTIFY.")
    prefetch: int = Field(
        default=0,
        ge=0,
        description="Jobs a worker claims ahead of its free slots.",
    )
    hold_slot_until_recorded: bool = Field(
        default=True,
        description="Bounded flush window: when more than 4 completions per slot wait for the "
        "batched flush, a finished job keeps its slot until its completion is recorded (at "
        "most one lease), so a killed worker re-runs at most 5 x slots finished handlers; "
        "while the flush keeps up nothing waits. False never waits (completions pile up "
        "without bound while the database is slow; more finished work re-run after a crash).",
    )
    shutdown_grace_s: float = Field(
        default=10.0,
        ge=0,
        description="On SIGTERM/SIGINT, how long running jobs may finish.",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Serve /metrics on this port (0: any free).",
    )
    fair_claims: bool = Field(
        default=True,
        description="Rotate claims across the fairness keys of a class (false: strict "
        "priority and arrival order).",
    )
    lock_timeout_s: float = Field(
        default=0.3,
        gt=0,
        allow_inf_nan=False,
        description="Longest a worker's transaction waits for a lock it does not take with "
        "SKIP LOCKED (a handler's fenced outputs, say); rows of running jobs and their "
        "parents are never waited for: a locked one is deferred and written when free.",
    )
    result_limit_bytes: int = Field(
        default=1024 * 1024,
        ge=1,
        description="Largest job result a worker stores (UTF-8 bytes of JSON); a larger "
        "one, or one PostgreSQL cannot store (a NUL character, a lone surrogate), fails the "
        "job permanently, naming why.",
    )

    @field_validator("slots")
    @classmethod
    def _valid_slots(cls, value: str) -> str:
        parse_class_counts(value, what="JOBRELAY_WORKER_SLOTS", minimum=0)
        return value

    def worker_config(self) -> WorkerOptions:
        """This group's keyword arguments of `jobrelay.jobs.WorkerConfig`."""
        return WorkerOptions(
            poll_interval_s=self.poll_interval_s,
            prefetch=self.prefetch,
            fair_claims=self.fair_claims,
            hold_slot_until_recorded=self.hold_slot_until_recorded,
            lock_timeout_s=self.lock_timeout_s,
            result_limit_bytes=self.result_limit_bytes,
        )


class LogSettings(SettingsGroup):
    """Logging of every process."""

    model_config = group_config("log")

    format: Literal["auto", "json", "console"] = Field(
        default="auto",
        description="auto: console on a terminal, else JSON.",
    )
    level: str = Field(default="INFO", description="Log level.")


class TracingSettings(SettingsGroup):
    """Traces (OpenTelemetry, the `jobrelay[otel]` extra): the standard `OTEL_*` variables.

    Off unless an exporter is configured: `OTEL_TRACES_EXPORTER` (`otlp` or `console`) or an
    OTLP endpoint; `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` keeps it off. The
    SDK reads the other standard variables itself (`OTEL_EXPORTER_OTLP_HEADERS`,
    `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`,
    `OTEL_RESOURCE_ATTRIBUTES`, ...)."""

    sdk_disabled: bool = Field(
        default=False,
        validation_alias=AliasChoices("OTEL_SDK_DISABLED"),
        description="true turns tracing off whatever else is set.",
    )
    exporter: Literal["otlp", "console", "none"] | None = Field(
        default=None,
        validation_alias=AliasChoices("OTEL_TRACES_EXPORTER"),
        description="otlp (OTLP over HTTP/protobuf), console (spans as JSON on stdout) or "
        "none; unset: otlp when an OTLP endpoint is set, else no tracing.",
    )
    otlp_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT"),
        description="OTLP/HTTP base URL, e.g. http://collector:4318 (spans go to its "
        "/v1/traces); setting it turns tracing on.",
    )
    otlp_traces_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        description="Full OTLP/HTTP URL for spans (wins over OTEL_EXPORTER_OTLP_ENDPOINT); "
        "setting it turns tracing on.",
    )
    otlp_protocol: Literal["http/protobuf"] | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"
        ),
        description="Only http/protobuf is supported (the extra installs the HTTP exporter); "
        "grpc is refused at startup.",
    )
    service_name: str | None = Field(
        default=None,
        validation_alias=AliasChoices("OTEL_SERVICE_NAME"),
        description="service.name of the spans; unset: jobrelay-api, jobrelay-worker, "
        "jobrelay-relay, jobrelay-sqs-worker, or jobrelay for `jobrelay up`.",
    )

    @property
    def enabled(self) -> bool:
        """Whether these variables turn tracing on."""
        if self.sdk_disabled or self.exporter == "none":
            return False
        return self.exporter is not None or bool(self.otlp_endpoint or self.otlp_traces_endpoint)


def _class_caps(text: str) -> dict[str, int]:
    return parse_class_counts(text, what="JOBRELAY_JOBS_GLOBAL_CAPS", minimum=1)


def _class_rates(text: str) -> dict[str, Rate]:
    return parse_class_rates(text, what="JOBRELAY_JOBS_RATES")


def _type_retention(text: str) -> dict[str, int | None]:
    return parse_type_retention(text, what="JOBRELAY_JOBS_RETENTION_BY_TYPE")


def _organization_weights(text: str) -> tuple[tuple[int, float], ...]:
    return parse_organization_weights(text, what="JOBRELAY_RELAY_ORG_WEIGHTS")


DEFAULT_DATA_DIR = "$XDG_STATE_HOME/jobrelay"
"""The default data directory, as the settings reference shows it."""


def expand_data_dir(path: Path) -> Path:
    """`path` with `~` and environment variables expanded; `$XDG_STATE_HOME` stands for
    `~/.local/state` when that variable is unset or empty (the XDG base directory rule)."""
    text = str(path)
    if "XDG_STATE_HOME" in text and not os.environ.get("XDG_STATE_HOME"):
        text = text.replace("${XDG_STATE_HOME}", "~/.local/state")
        text = text.replace("$XDG_STATE_HOME", "~/.local/state")
    return Path(os.path.expandvars(text)).expanduser()


class Settings(BaseSettings):
    """All configuration of jobrelay, one group per part; `make docs` renders it as
    docs/reference/settings.md."""

    model_config = SettingsConfigDict(extra="forbid", populate_by_name=True)

    env: Environment = Field(
        default="development",
        description="production refuses development defaults at startup (built-in webhook "
        "secret, local auth, /dev routes, embedded PostgreSQL); unset, `jobrelay api`, "
        "`worker`, `relay` and `sqs-worker` started on their own run as production, `up`, "
        "`demo` and the other commands as development.",
    )
    data_dir: Path = Field(
        default=Path(DEFAULT_DATA_DIR),
        validate_default=True,
        description="Local state: embedded PostgreSQL data, local token issuer keys, the "
        "record of a running `jobrelay up`. The default is one per user "
        "(`~/.local/state/jobrelay` when XDG_STATE_HOME is unset), so every command finds "
        "the running stack from any folder; `.jobrelay` keeps it in the current folder.",
    )

    db: DatabaseSettings = Field(default_factory=DatabaseSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    aws: AwsSettings = Field(default_factory=AwsSettings)
    sqs: SqsSettings = Field(default_factory=SqsSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    ui: UiSettings = Field(default_factory=UiSettings)
    sqs_worker: SqsWorkerSettings = Field(default_factory=SqsWorkerSettings)
    batches: BatchSettings = Field(default_factory=BatchSettings)
    relay: RelaySettings = Field(default_factory=RelaySettings)
    jobs: JobsSettings = Field(default_factory=JobsSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)

    @field_validator("data_dir")
    @classmethod
    def _expand_data_dir(cls, value: Path) -> Path:
        return expand_data_dir(value)

    def updated(self, **groups: Mapping[str, object]) -> Settings:
        """A copy with fields of some groups replaced, e.g. a command-line option:
        `settings.updated(db={"pool_max": 30})`. Like `model_copy` the values are not
        validated and count as set; a name that is no field of its group raises ValueError."""
        update: dict[str, Any] = {}
        for name, values in groups.items():
            group = getattr(self, name)
            unknown = sorted(set(values) - set(type(group).model_fields))
            if unknown:
                raise ValueError(f"settings.{name} has no field {', '.join(unknown)}")
            update[name] = group.model_copy(update=values)
        return self.model_copy(update=update)

    @property
    def cognito_issuer(self) -> str | None:
        """`https://cognito-idp.<region>.amazonaws.com/<pool id>` when a pool is configured."""
        if not self.auth.cognito_user_pool_id:
            return None
        region = self.auth.cognito_region or self.aws.region
        return f"https://cognito-idp.{region}.amazonaws.com/{self.auth.cognito_user_pool_id}"

    @property
    def pgdata_dir(self) -> Path:
        """Where the embedded PostgreSQL keeps its cluster."""
        return self.data_dir.resolve() / "pgdata"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # `<VARIABLE>_FILE` ranks with the variable itself: both set is refused by the source.
        # The variables are read by `GroupedEnvSource` alone (pydantic-settings' own source
        # would read JOBRELAY_DB and friends as JSON for whole groups, a second way to set
        # them); no .env file and no secrets directory is configured, so their sources,
        # which read nothing, are left out.
        return (
            KeysByAlias(settings_cls, init_settings),
            SecretFileSource(settings_cls),
            GroupedEnvSource(settings_cls),
        )


def database_url_problem(url: str) -> str | None:
    """Why `url` is not a usable PostgreSQL connection string (None: it looks fine).

    Catches what libpq would only report at connect time, confusingly (a port that is not
    a number reads as a host that cannot be resolved), without naming the credentials.
    """
    if "://" not in url:
        if not _CONNINFO_PAIRS.fullmatch(url):
            return "neither a postgresql:// URL nor key=value pairs"
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        return f"the scheme is {parts.scheme!r}, expected postgresql://"
    try:
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError:
        port = parts.netloc.rpartition("@")[2].rpartition(":")[2]
        return f"the port {port!r} is not a number from 0 to 65535"
    return None


def setting_groups() -> dict[str, type[BaseModel]]:
    """The groups of `Settings` by field name, in declaration order."""
    return groups_of(Settings)


def setting_fields() -> tuple[SettingField, ...]:
    """Every setting, in declaration order: the fields of `Settings` itself, then each
    group's."""
    return fields_of(Settings)


def find_setting(loc: tuple[int | str, ...]) -> tuple[SettingField, tuple[int | str, ...]] | None:
    """The setting a validation error's location names and the rest of the location (an
    index in a list), or None when it names no single setting (a check across a group)."""
    return setting_at(Settings, loc)


def load_settings(*, default_env: Environment | None = None, **overrides: object) -> Settings:
    """Read settings from the environment (and explicit overrides, e.g. CLI flags: a group
    as a dict by field name, `load_settings(api={"port": 8001})`, merged into what the
    environment sets for that group).

    `default_env` is the environment when `JOBRELAY_ENV` (or an override) does not say:
    the long-running commands started on their own pass "production".
    """
    settings = Settings(**overrides)  # type: ignore[arg-type]
    if default_env is not None and "env" not in settings.model_fields_set:
        # Read once: the default takes the place of JOBRELAY_ENV (and counts as set, like it).
        settings = settings.model_copy(update={"env": default_env})
    return settings
