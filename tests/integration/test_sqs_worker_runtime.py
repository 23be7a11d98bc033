"""The reference SQS worker against the real emulator and a real webhook receiver."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from jobrelay.aws.clients import AwsEndpoint
from jobrelay.sqs_workers.handlers import canonical_json
from jobrelay.sqs_workers.handlers.code2des import design_spec
from jobrelay.sqs_workers.handlers.common import sha256_hex
from jobrelay.sqs_workers.handlers.page_import import build_manifest
from tests.harness import AwsTestResources, wait_until
from tests.integration.sqs_worker_harness import (
    Aws,
    Page,
    Receiver,
    code2des_message,
    code2wf_message,
    page_import_message,
    running_receiver,
    running_worker,
    worker_config,
)

PAGE = b"""<!doctype html><html lang="en"><head><title>Fixture page</title></head>
<body><header><nav><a href="/a">A</a><a href="/b">B</a></nav></header>
<main><h1>Hello</h1><p>Some text.</p><img src="i.png" alt="pic"><video src="v.mp4"></video>
</main><footer><p>Bye</p></footer></body></html>"""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as r:
        yield r


@pytest.fixture
def aws_check(aws: AwsEndpoint, aws_resources: AwsTestResources) -> Aws:
    return Aws(aws, aws_resources)


def test_all_three_kinds_store_results_report_them_and_delete_their_messages(
    aws: AwsEndpoint, aws_resources: AwsTestResources, receiver: Receiver, aws_check: Aws
) -> None:
    receiver.pages["shop.html"] = Page(PAGE)
    page_url = receiver.page_url("shop.html")
    aws_check.send(page_import_message("pi-1", url=page_url))
    aws_check.send(code2des_message("cd-1", "<div class='x'><p>Hi</p></div>", ".x{color:#f00}"))

    with running_worker(worker_config(aws_resources, receiver), aws):
        page_import = wait_until(lambda: receiver.accepted("pi-1"), what="page import webhook")
        code2des = wait_until(lambda: receiver.accepted("cd-1"), what="code2des webhook")
        manifest_key = page_import.payload["resultUrl"]
        aws_check.send(code2wf_message("wf-1", manifest_key, screen_id="tablet"))
        code2wf = wait_until(lambda: receiver.accepted("wf-1"), what="code2wf webhook")
        wait_until(aws_check.queue_empty, what="every message to be deleted")

    assert receiver.unverified == 0, "every delivery carried a valid signature"

    assert page_import.payload["outcome"] == "completed"
    assert manifest_key == "page_import/pi-1/attempt-1/manifest.json"
    manifest_bytes = aws_check.object(manifest_key)
    assert sha256_hex(manifest_bytes) == page_import.payload["manifestHash"]
    assert manifest_bytes == canonical_json(build_manifest(PAGE.decode(), source_url=page_url))

    assert code2des.payload["resultUrl"] == "code2des/cd-1/attempt-1/design.json"
    design = aws_check.object(code2des.payload["resultUrl"])
    assert design == canonical_json(design_spec("<div class='x'><p>Hi</p></div>", ".x{color:#f00}"))

    assert code2wf.payload["resultUrl"] == "code2wf/wf-1/attempt-1/wireframe.json"
    assert code2wf.payload["attempt"] == 1
    wireframe = json.loads(aws_check.object(code2wf.payload["resultUrl"]))
    assert code2wf.payload["flagCount"] == wireframe["flagCount"] == 1  # the <video>
    assert wireframe["screen"]["width"] == 768
    assert wireframe["source"]["manifestSha256"] == page_import.payload["manifestHash"]
    assert aws_check.dead_letters() == []


def test_webhook_5xx_is_retried_with_the_same_id_then_the_message_is_deleted(
    aws: AwsEndpoint, aws_resources: AwsTestResources, receiver: Receiver, aws_check: Aws
) -> None:
    receiver.script.extend([503, 500, 502])
    aws_check.send(code2des_message("cd-retry", "<p>x</p>"))

    with running_worker(worker_config(aws_resources, receiver), aws):
        wait_until(lambda: receiver.accepted("cd-retry"), what="the webhook to be accepted")
        wait_until(aws_check.queue_empty, what="the message to be deleted")

    deliveries = receiver.deliveries_for("cd-retry")
    assert [d.status for d in deliveries] == [503, 500, 502, 200]
    assert len({d.webhook_id for d in deliveries}) == 1
    assert len({d.body for d in deliveries}) == 1


def test_webhook_409_deletes_the_message_without_retrying(
    aws: AwsEndpoint, aws_resources: AwsTestResources, receiver: Receiver, aws_check: Aws
) -> None:
    receiver.ended["cd-ended"] = {"id": "cd-ended", "outcome": "failed"}  # ended otherwise
    aws_check.send(code2des_message("cd-ended", "<p>x</p>"))

    with running_worker(worker_config(aws_resources, receiver), aws):
        wait_until(aws_check.queue_empty, what="the message to be deleted")

    assert [d.status for d in receiver.deliveries_for("cd-ended")] == [409]


def test_webhook_400_leaves_the_message_until_it_reaches_the_dead_letter_queue(
    aws: AwsEndpoint, aws_resources: AwsTestResources, receiver: Receiver, aws_check: Aws
) -> None:
    receiver.always = 400
    body = code2des_message("cd-400", "<p>x</p>")
    aws_check.send(body)
    config = worker_config(aws_resources, receiver, visibility_timeout_s=1, heartbeat_s=0.5)

    with running_worker(config, aws):
        first = wait_until(lambda: receiver.deliveries_for("cd-400"), what="a webhook attempt")
        assert first[0].status == 400
        assert aws_check.counts()[0] + aws_check.counts()[1] == 1, "not deleted"
        dead = wait_until(aws_check.dead_letters, what="the message on the dead-letter queue")

    assert [json.loads(b) for b in dead] == [body]
    # One post per receive (maxReceiveCount=3), never retried within a receive.
    assert [d.status for d in receiver.deliveries_for("cd-400")] == [400, 400, 400]


def test_invalid_message_with_a_readable_id_is_reported_failed(
    aws: AwsEndpoint, aws_resources: AwsTestResources, receiver: Receiver, aws_check: Aws
) -> None:
    aws_check.send(page_import_message("pi-bad", url="ftp://127.0.0.1/secret-token"))

    with running_worker(worker_config(aws_resources, receiver), aws):
        delivery = wait_until(lambda: receiver.accepted("pi-bad"), what="the failed outcome")
        wait_until(aws_check.queue_empty, what="the message to be deleted")

    assert delivery.payload["kind"] == "page_import"
    assert delivery.payload["outcome"] == "failed"
    assert delivery.payload["errorMessage"].startswith("invalid message: request.url")
    assert "secret-token" not in delivery.payload["errorMessage"]


def test_unreadable_message_reaches_the_dead_letter_queue_without_a_webhook(
    aws: AwsEndpoint, aws_resources: AwsTestResources, receiver: Receiver, aws_check: Aws
) -> None:
    aws_check.send("this is not json")

    with running_worker(worker_config(aws_resources, receiver), aws):
        dead = wait_until(aws_check.dead_letters, what="the message on the dead-letter queue")

    assert dead == ["this is not json"]
    assert receiver.deliveries == []


def test_duplicate_messages_write_the_same_bytes_to_the_same_key_and_are_harmless(
    aws: AwsEndpoint, aws_resources: AwsTestResources, receiver: Receiver, aws_check: Aws
) -> None:
    receiver.pages["dup.html"] = Page(PAGE)
    body = page_import_message("pi-dup", url=receiver.page_url("dup.html"))
    aws_check.send(body)
    aws_check.send(body)

    with running_worker(worker_config(aws_resources, receiver), aws):
        wait_until(lambda: len(receiver.deliveries_for("pi-dup")) == 2, what="two deliveries")
        wait_until(aws_check.queue_empty, what="both messages to be deleted")
        # The child has ended; the same message once more changes nothing.
        receiver.pages["dup.html"] = Page(PAGE.replace(b"Hello", b"Changed since"))
        aws_check.send(body)
        wait_until(lambda: len(receiver.deliveries_for("pi-dup")) == 3, what="a third delivery")
        wait_until(aws_check.queue_empty, what="the third message to be deleted")

    deliveries = receiver.deliveries_for("pi-dup")
    assert [d.status for d in deliveries] == [200, 200, 200]
    assert len({d.body for d in deliveries}) == 1, "same outcome, same hash"
    assert len({d.webhook_id for d in deliveries}) == 1
    assert aws_check.keys("page_import/pi-dup/") == ["page_import/pi-dup/attempt-1/manifest.json"]
    stored = aws_check.object("page_import/pi-dup/attempt-1/manifest.json")
    assert sha256_hex(stored) == deliveries[0].payload["manifestHash"]


def test_visibility_is_extended_while_a_slow_handler_works(
    aws: AwsEndpoint, aws_resources: AwsTestResources, receiver: Receiver, aws_check: Aws
) -> None:
    hold = threading.Event()
    receiver.pages["slow.html"] = Page(PAGE, hold=hold)
    aws_check.send(page_import_message("pi-slow", url=receiver.page_url("slow.html")))
    config = worker_config(aws_resources, receiver, visibility_timeout_s=2, heartbeat_s=0.5)

    with running_worker(config, aws):
        wait_until(lambda: receiver.page_requests["slow.html"], what="the worker to fetch")
        # A competing consumer long-polls for twice the visibility timeout and sees nothing:
        # the worker keeps extending the message it is working on.
        competing = aws_check.sqs.receive_message(
            QueueUrl=aws_resources.queues.work, WaitTimeSeconds=4, MaxNumberOfMessages=10
        )
        assert competing.get("Messages", []) == []
        hold.set()
        wait_until(lambda: receiver.accepted("pi-slow"), what="the webhook")
        wait_until(aws_check.queue_empty, what="the message to be deleted")

    assert receiver.page_requests["slow.html"] == 1
    assert len(receiver.deliveries_for("pi-slow")) == 1


def test_transient_page_errors_are_redelivered_and_fail_the_child_on_the_last_receive(
    aws: AwsEndpoint, aws_resources: AwsTestResources, receiver: Receiver, aws_check: Aws
) -> None:
    receiver.pages["down.html"] = Page(b"busy", status=503, content_type="text/plain")
    aws_check.send(page_import_message("pi-down", url=receiver.page_url("down.html")))
    config = worker_config(aws_resources, receiver, visibility_timeout_s=1, heartbeat_s=0.5)

    with running_worker(config, aws):
        delivery = wait_until(lambda: receiver.accepted("pi-down"), what="the failed outcome")
        wait_until(aws_check.queue_empty, what="the message to be deleted")

    assert receiver.page_requests["down.html"] == 3, "one fetch per receive, maxReceiveCount=3"
    assert delivery.payload["outcome"] == "failed"
    assert delivery.payload["errorMessage"] == (
        "gave up after 3 deliveries: page answered HTTP 503"
    )
    assert aws_check.dead_letters() == []


def test_several_messages_are_worked_at_once_up_to_the_concurrency(
    aws: AwsEndpoint, aws_resources: AwsTestResources, receiver: Receiver, aws_check: Aws
) -> None:
    hold = threading.Event()
    for index in range(4):
        receiver.pages[f"p{index}.html"] = Page(PAGE, hold=hold)
        aws_check.send(page_import_message(f"pi-c{index}", url=receiver.page_url(f"p{index}.html")))
    config = worker_config(aws_resources, receiver, concurrency=3)

    with running_worker(config, aws):
        wait_until(lambda: sum(receiver.page_requests.values()) == 3, what="three fetches at once")
        assert aws_check.counts() == (1, 3), "the fourth waits for a free slot"
        hold.set()
        wait_until(aws_check.queue_empty, what="all messages to be deleted")

    assert all(receiver.accepted(f"pi-c{index}") for index in range(4))


def test_stopping_abandons_unfinished_messages_so_they_are_visible_at_once(
    aws: AwsEndpoint, aws_resources: AwsTestResources, receiver: Receiver, aws_check: Aws
) -> None:
    hold = threading.Event()
    receiver.pages["stuck.html"] = Page(PAGE, hold=hold)
    aws_check.send(page_import_message("pi-stuck", url=receiver.page_url("stuck.html")))
    config = worker_config(aws_resources, receiver, visibility_timeout_s=120, shutdown_grace_s=0.2)

    with running_worker(config, aws):
        wait_until(lambda: receiver.page_requests["stuck.html"], what="the worker to fetch")
    # The worker has stopped; with a 120 s visibility timeout only abandonment explains this.
    assert aws_check.counts() == (1, 0)
    hold.set()
    assert receiver.deliveries_for("pi-stuck") == []


def test_a_first_send_skips_the_lookup_and_an_earlier_result_still_wins(
    aws: AwsEndpoint, aws_resources: AwsTestResources, receiver: Receiver, aws_check: Aws
) -> None:
    # The relay's first send (dispatch_attempt 1, first receive) does not look for a stored
    # result; were one there anyway, the conditional put keeps it and it is what is reported.
    receiver.pages["first.html"] = Page(PAGE)
    key = "page_import/pi-first/attempt-1/manifest.json"
    earlier = b'{"earlier": true}'
    aws_check.s3.put_object(Bucket=aws_resources.bucket, Key=key, Body=earlier)
    body = page_import_message("pi-first", url=receiver.page_url("first.html"))
    aws_check.sqs.send_message(
        QueueUrl=aws_resources.queues.work,
        MessageBody=json.dumps(body),
        MessageAttributes={"dispatch_attempt": {"DataType": "Number", "StringValue": "1"}},
    )
    with running_worker(worker_config(aws_resources, receiver), aws):
        wait_until(lambda: receiver.accepted("pi-first"), what="the outcome")
        wait_until(aws_check.queue_empty, what="the message to be deleted")
    delivery = receiver.accepted("pi-first")
    assert delivery is not None
    assert delivery.payload["manifestHash"] == sha256_hex(earlier)
    assert aws_check.object(key) == earlier
