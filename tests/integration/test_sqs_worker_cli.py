"""`jobrelay sqs-worker` as a process: SIGKILL mid-message, SIGTERM, startup errors."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from jobrelay.aws.clients import AwsEndpoint
from tests.harness import AwsTestResources, cli_env, jobrelay_command, wait_until
from tests.integration.sqs_worker_harness import (
    SECRET,
    Aws,
    Page,
    Receiver,
    page_import_message,
    queue_name,
    running_receiver,
)

PAGE = b"<html><head><title>Crash</title></head><body><main><h1>Still here</h1></main></body>"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as r:
        yield r


def start_worker(
    emulator_url: str, resources: AwsTestResources, receiver: Receiver, **env: str
) -> subprocess.Popen[str]:
    defaults: dict[str, str | None] = {
        "DATABASE_URL": None,
        "JOBRELAY_AWS_ENDPOINT_URL": emulator_url,
        "JOBRELAY_SQS_QUEUE_NAME": queue_name(resources.queues.work),
        "JOBRELAY_S3_BUCKET": resources.bucket,
        "JOBRELAY_SQS_WORKER_WEBHOOK_URL": receiver.webhook_url,
        "JOBRELAY_WEBHOOK_SECRETS": SECRET,
        "JOBRELAY_SQS_WORKER_VISIBILITY_TIMEOUT_S": "2",
        "JOBRELAY_SQS_WORKER_HEARTBEAT_S": "0.5",
        "JOBRELAY_SQS_WORKER_POLL_WAIT_S": "1",
        "JOBRELAY_LOG_FORMAT": "json",
    }
    environment = cli_env(**{**defaults, **env})
    return subprocess.Popen(
        [*jobrelay_command(), "sqs-worker"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def json_lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_a_worker_killed_mid_message_loses_nothing(
    emulator_url: str, aws: AwsEndpoint, aws_resources: AwsTestResources, receiver: Receiver
) -> None:
    check = Aws(aws, aws_resources)
    hold = threading.Event()
    receiver.pages["crash.html"] = Page(PAGE, hold=hold)
    check.send(page_import_message("pi-kill", url=receiver.page_url("crash.html")))

    first = start_worker(emulator_url, aws_resources, receiver)
    try:
        wait_until(lambda: receiver.page_requests["crash.html"], what="the first worker to fetch")
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
    assert first.returncode == -signal.SIGKILL
    hold.set()

    second = start_worker(emulator_url, aws_resources, receiver)
    try:
        delivery = wait_until(lambda: receiver.accepted("pi-kill"), what="the redelivered result")
        wait_until(check.queue_empty, what="the message to be deleted")
    finally:
        second.send_signal(signal.SIGTERM)
        output, _ = second.communicate(timeout=30)
    assert second.returncode == 0, output

    assert receiver.page_requests["crash.html"] == 2
    assert [d.status for d in receiver.deliveries_for("pi-kill")] == [200]
    stored = check.object(delivery.payload["resultUrl"])
    assert json.loads(stored)["title"] == "Crash"
    accepted = [e for e in json_lines(output) if e["event"] == "webhook accepted"]
    assert len(accepted) == 1
    assert accepted[0]["child_id"] == "pi-kill"
    assert accepted[0]["kind"] == "page_import"
    assert accepted[0]["attempt"] == 1
    assert accepted[0]["batch_id"] == "batch-1"
    assert accepted[0]["receive_count"] == 2


def test_sigterm_abandons_an_unfinished_message_and_exits_cleanly(
    emulator_url: str, aws: AwsEndpoint, aws_resources: AwsTestResources, receiver: Receiver
) -> None:
    check = Aws(aws, aws_resources)
    hold = threading.Event()
    receiver.pages["stuck.html"] = Page(PAGE, hold=hold)
    check.send(page_import_message("pi-term", url=receiver.page_url("stuck.html")))

    worker = start_worker(
        emulator_url,
        aws_resources,
        receiver,
        JOBRELAY_SQS_WORKER_VISIBILITY_TIMEOUT_S="600",
        JOBRELAY_SQS_WORKER_SHUTDOWN_GRACE_S="0.5",
    )
    try:
        wait_until(lambda: receiver.page_requests["stuck.html"], what="the worker to fetch")
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=30)
        hold.set()
    assert worker.returncode == 0, output
    assert check.counts() == (1, 0), "abandoned, so visible again before the 600 s timeout"
    assert receiver.deliveries == []
    events = [e["event"] for e in json_lines(output)]
    assert "message abandoned; visible again" in events
    assert events[-1] == "sqs worker stopped"


def test_a_missing_queue_is_one_clear_message(
    emulator_url: str, aws_resources: AwsTestResources, receiver: Receiver
) -> None:
    worker = start_worker(
        emulator_url, aws_resources, receiver, JOBRELAY_SQS_QUEUE_NAME="no-such-queue"
    )
    output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 2
    assert "the work queue 'no-such-queue' is not available" in output
    assert "Traceback" not in output
