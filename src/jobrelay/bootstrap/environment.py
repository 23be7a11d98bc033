"""Settings -> go or no-go: production refuses the defaults that only make sense locally.

`JOBRELAY_ENV=production` (the default of `jobrelay api`, `worker`, `relay` and `sqs-worker`
started on their own) makes each of those processes refuse to start, with one line naming
the settings to change, when it would use a development default that is unsafe or wrong on a
shared host:

* the built-in webhook secret (it is in the source, so anyone could sign worker outcomes):
  the API verifies with it, an SQS worker signs with it;
* the built-in console session secret (`JOBRELAY_UI_SESSION_SECRET`: anyone could forge a
  console session with it): the API;
* `JOBRELAY_AUTH_MODE=local` (the local token issuer, whose `/dev/*` routes publish its keys
  and whose private key sits in the data directory): the API;
* `JOBRELAY_AUTH_MODE=cognito` without the console's Hosted UI login
  (`JOBRELAY_UI_COGNITO_DOMAIN`, `JOBRELAY_UI_COGNITO_CLIENT_ID`,
  `JOBRELAY_UI_COGNITO_REDIRECT_URL`; the redirect URL is derived from the request only in
  development): the API;
* no `DATABASE_URL` (the embedded PostgreSQL in the data directory, one host's disk): the
  processes that use the database, and `jobrelay migrate` when JOBRELAY_ENV=production is
  set (its default is development: it also migrates the local stack's database);
* no `JOBRELAY_SQS_WORKER_WEBHOOK_URL` (the default is this host's loopback, where no API
  runs in a deployment): the SQS worker.

Not refused: no `JOBRELAY_AWS_ENDPOINT_URL` means real AWS for these commands (only `up`
starts the emulator), and the diag job types are admin-only.
"""

from __future__ import annotations

from typing import Literal

from jobrelay.bootstrap.errors import StartupError
from jobrelay.settings import DEVELOPMENT_UI_SESSION_SECRET, DEVELOPMENT_WEBHOOK_SECRET, Settings

ProcessKind = Literal["api", "worker", "relay", "sqs-worker", "migrate"]

_USES_DATABASE: frozenset[ProcessKind] = frozenset({"api", "worker", "relay", "migrate"})
_USES_WEBHOOK_SECRET: frozenset[ProcessKind] = frozenset({"api", "sqs-worker"})


def development_defaults(settings: Settings, process: ProcessKind) -> list[str]:
    """What `process` would use that production refuses, one phrase each (empty: none)."""
    problems: list[str] = []
    if process in _USES_WEBHOOK_SECRET and any(
        secret.get_secret_value() == DEVELOPMENT_WEBHOOK_SECRET
        for secret in settings.webhooks.secrets
    ):
        problems.append(
            "JOBRELAY_WEBHOOK_SECRETS (or JOBRELAY_WEBHOOK_SECRETS_FILE) holds the built-in "
            "development secret"
        )
    if (
        process == "api"
        and settings.ui.session_secret.get_secret_value() == DEVELOPMENT_UI_SESSION_SECRET
    ):
        problems.append(
            "JOBRELAY_UI_SESSION_SECRET (or JOBRELAY_UI_SESSION_SECRET_FILE) is the built-in "
            "development secret"
        )
    if process == "api" and settings.auth.mode == "local":
        problems.append(
            "JOBRELAY_AUTH_MODE=local (set cognito with JOBRELAY_COGNITO_USER_POOL_ID and "
            "JOBRELAY_AUTH_CLIENT_IDS)"
        )
    if process == "api" and settings.auth.mode == "cognito":
        missing = missing_hosted_ui(settings)
        if missing:
            problems.append(
                "JOBRELAY_AUTH_MODE=cognito without the console's Hosted UI login ("
                + ", ".join(missing)
                + " unset)"
            )
    if process in _USES_DATABASE and not settings.db.url:
        problems.append("DATABASE_URL (or DATABASE_URL_FILE) is unset (embedded PostgreSQL)")
    if process == "sqs-worker" and "webhook_url" not in settings.sqs_worker.model_fields_set:
        problems.append("JOBRELAY_SQS_WORKER_WEBHOOK_URL is unset (this host's loopback)")
    return problems


def missing_hosted_ui(settings: Settings) -> list[str]:
    """The console's Cognito Hosted UI settings that are unset (empty: all given)."""
    wanted = {
        "JOBRELAY_UI_COGNITO_DOMAIN": settings.ui.cognito_domain,
        "JOBRELAY_UI_COGNITO_CLIENT_ID": settings.ui.cognito_client_id,
        "JOBRELAY_UI_COGNITO_REDIRECT_URL": settings.ui.cognito_redirect_url,
    }
    return [name for name, value in wanted.items() if not value]


def require_safe_environment(settings: Settings, process: ProcessKind) -> None:
    """Raise `StartupError` (one line) when production `settings` use development defaults."""
    if settings.env != "production":
        return
    problems = development_defaults(settings, process)
    if problems:
        raise StartupError(
            f"JOBRELAY_ENV=production refuses development defaults for `jobrelay {process}`: "
            + "; ".join(problems)
            + " (JOBRELAY_ENV=development allows them)"
        )
