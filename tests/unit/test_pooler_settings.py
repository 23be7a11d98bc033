"""Which connection LISTENs and how the claim connection is set up, by the declared pooler
(issue 13): settings only, no database."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict
from structlog.testing import capture_logs

from jobrelay.bootstrap import jobs_registry, worker_config
from jobrelay.bootstrap.database import listen_conninfo
from jobrelay.settings import Settings, load_settings

POOLED = "postgresql://app@127.0.0.1:6432/jobs"
DIRECT = "postgresql://app@127.0.0.1:5432/jobs"


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    for name in ("DATABASE_URL", "JOBRELAY_DATABASE_POOLER", "JOBRELAY_DATABASE_DIRECT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return load_settings()


def test_without_a_pooler_the_pool_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(monkeypatch, DATABASE_URL=DIRECT)
    with capture_logs() as logs:
        assert listen_conninfo(settings, "relay") is None
    assert logs == []
    config = worker_config(settings, jobs_registry(settings))
    assert config.listen and config.listen_conninfo is None and config.claim_session_settings


def test_a_transaction_pooler_listens_on_the_direct_url(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(
        monkeypatch,
        DATABASE_URL=POOLED,
        JOBRELAY_DATABASE_POOLER="transaction",
        JOBRELAY_DATABASE_DIRECT_URL=DIRECT,
    )
    # The direct URL, with the network timeouts every connection gets (issue 24).
    listen = listen_conninfo(settings, "relay")
    assert listen is not None
    params = conninfo_to_dict(listen)
    assert (params["host"], params["port"], params["dbname"]) == ("127.0.0.1", "5432", "jobs")
    assert params["tcp_user_timeout"] == "2000" and params["keepalives"] == "1"
    config = worker_config(settings, jobs_registry(settings))
    assert config.listen and config.listen_conninfo == listen
    assert not config.claim_session_settings, "session SETs would leak through the pooler"


def test_a_transaction_pooler_without_direct_url_polls_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = _settings(monkeypatch, DATABASE_URL=POOLED, JOBRELAY_DATABASE_POOLER="transaction")
    with capture_logs() as logs:
        assert listen_conninfo(settings, "relay") == ""
        config = worker_config(settings, jobs_registry(settings))
    assert not config.listen and not config.claim_session_settings
    assert [(e["event"], e["component"]) for e in logs] == [
        ("database.listen_unavailable", "relay"),
        ("database.listen_unavailable", "worker"),
    ]


def test_an_unknown_pooler_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="database_pooler"):
        _settings(monkeypatch, DATABASE_URL=POOLED, JOBRELAY_DATABASE_POOLER="session")
