"""The record a running `jobrelay up` leaves beside its pid file, read by one-shot commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobrelay.cli.running_stack import (
    attach_to_running_stack,
    record_path,
    recorded,
    running_stack,
)
from jobrelay.settings import Settings, load_settings


@pytest.fixture(autouse=True)
def _no_explicit_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings given in the environment would win over the record; these tests set them."""
    for name in (
        "JOBRELAY_API_HOST",
        "JOBRELAY_API_PORT",
        "JOBRELAY_AWS_ENDPOINT_URL",
        "JOBRELAY_SQS_WORKER_WEBHOOK_URL",
    ):
        monkeypatch.delenv(name, raising=False)


def _settings(data_dir: Path, **explicit: object) -> Settings:
    return load_settings(data_dir=data_dir, **explicit)


def test_the_record_lives_while_the_block_runs(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "fresh")
    with recorded(
        settings,
        api_url="http://127.0.0.1:8123",
        aws_endpoint_url="http://127.0.0.1:5123",
        emulator_started=True,
    ) as path:
        assert path == tmp_path / "fresh" / "up.json"
        assert json.loads(path.read_text())["pid"] == os.getpid()
        stack = running_stack(settings)
        assert stack is not None and stack.api_url == "http://127.0.0.1:8123"
        attached = attach_to_running_stack(settings)
        assert (attached.api.host, attached.api.port) == ("127.0.0.1", 8123)
        assert attached.aws.endpoint_url == "http://127.0.0.1:5123"
        # An SQS worker started alone posts its outcomes to up's API.
        assert attached.sqs_worker.webhook_url == "http://127.0.0.1:8123/v1/webhooks/worker"
    assert not path.exists()
    assert running_stack(settings) is None
    assert attach_to_running_stack(settings) == settings


def test_explicit_settings_win_over_the_record(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path,
        api={"port": 9000},
        aws={"endpoint_url": "http://aws.example:4566"},
        sqs_worker={"webhook_url": "http://hooks.example/worker"},
    )
    with recorded(
        settings,
        api_url="http://127.0.0.1:8123",
        aws_endpoint_url="http://127.0.0.1:5123",
        emulator_started=True,
    ):
        attached = attach_to_running_stack(settings)
    assert attached.api.port == 9000
    assert attached.aws.endpoint_url == "http://aws.example:4566"
    assert attached.sqs_worker.webhook_url == "http://hooks.example/worker"


def test_a_record_left_by_a_killed_up_is_ignored(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    record = {"pid": int(gone.stdout), "apiUrl": "http://127.0.0.1:8123", "awsEndpointUrl": None}
    record_path(settings).write_text(json.dumps(record))
    assert running_stack(settings) is None
    assert attach_to_running_stack(settings).api.port == settings.api.port


def test_an_unreadable_record_is_ignored(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    record_path(settings).write_text("{not json")
    assert running_stack(settings) is None
