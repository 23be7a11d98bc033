"""JOBRELAY_ENV, secrets from `<VARIABLE>_FILE`, and what production refuses (no I/O but
the secret files themselves)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from jobrelay.bootstrap import StartupError, require_safe_environment
from jobrelay.bootstrap.environment import development_defaults
from jobrelay.cli.main import _setting_error
from jobrelay.cli.running_stack import load_cli_settings, recorded
from jobrelay.settings import (
    DEVELOPMENT_WEBHOOK_SECRET,
    Settings,
    database_url_problem,
    load_settings,
    setting_fields,
)
from jobrelay.settings_sources import SettingsFileError, env_names, is_secret

SECRET_FIELDS = sorted(s.path for s in setting_fields() if is_secret(s.field))


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite runs as development (tests/conftest.py); these tests choose for themselves."""
    for name in ("JOBRELAY_ENV", "JOBRELAY_SQS_WORKER_WEBHOOK_URL", "JOBRELAY_AUTH_MODE"):
        monkeypatch.delenv(name, raising=False)
    for setting in setting_fields():
        if setting.path not in SECRET_FIELDS:
            continue
        for variable in env_names(setting.name, setting.field):
            monkeypatch.delenv(variable, raising=False)
            monkeypatch.delenv(f"{variable}_FILE", raising=False)


def test_every_secret_setting_is_known_as_one() -> None:
    # A SecretStr field is a secret by its type; DATABASE_URL is marked (it holds a password).
    assert SECRET_FIELDS == [
        "api.metrics_token",
        "db.url",
        "ui.cognito_client_secret",
        "ui.session_secret",
        "webhooks.secrets",
    ]
    for setting in setting_fields():
        if "SecretStr" in str(setting.field.annotation):
            assert setting.path in SECRET_FIELDS


@pytest.mark.parametrize(
    ("variable", "content", "field", "expected"),
    [
        (
            "DATABASE_URL",
            "postgresql://u:p@db:5432/jobs\n",
            "db.url",
            "postgresql://u:p@db:5432/jobs",
        ),
        ("JOBRELAY_DATABASE_URL", "  host=db dbname=jobs  ", "db.url", "host=db dbname=jobs"),
        (
            "JOBRELAY_WEBHOOK_SECRETS",
            "whsec_a,whsec_b\n",
            "webhooks.secrets",
            ["whsec_a", "whsec_b"],
        ),
        ("JOBRELAY_UI_SESSION_SECRET", "console-key\n", "ui.session_secret", "console-key"),
    ],
)
def test_a_secret_comes_from_its_file_stripped(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    variable: str,
    content: str,
    field: str,
    expected: object,
) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(content)
    monkeypatch.setenv(f"{variable}_FILE", str(secret_file))
    value = _read(load_settings(), field)
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, list):
        value = [item.get_secret_value() if isinstance(item, SecretStr) else item for item in value]
    assert value == expected


def test_a_missing_secret_file_names_the_variable_and_the_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere" / "secret"
    monkeypatch.setenv("JOBRELAY_WEBHOOK_SECRETS_FILE", str(missing))
    with pytest.raises(SettingsFileError) as info:
        load_settings()
    message = str(info.value)
    assert f"JOBRELAY_WEBHOOK_SECRETS_FILE={missing}" in message
    assert "No such file or directory" in message
    assert "\n" not in message


def test_a_directory_is_not_a_secret_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DATABASE_URL_FILE", str(tmp_path))
    with pytest.raises(SettingsFileError, match=f"DATABASE_URL_FILE={tmp_path}: cannot read"):
        load_settings()


def test_a_secret_given_both_ways_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret_file = tmp_path / "url"
    secret_file.write_text("postgresql://a@b/c")
    monkeypatch.setenv("DATABASE_URL", "postgresql://x@y/z")
    monkeypatch.setenv("DATABASE_URL_FILE", str(secret_file))
    with pytest.raises(SettingsFileError, match="both DATABASE_URL and DATABASE_URL_FILE"):
        load_settings()


def test_only_secrets_are_read_from_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    port_file.write_text("9999")
    monkeypatch.setenv("JOBRELAY_API_PORT_FILE", str(port_file))
    assert load_settings().api.port == 8000


def test_a_file_secret_is_validated_like_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret_file = tmp_path / "url"
    secret_file.write_text("postgresql://u:hunter2@db:notaport/jobs")
    monkeypatch.setenv("DATABASE_URL_FILE", str(secret_file))
    with pytest.raises(ValidationError) as info:
        load_settings()
    (line,) = [_setting_error(err) for err in info.value.errors()]
    assert "the port 'notaport' is not a number" in line
    assert "hunter2" not in line, "a setting error never echoes a secret"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("postgresql://x:y@host:notaport/db", "the port 'notaport' is not a number"),
        ("postgresql://x:y@host:70000/db", "the port '70000' is not a number"),
        ("mysql://x@host/db", "the scheme is 'mysql'"),
        ("not a url at all", "neither a postgresql:// URL nor key=value pairs"),
        ("postgresql://x:y@host:5432/db", None),
        ("postgres://host/db?sslmode=require", None),
        ("host=/tmp dbname=jobs password='a b'", None),
    ],
)
def test_malformed_database_urls_are_named(url: str, problem: str | None) -> None:
    found = database_url_problem(url)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


def test_the_environment_defaults_to_development_unless_a_command_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().env == "development"
    assert load_settings(default_env="production").env == "production"
    monkeypatch.setenv("JOBRELAY_ENV", "development")
    assert load_settings(default_env="production").env == "development", "explicit wins"
    monkeypatch.setenv("JOBRELAY_ENV", "production")
    assert load_settings().env == "production"
    monkeypatch.setenv("JOBRELAY_ENV", "staging")
    with pytest.raises(ValidationError):
        load_settings()


def _read(settings: Settings, path: str) -> object:
    """The setting at `path`, e.g. `db.url`."""
    return functools.reduce(getattr, path.split("."), settings)


def _production(**overrides: object) -> Settings:
    return load_settings(default_env=None, env="production", **overrides)


SAFE: dict[str, dict[str, object]] = {
    "db": {"url": "postgresql://jobrelay@db/jobrelay"},
    "webhooks": {"secrets": "whsec_cHJvZHVjdGlvbi1zZWNyZXQ="},
    "auth": {
        "mode": "cognito",
        "cognito_user_pool_id": "eu-west-1_AbC123",
        "client_ids": "client1",
    },
    "sqs_worker": {"webhook_url": "https://api.example.invalid/v1/webhooks/worker"},
    "ui": {
        "session_secret": "a-real-console-session-secret",
        "cognito_domain": "https://jobrelay.auth.eu-west-1.amazoncognito.com",
        "cognito_client_id": "console-client",
        "cognito_redirect_url": "https://jobrelay.example.invalid/ui/auth/callback",
    },
}


def _safe_without(*paths: str) -> dict[str, dict[str, object]]:
    """SAFE without the settings at `paths` (`group.name`)."""
    dropped = {tuple(path.split(".")) for path in paths}
    return {
        group: {name: value for name, value in fields.items() if (group, name) not in dropped}
        for group, fields in SAFE.items()
    }


@pytest.mark.parametrize("process", ["api", "worker", "relay", "sqs-worker", "migrate"])
def test_production_with_real_settings_starts(process: str) -> None:
    settings = _production(**SAFE)
    assert development_defaults(settings, process) == []  # type: ignore[arg-type]
    require_safe_environment(settings, process)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("process", "missing", "named"),
    [
        ("api", "webhooks.secrets", "JOBRELAY_WEBHOOK_SECRETS"),
        ("sqs-worker", "webhooks.secrets", "JOBRELAY_WEBHOOK_SECRETS"),
        ("api", "auth.mode", "JOBRELAY_AUTH_MODE=local"),
        ("api", "ui.session_secret", "JOBRELAY_UI_SESSION_SECRET"),
        ("api", "ui.cognito_domain", "JOBRELAY_UI_COGNITO_DOMAIN"),
        ("api", "ui.cognito_client_id", "JOBRELAY_UI_COGNITO_CLIENT_ID"),
        ("api", "ui.cognito_redirect_url", "JOBRELAY_UI_COGNITO_REDIRECT_URL"),
        ("api", "db.url", "DATABASE_URL"),
        ("worker", "db.url", "DATABASE_URL"),
        ("relay", "db.url", "DATABASE_URL"),
        ("migrate", "db.url", "DATABASE_URL"),
        ("sqs-worker", "sqs_worker.webhook_url", "JOBRELAY_SQS_WORKER_WEBHOOK_URL"),
    ],
)
def test_production_refuses_each_development_default(
    process: str, missing: str, named: str
) -> None:
    settings = _production(**_safe_without(missing))
    with pytest.raises(StartupError) as info:
        require_safe_environment(settings, process)  # type: ignore[arg-type]
    message = str(info.value)
    assert named in message and f"jobrelay {process}" in message
    assert "\n" not in message
    # The same settings are fine for development.
    development = settings.model_copy(update={"env": "development"})
    require_safe_environment(development, process)  # type: ignore[arg-type]


def test_the_built_in_secret_is_refused_even_beside_a_real_one() -> None:
    # Verifying with a public secret lets anyone sign outcomes, whatever else is listed.
    settings = _production(
        **{**SAFE, "webhooks": {"secrets": f"whsec_cmVhbA==,{DEVELOPMENT_WEBHOOK_SECRET}"}}
    )
    assert development_defaults(settings, "api") == [
        "JOBRELAY_WEBHOOK_SECRETS (or JOBRELAY_WEBHOOK_SECRETS_FILE) holds the built-in "
        "development secret"
    ]


def test_processes_refuse_only_what_they_use() -> None:
    settings = _production(db=SAFE["db"])  # every other default
    assert development_defaults(settings, "relay") == []
    assert len(development_defaults(settings, "api")) == 3  # webhook/UI secrets, local auth
    assert len(development_defaults(settings, "sqs-worker")) == 2  # secret, webhook URL


def test_a_process_beside_a_running_up_is_development(tmp_path: Path) -> None:
    # `jobrelay worker` next to `jobrelay up` joins that development stack; alone it is
    # production.
    assert load_cli_settings(default_env="production", data_dir=tmp_path).env == "production"
    settings = load_settings(data_dir=tmp_path)
    with recorded(
        settings, api_url="http://127.0.0.1:1", aws_endpoint_url=None, emulator_started=False
    ):
        beside = load_cli_settings(default_env="production", data_dir=tmp_path)
    assert beside.env == "development"


def test_production_names_every_missing_hosted_ui_setting_in_one_line() -> None:
    hosted = ("ui.cognito_domain", "ui.cognito_client_id", "ui.cognito_redirect_url")
    settings = _production(**_safe_without(*hosted))
    assert development_defaults(settings, "api") == [
        "JOBRELAY_AUTH_MODE=cognito without the console's Hosted UI login "
        "(JOBRELAY_UI_COGNITO_DOMAIN, JOBRELAY_UI_COGNITO_CLIENT_ID, "
        "JOBRELAY_UI_COGNITO_REDIRECT_URL unset)"
    ]
    # Only the API serves the console.
    assert development_defaults(settings, "worker") == []


@pytest.mark.parametrize(
    "url",
    ["http://auth.example.com", "ftp://auth.example.com", "auth.example.com", "https://"],
)
def test_hosted_ui_urls_must_be_https_off_loopback(url: str) -> None:
    with pytest.raises(ValidationError, match="https://"):
        load_settings(default_env=None, ui={"cognito_domain": url})
    with pytest.raises(ValidationError, match="https://"):
        load_settings(default_env=None, ui={"cognito_redirect_url": url})


def test_hosted_ui_urls_lose_their_trailing_slash_and_allow_loopback_http() -> None:
    settings = load_settings(
        default_env=None,
        ui={
            "cognito_domain": "https://auth.example.com/",
            "cognito_redirect_url": "http://127.0.0.1:8000/ui/auth/callback",
        },
    )
    assert settings.ui.cognito_domain == "https://auth.example.com"
    assert settings.ui.cognito_redirect_url == "http://127.0.0.1:8000/ui/auth/callback"


def test_the_console_client_is_accepted_by_the_cognito_verifier() -> None:
    from jobrelay.bootstrap.services import token_verifier

    verifier = token_verifier(_production(**SAFE), None)
    assert verifier._policy.client_ids == frozenset({"client1", "console-client"})
