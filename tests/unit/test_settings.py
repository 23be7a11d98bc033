"""Settings come from the environment, with defaults that run the local stack."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jobrelay.settings import load_settings


def test_defaults_need_no_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    settings = load_settings()
    assert settings.database_url is None
    assert settings.aws_endpoint_url is None
    assert settings.sqs_message_limit_bytes == 256 * 1024
    assert settings.pgdata_dir.name == "pgdata"


def test_database_url_is_read_without_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@h/db")
    assert load_settings().database_url == "postgresql://u@h/db"


def test_webhook_secrets_are_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRELAY_WEBHOOK_SECRETS", "whsec_a, whsec_b")
    secrets = [s.get_secret_value() for s in load_settings().webhook_secrets]
    assert secrets == ["whsec_a", "whsec_b"]


@pytest.mark.parametrize(
    ("name", "value"),
    [("JOBRELAY_API_PORT", "70000"), ("JOBRELAY_SQS_MESSAGE_LIMIT_BYTES", "2000000")],
)
def test_out_of_range_values_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as info:
        load_settings()
    assert name.removeprefix("JOBRELAY_").lower() in str(info.value)
