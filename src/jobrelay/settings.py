"""Typed settings, read from the environment once by the composition root.

Every setting has an env var (`JOBRELAY_<NAME>`, except `DATABASE_URL`) and a default that
makes the local stack work with nothing configured. Nothing here runs at import time: call
`load_settings()` from `bootstrap` or a CLI entry point and pass the object down.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from jobrelay.domain.jobs_config import parse_class_counts, parse_failpoints


def _split_csv(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class Settings(BaseSettings):
    """All configuration of jobrelay; `make docs` renders it as docs/reference/settings.md."""

    model_config = SettingsConfigDict(
        env_prefix="JOBRELAY_",
        extra="ignore",
        populate_by_name=True,
    )

    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("DATABASE_URL", "JOBRELAY_DATABASE_URL"),
        description="PostgreSQL URL; unset means start the embedded server in JOBRELAY_DATA_DIR.",
    )
    database_direct_url: str | None = Field(
        default=None,
        description=(
            "A direct (session) PostgreSQL URL to the same database as DATABASE_URL, for "
            "LISTEN and migrations when DATABASE_URL goes through a transaction pooler; unset: "
            "DATABASE_URL serves both (through a transaction pooler: polling, no LISTEN)."
        ),
    )
    database_pooler: Literal["none", "transaction"] = Field(
        default="none",
        description=(
            "`transaction` when DATABASE_URL goes through a transaction pooler such as "
            "PgBouncer with pool_mode=transaction: no prepared statements, no session "
            "settings, LISTEN only over JOBRELAY_DATABASE_DIRECT_URL; startup refuses (exit 2) "
            "a DATABASE_URL whose clients each keep their own server session."
        ),
    )
    data_dir: Path = Field(
        default=Path(".jobrelay"),
        description="Local state: embedded PostgreSQL data, local token issuer keys.",
    )
    db_pool_min: int = Field(default=1, ge=0, description="Connections kept open per process.")
    db_pool_max: int = Field(default=10, ge=1, description="Connection cap per process.")
    db_connect_timeout_s: float = Field(
        default=5.0, gt=0, description="How long one connection attempt may take, in seconds."
    )

    api_host: str = Field(default="127.0.0.1", description="API listen address.")
    api_port: int = Field(default=8000, ge=0, le=65535, description="API port.")

    aws_endpoint_url: str | None = Field(
        default=None, description="SQS/S3 endpoint; unset locally means start the emulator."
    )
    aws_region: str = Field(default="us-east-1", description="AWS region of SQS and S3.")
    emulator_port: int = Field(
        default=0, ge=0, le=65535, description="Emulator port; 0 picks a free one."
    )
    sqs_queue_name: str = Field(default="jobrelay-work", description="The work queue.")
    sqs_dlq_name: str = Field(
        default="jobrelay-work-dlq", description="Dead-letter queue of the work queue."
    )
    sqs_max_receive_count: int = Field(
        default=5, ge=1, description="Receives before a message moves to the dead-letter queue."
    )
    sqs_message_limit_bytes: int = Field(
        default=256 * 1024,
        ge=1024,
        le=1024 * 1024,
        description="Message size limit in UTF-8 bytes (SQS allows up to 1 MiB).",
    )
    s3_bucket: str = Field(default="jobrelay-results", description="Bucket of worker results.")

    webhook_secrets: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=lambda: [SecretStr("whsec_bG9jYWwtZGV2ZWxvcG1lbnQtc2VjcmV0LTAwMQ==")],
        description="Standard Webhooks secrets, comma separated; the first signs, all verify.",
    )

    auth_mode: Literal["local", "cognito"] = Field(
        default="local",
        description="local: tokens from the local issuer; cognito: a Cognito user pool.",
    )
    cognito_user_pool_id: str | None = Field(
        default=None, description="The Cognito user pool, e.g. eu-west-1_AbC123."
    )
    cognito_region: str | None = Field(
        default=None, description="Region of the user pool; unset: JOBRELAY_AWS_REGION."
    )
    auth_client_ids: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="App client ids whose tokens are accepted (csv); local mode: jobrelay-local.",
    )
    auth_token_uses: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["access"], description="Accepted token_use values (csv)."
    )
    auth_admin_group: str = Field(
        default="jobrelay-admins",
        description="cognito:groups entry that grants the admin role (jobs endpoints).",
    )
    auth_leeway_s: float = Field(
        default=10.0, ge=0, le=300, description="Clock leeway for exp/nbf/iat, in seconds."
    )
    auth_jwks_refresh_interval_s: float = Field(
        default=30.0, ge=0, description="An unknown kid refetches the JWKS at most this often."
    )
    api_max_body_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1024, description="Request body cap (larger is a 413)."
    )
    sqs_worker_webhook_url: str = Field(
        default="http://127.0.0.1:8000/v1/webhooks/worker",
        description="Where the SQS workers post their signed outcomes.",
    )
    sqs_worker_concurrency: int = Field(
        default=8, ge=1, le=256, description="Messages one sqs-worker process works at once."
    )
    sqs_worker_visibility_timeout_s: int = Field(
        default=30, ge=1, le=43200, description="Visibility timeout a worker asks for per receive."
    )
    sqs_worker_heartbeat_s: float = Field(
        default=10.0, gt=0, description="How often an in-flight message's visibility is extended."
    )
    sqs_worker_poll_wait_s: int = Field(default=10, ge=0, le=20, description="SQS long poll.")
    sqs_worker_handler_timeout_s: float = Field(
        default=120.0, gt=0, description="A handler running longer counts as a transient failure."
    )
    sqs_worker_webhook_timeout_s: float = Field(
        default=10.0, gt=0, description="Timeout of one webhook request."
    )
    sqs_worker_webhook_retry_s: float = Field(
        default=120.0, ge=0, description="How long one message's webhook is retried (5xx, 429)."
    )
    sqs_worker_shutdown_grace_s: float = Field(
        default=20.0,
        ge=0,
        description="On SIGTERM/SIGINT, how long in-flight messages may finish before they are "
        "made visible again.",
    )
    sqs_worker_file_root: Path | None = Field(
        default=None, description="Directory file:// page URLs may read from; unset refuses them."
    )
    sqs_worker_fetch_max_bytes: int = Field(
        default=5 * 1024 * 1024, ge=1024, description="Largest page a Page Import fetch reads."
    )

    batch_max_items: int = Field(
        default=10_000, ge=1, description="Items per batch; more is a 422."
    )
    relay_lease_s: float = Field(
        default=90.0, gt=0, description="How long a relay's claim on an item lasts."
    )
    relay_claim_size: int = Field(
        default=100, ge=1, le=10_000, description="Items one relay loop claims per statement."
    )
    relay_workers: int = Field(
        default=4, ge=1, le=64, description="Claim-send-record loops per relay process."
    )
    relay_max_in_flight: int = Field(
        default=16, ge=1, le=256, description="SendMessageBatch calls in flight per relay process."
    )
    relay_poll_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="How often an idle relay looks for due items (NOTIFY wakes it sooner).",
    )
    relay_retry_delay_s: float = Field(
        default=2.0,
        ge=0,
        description="Delay before a failed dispatch is retried, times the attempt.",
    )
    relay_metrics_port: int = Field(
        default=0, ge=0, le=65535, description="Port of the relay's /metrics; 0 serves none."
    )

    app: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Job types of your own: package.module:attribute (a JobTypes), "
        "comma-separated; the worker's and the API's --app add to it.",
    )
    diag_jobs_enabled: bool = Field(default=True, description="Enable diag.* job types.")
    jobs_payload_limit_bytes: int = Field(
        default=256 * 1024, ge=1, description="Largest job payload, in UTF-8 bytes of JSON."
    )
    jobs_lease_s: float = Field(
        default=30.0, gt=0, description="Lease of a claimed job; heartbeats renew it."
    )
    jobs_rescue_interval_s: float = Field(
        default=5.0, gt=0, description="How often a worker reclaims expired leases."
    )
    worker_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="Total jobs run at once per worker; alone, every class shares them.",
    )
    worker_slots: str = Field(
        default="",
        description="Jobs run at once per concurrency class, e.g. ai=2,default=8; "
        "overrides the slots the job types declare.",
    )
    worker_poll_interval_s: float = Field(
        default=0.25,
        gt=0,
        description="Worker wait between claims when idle (LISTEN/NOTIFY wakes it sooner).",
    )
    worker_listen: bool = Field(default=True, description="Wake workers by LISTEN/NOTIFY.")
    worker_prefetch: int = Field(
        default=0, ge=0, description="Jobs a worker claims ahead of its free slots."
    )
    worker_shutdown_grace_s: float = Field(
        default=10.0, ge=0, description="On SIGTERM/SIGINT, how long running jobs may finish."
    )
    worker_metrics_port: int | None = Field(
        default=None, ge=0, le=65535, description="Serve /metrics on this port (0: any free)."
    )
    jobs_global_caps: str = Field(
        default="", description="Running jobs per class across all workers, e.g. ai=4."
    )
    jobs_reconcile_interval_s: float = Field(
        default=10.0, gt=0, description="How often a worker repairs parents left behind."
    )
    jobs_prune_interval_s: float = Field(
        default=300.0, gt=0, description="How often a worker prunes finished jobs."
    )
    jobs_retention_s: float = Field(
        default=7 * 24 * 3600.0,
        ge=0,
        description="Finished jobs older than this are pruned; 0 keeps them forever.",
    )
    jobs_failpoints: str = Field(
        default="", description="Injected failures for drills and tests, e.g. name=2,name."
    )
    log_format: Literal["auto", "json", "console"] = Field(
        default="auto", description="auto: console on a terminal, else JSON."
    )
    log_level: str = Field(default="INFO", description="Log level.")

    @field_validator("webhook_secrets", "auth_client_ids", "auth_token_uses", "app", mode="before")
    @classmethod
    def _secrets_from_csv(cls, value: object) -> object:
        return _split_csv(value)

    @field_validator("worker_slots")
    @classmethod
    def _valid_slots(cls, value: str) -> str:
        parse_class_counts(value, what="JOBRELAY_WORKER_SLOTS", minimum=0)
        return value

    @field_validator("jobs_global_caps")
    @classmethod
    def _valid_caps(cls, value: str) -> str:
        parse_class_counts(value, what="JOBRELAY_JOBS_GLOBAL_CAPS", minimum=1)
        return value

    @field_validator("jobs_failpoints")
    @classmethod
    def _valid_failpoints(cls, value: str) -> str:
        parse_failpoints(value)
        return value

    @model_validator(mode="after")
    def _heartbeat_inside_the_visibility_timeout(self) -> Settings:
        if self.sqs_worker_heartbeat_s >= self.sqs_worker_visibility_timeout_s:
            raise ValueError(
                "JOBRELAY_SQS_WORKER_HEARTBEAT_S must be shorter than "
                "JOBRELAY_SQS_WORKER_VISIBILITY_TIMEOUT_S"
            )
        return self

    @property
    def cognito_issuer(self) -> str | None:
        """`https://cognito-idp.<region>.amazonaws.com/<pool id>` when a pool is configured."""
        if not self.cognito_user_pool_id:
            return None
        region = self.cognito_region or self.aws_region
        return f"https://cognito-idp.{region}.amazonaws.com/{self.cognito_user_pool_id}"

    @property
    def pgdata_dir(self) -> Path:
        """Where the embedded PostgreSQL keeps its cluster."""
        return self.data_dir.resolve() / "pgdata"


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment (and explicit overrides, e.g. CLI flags)."""
    return Settings(**overrides)  # type: ignore[arg-type]
