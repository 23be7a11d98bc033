"""`JOBRELAY_ENV=production` as an operator meets it: real `jobrelay` processes.

Without secrets the long-running commands refuse to start (one line, exit 2, nothing
started); with secrets from files and Cognito settings the API starts, answers its probes
and serves no `/dev/*` route. Bad `DATABASE_URL` values and missing secret files are one line.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from jobrelay.auth.local_issuer import JWKS_PATH
from jobrelay.aws.emulator import free_port, port_is_free
from tests.harness import cli_env, jobrelay_command, run_cli, wait_healthy

COGNITO = {
    "JOBRELAY_AUTH_MODE": "cognito",
    "JOBRELAY_COGNITO_USER_POOL_ID": "eu-west-1_AbC123",
    "JOBRELAY_AUTH_CLIENT_IDS": "client-one,client-two",
    "JOBRELAY_UI_COGNITO_DOMAIN": "https://jobrelay.auth.eu-west-1.amazoncognito.com",
    "JOBRELAY_UI_COGNITO_CLIENT_ID": "console-client",
    "JOBRELAY_UI_COGNITO_REDIRECT_URL": "https://jobrelay.example.invalid/ui/auth/callback",
}


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("env", ["production", None], ids=["explicit", "default"])
def test_api_in_production_without_secrets_exits_2_with_one_line(
    db_dsn: str, tmp_path: Path, env: str | None
) -> None:
    port = free_port()
    result = run_cli(
        "api",
        "--port",
        str(port),
        JOBRELAY_ENV=env,  # None: unset, and `jobrelay api` alone defaults to production
        DATABASE_URL=db_dsn,
        JOBRELAY_DATA_DIR=str(tmp_path),
        JOBRELAY_WEBHOOK_SECRETS=None,
        JOBRELAY_AUTH_MODE=None,
    )
    line = _one_error_line(result)
    assert "JOBRELAY_ENV=production" in line
    assert "JOBRELAY_WEBHOOK_SECRETS" in line and "JOBRELAY_AUTH_MODE=local" in line
    assert "JOBRELAY_UI_SESSION_SECRET" in line
    assert not (tmp_path / "local-issuer").exists() and not any(tmp_path.iterdir()), (
        "nothing may be created before the check"
    )
    assert port_is_free("127.0.0.1", port)


@pytest.mark.parametrize(
    ("command", "named"),
    [
        (["worker"], "DATABASE_URL"),
        (["relay"], "DATABASE_URL"),
        (["sqs-worker"], "JOBRELAY_SQS_WORKER_WEBHOOK_URL"),
    ],
)
def test_other_processes_alone_default_to_production(
    tmp_path: Path, command: list[str], named: str
) -> None:
    result = run_cli(
        *command,
        JOBRELAY_ENV=None,
        DATABASE_URL=None,
        JOBRELAY_DATA_DIR=str(tmp_path),
        JOBRELAY_SQS_WORKER_WEBHOOK_URL=None,
    )
    line = _one_error_line(result)
    assert named in line and f"`jobrelay {command[0]}`" in line
    assert not (tmp_path / "pgdata").exists(), "no embedded PostgreSQL may start"


def _secret_file(folder: Path, name: str, value: str) -> Path:
    path = folder / name
    path.write_text(value + "\n")  # editors and `echo` add a newline: it is stripped
    path.chmod(0o600)
    return path


def test_api_in_production_with_secrets_from_files_starts(db_dsn: str, tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    webhook_secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    ui_secret = base64.b64encode(os.urandom(24)).decode()
    client_secret = base64.b64encode(os.urandom(24)).decode()
    port = free_port()
    env = cli_env(
        JOBRELAY_ENV="production",
        DATABASE_URL=None,
        DATABASE_URL_FILE=str(_secret_file(secrets, "database-url", db_dsn)),
        JOBRELAY_WEBHOOK_SECRETS=None,
        JOBRELAY_WEBHOOK_SECRETS_FILE=str(_secret_file(secrets, "webhook", webhook_secret)),
        JOBRELAY_UI_SESSION_SECRET=None,
        JOBRELAY_UI_SESSION_SECRET_FILE=str(_secret_file(secrets, "ui-session", ui_secret)),
        JOBRELAY_UI_COGNITO_CLIENT_SECRET_FILE=str(
            _secret_file(secrets, "console-client", client_secret)
        ),
        JOBRELAY_DATA_DIR=str(tmp_path / "data"),
        JOBRELAY_API_PORT=str(port),
        **COGNITO,
    )
    process = subprocess.Popen(
        [*jobrelay_command(), "api"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"

    try:
        wait_healthy(process, base, what="the production API to answer /healthz")
        assert httpx.get(f"{base}/readyz").json() == {"status": "ready", "database": "ok"}
        assert httpx.get(f"{base}{JWKS_PATH}").status_code == 404, "/dev/* is development-only"
        assert "/dev/" not in httpx.get(f"{base}/openapi.json").text
        assert httpx.get(f"{base}/v1/me").status_code == 401
        # Cognito: the console's login goes to the Hosted UI, back to the registered URL.
        login = httpx.get(f"{base}/ui/login")
        assert login.status_code == 303
        authorize = httpx.URL(login.headers["location"])
        assert str(authorize).startswith(
            "https://jobrelay.auth.eu-west-1.amazoncognito.com/oauth2/authorize?"
        )
        assert authorize.params["client_id"] == "console-client"
        assert authorize.params["redirect_uri"] == COGNITO["JOBRELAY_UI_COGNITO_REDIRECT_URL"]
        assert client_secret not in str(authorize)
        assert "Secure" in login.headers["set-cookie"]
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert webhook_secret not in output and db_dsn not in output and ui_secret not in output
    assert client_secret not in output


def test_a_missing_secret_file_is_one_line_naming_variable_and_path(tmp_path: Path) -> None:
    missing = tmp_path / "not-mounted" / "webhook"
    result = run_cli(
        "api",
        "--port",
        str(free_port()),
        JOBRELAY_ENV="production",
        JOBRELAY_WEBHOOK_SECRETS=None,
        JOBRELAY_WEBHOOK_SECRETS_FILE=str(missing),
        JOBRELAY_DATA_DIR=str(tmp_path),
    )
    line = _one_error_line(result)
    assert f"JOBRELAY_WEBHOOK_SECRETS_FILE={missing}" in line
    assert not (tmp_path / "pgdata").exists()


@pytest.mark.parametrize("command", ["api", "worker", "migrate"])
def test_a_malformed_database_url_is_one_line_before_anything_starts(
    tmp_path: Path, command: str
) -> None:
    result = run_cli(
        command,
        DATABASE_URL="postgresql://x:hunter2@host:notaport/db",
        JOBRELAY_DATA_DIR=str(tmp_path),
    )
    line = _one_error_line(result)
    assert "DATABASE_URL" in line and "the port 'notaport' is not a number" in line
    assert "hunter2" not in line, "the password is never printed"
    assert not any(tmp_path.iterdir())


def test_an_unreachable_database_url_is_one_line_and_the_api_never_listens(
    tmp_path: Path,
) -> None:
    port = free_port()
    result = run_cli(
        "api",
        "--port",
        str(port),
        DATABASE_URL="postgresql://nobody:hunter2@127.0.0.1:1/jobs",
        JOBRELAY_DATA_DIR=str(tmp_path),
    )
    line = _one_error_line(result)
    assert "cannot connect to PostgreSQL at 127.0.0.1:1/jobs" in line
    assert "hunter2" not in line
    assert port_is_free("127.0.0.1", port)


def test_migrate_in_production_refuses_to_migrate_an_embedded_server(tmp_path: Path) -> None:
    result = run_cli(
        "migrate", JOBRELAY_ENV="production", DATABASE_URL=None, JOBRELAY_DATA_DIR=str(tmp_path)
    )
    line = _one_error_line(result)
    assert "`jobrelay migrate`" in line and "DATABASE_URL" in line
    assert not (tmp_path / "pgdata").exists()


def test_api_in_production_with_cognito_but_no_console_login_exits_2(
    db_dsn: str, tmp_path: Path
) -> None:
    result = run_cli(
        "api",
        "--port",
        str(free_port()),
        JOBRELAY_ENV="production",
        DATABASE_URL=db_dsn,
        JOBRELAY_DATA_DIR=str(tmp_path),
        JOBRELAY_WEBHOOK_SECRETS="whsec_" + base64.b64encode(os.urandom(24)).decode(),
        JOBRELAY_UI_SESSION_SECRET="a-real-console-session-secret",
        **{**COGNITO, "JOBRELAY_UI_COGNITO_REDIRECT_URL": None},
    )
    line = _one_error_line(result)
    assert "JOBRELAY_AUTH_MODE=cognito without the console's Hosted UI login" in line
    assert "JOBRELAY_UI_COGNITO_REDIRECT_URL unset" in line
    assert "JOBRELAY_UI_COGNITO_DOMAIN" not in line
