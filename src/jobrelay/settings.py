"""Typed settings, read from the environment once by the composition root.

Every setting has an env var (`JOBRELAY_<NAME>`, except `DATABASE_URL`) and a default that
makes the local stack work with nothing configured. Nothing here runs at import time: call
`load_settings()` from `bootstrap` or a CLI entry point and pass the object down.

Secrets (`DATABASE_URL` and every `SecretStr` field) may also be given as a file, the
container convention: `<VARIABLE>_FILE` names a file whose content, stripped, is the value
(`SecretFileSource`). Which defaults production refuses is decided in
`jobrelay.bootstrap.environment`.
"""

from __future__ import annotations

import json
import os
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from jobrelay.domain.errors import JobrelayError
from jobrelay.domain.fair_dispatch import parse_organization_weights
from jobrelay.domain.jobs_config import parse_class_counts, parse_class_rates, parse_failpoints

Environment = Literal["development", "production"]

# Public (it is in the source): production refuses to start with it.
DEVELOPMENT_WEBHOOK_SECRET = "whsec_bG9jYWwtZGV2ZWxvcG1lbnQtc2VjcmV0LTAwMQ=="
# Public too: signs the console's session cookie in development; production refuses it.
DEVELOPMENT_UI_SESSION_SECRET = "jobrelay-local-development-ui-session-secret"

# libpq's key=value form: `host=db port=5432 password='a b'` (psycopg is not imported here:
# the SQS workers read these settings and must not depend on a database driver).
_CONNINFO_PAIRS = re.compile(r"\s*(?:\w+\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s']+)\s*)+")

# Marks a plain-text field as a secret: it may come from `<VARIABLE>_FILE` like SecretStr ones.
_SECRET: dict[str, Any] = {"secret": True}


class SettingsFileError(JobrelayError):
    """A `<VARIABLE>_FILE` setting names a file that cannot be read (or clashes with
    `<VARIABLE>`); the message names both."""


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

    env: Environment = Field(
        default="development",
        description="production refuses development defaults at startup (built-in webhook "
        "secret, local auth, /dev routes, embedded PostgreSQL); unset, `jobrelay api`, "
        "`worker`, `relay` and `sqs-worker` started on their own run as production, `up`, "
        "`demo` and the other commands as development.",
    )

    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("DATABASE_URL", "JOBRELAY_DATABASE_URL"),
        description="PostgreSQL URL; unset means start the embedded server in JOBRELAY_DATA_DIR "
        "(development only).",
        json_schema_extra=_SECRET,
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
    db_pool_max: int = Field(
        default=10,
        ge=1,
        description="Connection cap of the pool of the API and the one-shot commands (a "
        "worker's pool is JOBRELAY_WORKER_DB_POOL_MAX).",
    )
    db_connect_timeout_s: float = Field(
        default=5.0, gt=0, description="How long one connection attempt may take, in seconds."
    )
    db_idle_in_transaction_timeout_s: float = Field(
        default=120.0,
        ge=0,
        description="The server ends a session of this process left idle inside a transaction "
        "this long (a frozen process then holds no row locks and no xmin horizon); 0 turns it "
        "off. Direct connections only: through a transaction pooler set "
        "idle_in_transaction_session_timeout on the role instead.",
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
        default_factory=lambda: [SecretStr(DEVELOPMENT_WEBHOOK_SECRET)],
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
    api_db_wait_s: float = Field(
        default=1.0,
        gt=0,
        description="How long an API request waits for a database connection before it "
        "answers 503 with Retry-After (a database outage is never a hang).",
    )
    api_metrics_token: SecretStr | None = Field(
        default=None,
        description="Bearer token Prometheus presents on the API's /metrics; unset, /metrics "
        "needs an admin's JWT like the console endpoints.",
    )
    api_metrics_timeout_s: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="How long one /metrics scrape may read the database; groups not read by "
        "then are left out (jobrelay_db_scrape_complete 0), nothing read at all is a 503.",
    )
    ui_session_secret: SecretStr = Field(
        default=SecretStr(DEVELOPMENT_UI_SESSION_SECRET),
        description="Signs the console's (/ui) session cookie (itsdangerous); production "
        "refuses the built-in development value.",
    )
    ui_session_ttl_s: int = Field(
        default=8 * 3600,
        ge=60,
        le=7 * 86400,
        description="How long a console session (its cookie and the token inside) lasts.",
    )
    ui_cognito_domain: str | None = Field(
        default=None,
        description="Base URL of the Cognito Hosted UI (the user pool's domain), e.g. "
        "https://myapp.auth.eu-west-1.amazoncognito.com: with JOBRELAY_AUTH_MODE=cognito the "
        "console's login is the authorization-code flow with PKCE through its "
        "/oauth2/authorize and /oauth2/token (https; http only on a loopback host).",
    )
    ui_cognito_client_id: str | None = Field(
        default=None,
        description="The Cognito app client of the console's login (its tokens are accepted "
        "like JOBRELAY_AUTH_CLIENT_IDS'); allowed callback URL: JOBRELAY_UI_COGNITO_REDIRECT_URL, "
        "allowed sign-out URL: the same origin's /ui/logged-out.",
    )
    ui_cognito_client_secret: SecretStr | None = Field(
        default=None,
        description="The console app client's secret, when it has one (sent with HTTP Basic "
        "to /oauth2/token); unset: a public client (PKCE only).",
    )
    ui_cognito_redirect_url: str | None = Field(
        default=None,
        description="The console's callback as registered in the app client, "
        "https://<api host>/ui/auth/callback; unset (development only): derived from the "
        "request's host.",
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
    batch_cancel_inline_max: int = Field(
        default=5_000,
        ge=0,
        description="A cancel with at most this many processing items marks them in its own "
        "transaction; above it the cancel answers 202 at once and the relay finishes it.",
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
    relay_db_pool_max: int | None = Field(
        default=None,
        ge=2,
        description="Connections of a relay's pool; unset: JOBRELAY_RELAY_WORKERS + 2. A relay "
        "also holds one LISTEN connection.",
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
    relay_org_window: int = Field(
        default=200,
        ge=1,
        description="Items one organization may have in flight (claimed or sent to SQS, child "
        "not yet terminal); the rest waits in the outbox, so another organization's batch is "
        "not queued behind it in SQS. Size it a few times what the consumers hold at once "
        "(SQS-worker processes x JOBRELAY_SQS_WORKER_CONCURRENCY): smaller starves the "
        "consumers of one organization, larger lets a newcomer wait behind more items.",
    )
    relay_org_weights: str = Field(
        default="",
        description="Weights of organizations, e.g. 42=2,7=0.5: an organization's window and "
        "share of each claim are multiplied by its weight (a positive number; unlisted: 1).",
    )
    relay_in_flight_expiry_s: float = Field(
        default=900.0,
        gt=0,
        description="A sent item whose child got no outcome for this long stops counting "
        "against its organization's window (a lost message does not hold a slot forever).",
    )
    relay_window_poll_s: float = Field(
        default=0.05,
        gt=0,
        description="How soon an idle relay looks again while organizations with waiting "
        "items are at their window (finished items wake no relay).",
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
    worker_db_pool_max: int | None = Field(
        default=None,
        ge=3,
        description="Connections of a jobs worker's pool; unset: the larger of "
        "JOBRELAY_DB_POOL_MAX and the worker's total slots + 6, at most 50. A worker also "
        "holds one claim connection and one LISTEN connection.",
    )
    worker_listen: bool = Field(default=True, description="Wake workers by LISTEN/NOTIFY.")
    worker_prefetch: int = Field(
        default=0, ge=0, description="Jobs a worker claims ahead of its free slots."
    )
    worker_hold_slot_until_recorded: bool = Field(
        default=True,
        description="Bounded flush window: when more than 4 completions per slot wait for the "
        "batched flush, a finished job keeps its slot until its completion is recorded (at "
        "most one lease), so a killed worker re-runs at most 5 x slots finished handlers; "
        "while the flush keeps up nothing waits. False never waits (completions pile up "
        "without bound while the database is slow; more finished work re-run after a crash).",
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
    jobs_rates: str = Field(
        default="",
        description="Job starts per class across all workers, e.g. ai=60/min,default=30/10s; "
        "adds to (and overrides) the rates the job types declare.",
    )
    worker_fair_claims: bool = Field(
        default=True,
        description="Rotate claims across the fairness keys of a class (false: strict "
        "priority and arrival order).",
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
    jobs_prune_log_threshold: int = Field(
        default=1000,
        ge=0,
        description="A prune pass deleting more finished jobs than this logs one warning with "
        "the count (smaller passes log at INFO).",
    )
    jobs_failpoints: str = Field(
        default="", description="Injected failures for drills and tests, e.g. name=2,name."
    )
    schedules: str = Field(
        default="",
        description="Schedules as a JSON list of objects: name, cron (a 6th field is "
        "seconds), jobType, and optionally payload, timezone (default UTC), catchUp "
        "(one, the default, or skip); added to those the job types declare.",
    )
    schedules_grace_s: float = Field(
        default=10.0,
        gt=0,
        description="A schedule tick a worker reaches later than this after it was due was "
        "missed (its catch-up policy applies); a younger one gets its own job.",
    )
    log_format: Literal["auto", "json", "console"] = Field(
        default="auto", description="auto: console on a terminal, else JSON."
    )
    log_level: str = Field(default="INFO", description="Log level.")

    @field_validator("webhook_secrets", "auth_client_ids", "auth_token_uses", "app", mode="before")
    @classmethod
    def _secrets_from_csv(cls, value: object) -> object:
        return _split_csv(value)

    @field_validator("ui_cognito_domain", "ui_cognito_redirect_url")
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

    @field_validator("database_url")
    @classmethod
    def _valid_database_url(cls, value: str | None) -> str | None:
        if value:
            problem = database_url_problem(value)
            if problem:
                # The value is not echoed: it may hold a password.
                raise ValueError(f"malformed PostgreSQL URL: {problem}")
        return value

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

    @field_validator("jobs_rates")
    @classmethod
    def _valid_rates(cls, value: str) -> str:
        parse_class_rates(value, what="JOBRELAY_JOBS_RATES")
        return value

    @field_validator("relay_org_weights")
    @classmethod
    def _valid_weights(cls, value: str) -> str:
        parse_organization_weights(value, what="JOBRELAY_RELAY_ORG_WEIGHTS")
        return value

    @field_validator("jobs_failpoints")
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
        return (
            init_settings,
            SecretFileSource(settings_cls),
            env_settings,
            dotenv_settings,
            file_secret_settings,
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


def is_secret(field: FieldInfo) -> bool:
    """True for `SecretStr` fields (also in a list or optional) and fields marked secret."""
    extra = field.json_schema_extra
    if isinstance(extra, dict) and extra.get("secret") is True:
        return True
    return _mentions_secret(field.annotation)


def _mentions_secret(annotation: object) -> bool:
    if annotation is SecretStr:
        return True
    return any(_mentions_secret(arg) for arg in typing.get_args(annotation))


def env_names(name: str, field: FieldInfo) -> list[str]:
    """The environment variables that set field `name`, the preferred one first."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [choice for choice in alias.choices if isinstance(choice, str)]
    if isinstance(alias, str):
        return [alias]
    prefix = Settings.model_config.get("env_prefix", "")
    return [f"{prefix}{name}".upper()]


class SecretFileSource(PydanticBaseSettingsSource):
    """Secrets from files: `<VARIABLE>_FILE=/run/secrets/x` gives the stripped content of
    that file as the value of `<VARIABLE>`, for every secret setting (`is_secret`).

    A file that cannot be read, or a variable given both ways, raises `SettingsFileError`
    naming the variable and the path, so the command stops before it starts anything.
    """

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # Unused: `__call__` reads every field itself.
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, field in self.settings_cls.model_fields.items():
            if not is_secret(field):
                continue
            for variable in env_names(name, field):
                path = os.environ.get(f"{variable}_FILE")
                if not path:
                    continue
                if os.environ.get(variable):
                    raise SettingsFileError(
                        f"both {variable} and {variable}_FILE are set; set one of them"
                    )
                values[name] = _read_secret_file(f"{variable}_FILE", path)
                break
        return values


def _read_secret_file(variable: str, path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SettingsFileError(f"{variable}={path}: cannot read the file ({reason})") from None


def load_settings(*, default_env: Environment | None = None, **overrides: object) -> Settings:
    """Read settings from the environment (and explicit overrides, e.g. CLI flags).

    `default_env` is the environment when `JOBRELAY_ENV` (or an override) does not say:
    the long-running commands started on their own pass "production".
    """
    settings = Settings(**overrides)  # type: ignore[arg-type]
    if default_env is not None and "env" not in settings.model_fields_set:
        settings = Settings(**{**overrides, "env": default_env})  # type: ignore[arg-type]
    return settings
