"""Settings come from the environment, with defaults that run the local stack."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict
from pydantic import ValidationError

from jobrelay.batches.creation import BatchLimits
from jobrelay.batches.relay_config import RelayConfig
from jobrelay.bootstrap import jobs_registry, worker_config
from jobrelay.bootstrap.database import bounded_dsn
from jobrelay.cli.main import _setting_error
from jobrelay.settings import load_settings


def test_defaults_need_no_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    settings = load_settings()
    assert settings.db.url is None
    assert settings.aws.endpoint_url is None
    assert settings.sqs.message_limit_bytes == 256 * 1024
    assert settings.pgdata_dir.name == "pgdata"


def test_the_data_directory_is_one_per_user_whatever_the_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("JOBRELAY_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    assert load_settings().data_dir == tmp_path / "state" / "jobrelay"
    monkeypatch.chdir(tmp_path / "..")
    assert load_settings().data_dir == tmp_path / "state" / "jobrelay"
    # XDG's rule: unset or empty means ~/.local/state.
    monkeypatch.setenv("XDG_STATE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert load_settings().data_dir == tmp_path / "home" / ".local" / "state" / "jobrelay"
    # The folder's own `.jobrelay` only when asked for.
    monkeypatch.setenv("JOBRELAY_DATA_DIR", ".jobrelay")
    assert load_settings().data_dir.resolve() == (tmp_path / ".." / ".jobrelay").resolve()
    monkeypatch.setenv("JOBRELAY_DATA_DIR", "~/stack")
    assert load_settings().data_dir == tmp_path / "home" / "stack"


def test_database_url_is_read_without_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@h/db")
    assert load_settings().db.url == "postgresql://u@h/db"


def test_webhook_secrets_are_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRELAY_WEBHOOK_SECRETS", "whsec_a, whsec_b")
    secrets = [s.get_secret_value() for s in load_settings().webhooks.secrets]
    assert secrets == ["whsec_a", "whsec_b"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("JOBRELAY_API_PORT", "70000"),
        ("JOBRELAY_SQS_MESSAGE_LIMIT_BYTES", "2000000"),
        # The relay's bounds are stated only here (RelayConfig no longer re-checks them).
        ("JOBRELAY_RELAY_LEASE_S", "0"),
        ("JOBRELAY_RELAY_CLAIM_SIZE", "0"),
        ("JOBRELAY_RELAY_CLAIM_SIZE", "10001"),
        ("JOBRELAY_RELAY_WORKERS", "0"),
        ("JOBRELAY_RELAY_MAX_IN_FLIGHT", "0"),
        ("JOBRELAY_RELAY_POLL_INTERVAL_S", "0"),
        ("JOBRELAY_RELAY_RETRY_DELAY_S", "-1"),
        ("JOBRELAY_RELAY_ORG_WINDOW", "0"),
        ("JOBRELAY_RELAY_ORG_WEIGHTS", "42=0"),
        ("JOBRELAY_RELAY_IN_FLIGHT_EXPIRY_S", "0"),
        ("JOBRELAY_RELAY_WINDOW_POLL_S", "0"),
        ("JOBRELAY_RELAY_LOCK_TIMEOUT_S", "0"),
        ("JOBRELAY_RELAY_SEND_TIMEOUT_S", "0"),
    ],
)
def test_out_of_range_values_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as info:
        load_settings()
    assert name.removeprefix("JOBRELAY_").lower() in str(info.value)


def test_a_group_value_given_in_code_wins_over_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBRELAY_API_PORT", "9001")
    monkeypatch.setenv("JOBRELAY_API_HOST", "0.0.0.0")
    settings = load_settings(api={"port": 8123})
    assert (settings.api.host, settings.api.port) == ("0.0.0.0", 8123)
    assert settings.api.model_fields_set == {"host", "port"}
    assert load_settings().api.port == 9001


def test_variables_are_matched_without_regard_to_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("jobrelay_worker_slots", "ai=1")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("JOBRELAY_DATABASE_URL", "postgresql://u@h/other")
    settings = load_settings()
    assert settings.worker.slots == "ai=1"
    assert settings.db.url == "postgresql://u@h/other", "the second name of DATABASE_URL"


def test_an_invalid_grouped_setting_is_one_line_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBRELAY_API_PORT", "70000")
    monkeypatch.setenv("JOBRELAY_SQS_WORKER_HEARTBEAT_S", "60")
    with pytest.raises(ValidationError) as info:
        load_settings()
    lines = sorted(_setting_error(err) for err in info.value.errors())
    assert lines == [
        "setting JOBRELAY_API_PORT: Input should be less than or equal to 65535 (got '70000')",
        "settings: Value error, JOBRELAY_SQS_WORKER_HEARTBEAT_S must be shorter than "
        "JOBRELAY_SQS_WORKER_VISIBILITY_TIMEOUT_S",
    ]


NETWORK_TIMEOUTS = [
    "JOBRELAY_DB_CONNECT_TIMEOUT_S",
    "JOBRELAY_DB_KEEPALIVES_IDLE_S",
    "JOBRELAY_DB_KEEPALIVES_INTERVAL_S",
    "JOBRELAY_DB_KEEPALIVES_COUNT",
    "JOBRELAY_DB_TCP_USER_TIMEOUT_S",
    "JOBRELAY_DB_CALL_DEADLINE_S",
    "JOBRELAY_AWS_CONNECT_TIMEOUT_S",
    "JOBRELAY_AWS_READ_TIMEOUT_S",
    "JOBRELAY_RELAY_SEND_TIMEOUT_S",
]


@pytest.mark.parametrize("name", NETWORK_TIMEOUTS)
@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_a_network_timeout_that_is_not_a_positive_number_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as info:
        load_settings()
    [line] = [_setting_error(err) for err in info.value.errors()]
    assert line.startswith(f"setting {name}: "), line


def test_the_network_timeouts_go_into_every_database_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRELAY_DB_TCP_USER_TIMEOUT_S", "3.5")
    monkeypatch.setenv("JOBRELAY_DB_KEEPALIVES_IDLE_S", "4")
    params = conninfo_to_dict(bounded_dsn(load_settings(), "postgresql://u@db/app"))
    assert params["tcp_user_timeout"] == "3500" and params["keepalives_idle"] == "4"
    assert params["connect_timeout"] == "2" and params["keepalives_count"] == "3"


def test_updated_replaces_fields_of_a_group_and_refuses_unknown_names() -> None:
    settings = load_settings()
    before = settings.db.pool_max
    bigger = settings.updated(db={"pool_max": before + 20})
    assert (bigger.db.pool_max, settings.db.pool_max) == (before + 20, before), "a copy"
    assert "pool_max" in bigger.db.model_fields_set
    with pytest.raises(ValueError, match=r"settings\.db has no field pool_mx"):
        settings.updated(db={"pool_mx": 30})


def test_each_part_builds_its_config_from_its_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRELAY_RELAY_ORG_WEIGHTS", "42=2")
    monkeypatch.setenv("JOBRELAY_SQS_MESSAGE_LIMIT_BYTES", "4096")
    monkeypatch.setenv("JOBRELAY_BATCH_MAX_ITEMS", "3")
    monkeypatch.setenv("JOBRELAY_JOBS_RETENTION_S", "0")
    monkeypatch.setenv("JOBRELAY_SCHEDULES_GRACE_S", "4.5")
    monkeypatch.setenv("JOBRELAY_WORKER_PREFETCH", "3")
    monkeypatch.setenv("JOBRELAY_DB_POOL_MAX", "7")
    settings = load_settings()
    relay = RelayConfig.from_settings(settings.relay, settings.sqs)
    assert (relay.weights, relay.message_limit_bytes) == (((42, 2.0),), 4096)
    assert relay.lock_timeout_s == settings.relay.lock_timeout_s == 0.3
    limits = BatchLimits.from_settings(settings.batches, settings.sqs)
    assert (limits.max_items, limits.message_limit_bytes) == (3, 4096)
    config = worker_config(settings, jobs_registry(settings))
    assert config.retention_s is None, "0 keeps finished jobs forever"
    assert (config.prefetch, config.schedule_grace_s) == (3, 4.5)
    pool = settings.db.pool_options(min_size=1)
    assert (pool["min_size"], pool["max_size"], pool["wait_s"]) == (1, 7, None)
