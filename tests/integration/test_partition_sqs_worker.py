"""The SQS workers under partitions (issue 24): packets dropped, no RST.

The API as the SQS workers see it, black-holed: the worker stores each result, then holds
its message (visibility extended) and keeps delivering the outcome; no receive is spent,
nothing reaches the dead-letter queue, and after the heal every outcome is accepted once,
with the same webhook id and body as before the cut. One log line when reporting starts
failing and one when it recovers.

SQS and S3 as the SQS worker sees them, black-holed for 10 s and for 3 minutes: every
receive fails within its read timeout (one log line), and the messages queued meanwhile are
worked once the network heals.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from structlog.testing import capture_logs

from jobrelay.aws.clients import AwsEndpoint
from tests.harness import AwsTestResources, wait_until
from tests.integration.sqs_worker_harness import (
    Aws,
    Receiver,
    code2des_message,
    running_receiver,
    running_worker,
    worker_config,
)
from tests.partition import Blackhole, TcpRelay, unavailable

pytestmark = pytest.mark.long

MESSAGES = 5
CUT_S = 25.0  # five visibility timeouts, more than the three receives before the DLQ


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as receiver:
        yield receiver


@pytest.fixture
def api_relay(receiver: Receiver) -> Iterator[TcpRelay]:
    if (reason := unavailable()) is not None:
        pytest.skip(reason)
    target = urlsplit(receiver.base_url)
    with TcpRelay((target.hostname or "127.0.0.1", target.port or 80)) as relay:
        yield relay


def test_an_unreachable_api_loses_no_result_and_spends_no_receive(
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
    receiver: Receiver,
    api_relay: TcpRelay,
) -> None:
    check = Aws(aws, aws_resources)
    webhook_url = f"http://127.0.0.1:{api_relay.port}/v1/webhooks/worker"
    config = worker_config(
        aws_resources,
        receiver,
        webhook_url=webhook_url,
        webhook_timeout_s=1,
        webhook_retry_s=3,
        concurrency=MESSAGES,  # a held message keeps its slot while the API is away
    )
    hole = Blackhole(api_relay.port)
    hole.cut()
    try:
        with capture_logs() as logs, running_worker(config, aws):
            children = [f"cd-cut-{n}" for n in range(MESSAGES)]
            for child in children:
                check.send(code2des_message(child, f"<p>{child}</p>"))
            stored = wait_until(
                lambda: len(check.keys("")) >= MESSAGES or None,
                timeout_s=60,
                what="every result stored during the cut",
            )
            assert stored
            time.sleep(CUT_S)  # the outage itself: nothing to poll for
            assert check.dead_letters() == [], "a message reached the dead-letter queue"
            assert all(receiver.accepted(child) is None for child in children)
            hole.heal()
            healed_at = time.monotonic()
            wait_until(
                lambda: all(receiver.accepted(child) for child in children),
                timeout_s=60,
                what="every outcome accepted after the heal",
            )
            accepted_in = time.monotonic() - healed_at
            wait_until(check.queue_empty, timeout_s=60, what="every message deleted")
    finally:
        hole.heal()
    print(f"\nevery outcome accepted {accepted_in:.2f} s after the heal")
    assert check.dead_letters() == []
    for child in children:
        deliveries = [d for d in receiver.deliveries_for(child) if d.status < 300]
        assert len(deliveries) == 1, (child, deliveries)
    failing = [
        e for e in logs if e.get("event") == "loop.failing" and e.get("loop") == "sqs-webhook"
    ]
    recovered = [
        e for e in logs if e.get("event") == "loop.recovered" and e.get("loop") == "sqs-webhook"
    ]
    assert len(failing) == 1 and len(recovered) == 1, (failing, recovered)


@pytest.fixture
def sqs_relay(emulator_url: str) -> Iterator[TcpRelay]:
    if (reason := unavailable()) is not None:
        pytest.skip(reason)
    target = urlsplit(emulator_url)
    with TcpRelay((target.hostname or "127.0.0.1", target.port or 80)) as relay:
        yield relay


@pytest.mark.parametrize("outage_s", [10.0, 180.0], ids=["10s", "3min"])
def test_a_worker_cut_off_from_sqs_and_s3_resumes_after_the_heal(
    outage_s: float,
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
    receiver: Receiver,
    sqs_relay: TcpRelay,
) -> None:
    check = Aws(aws, aws_resources)
    cut_endpoint = AwsEndpoint(
        region=aws.region,
        endpoint_url=f"http://127.0.0.1:{sqs_relay.port}",
        connect_timeout_s=1.0,
        read_timeout_s=2.0,
    )
    hole = Blackhole(sqs_relay.port)
    children = [f"cd-sqs-cut-{n}" for n in range(MESSAGES)]
    try:
        with (
            capture_logs() as logs,
            running_worker(worker_config(aws_resources, receiver), cut_endpoint),
        ):
            check.send(code2des_message("cd-before", "<p>before</p>"))
            wait_until(lambda: receiver.accepted("cd-before"), what="a message before the cut")
            hole.cut()
            for child in children:  # queued while the worker cannot reach SQS
                check.send(code2des_message(child, f"<p>{child}</p>"))
            wait_until(
                lambda: any(
                    e.get("event") == "loop.failing" and e.get("loop") == "sqs-receive"
                    for e in list(logs)
                ),
                timeout_s=30,
                what="the worker to log that receiving fails",
            )
            time.sleep(outage_s)  # the outage itself: nothing to poll for
            hole.heal()
            healed_at = time.monotonic()
            wait_until(
                lambda: all(receiver.accepted(child) for child in children),
                timeout_s=60,
                what="every message worked after the heal",
            )
            worked_in = time.monotonic() - healed_at
            wait_until(check.queue_empty, timeout_s=60, what="every message deleted")
    finally:
        hole.heal()
    print(f"\nevery queued message worked {worked_in:.2f} s after the heal")
    assert check.dead_letters() == []
    failing = [
        e for e in logs if e.get("event") == "loop.failing" and e.get("loop") == "sqs-receive"
    ]
    recovered = [
        e for e in logs if e.get("event") == "loop.recovered" and e.get("loop") == "sqs-receive"
    ]
    assert len(failing) == 1 and len(recovered) == 1, (failing, recovered)
