"""The SQS worker's webhook client against a real HTTP server: retries 5xx and 429 with the
same webhook id until its budget is spent, honours `Retry-After` within the backoff's cap,
and gives up on a server that never answers (the `jobrelay.loops.retry` rules)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from structlog.testing import capture_logs

from jobrelay.aws.emulator import free_port
from jobrelay.protocol import WorkerOutcome
from jobrelay.sqs_workers.webhook import Delivery, WebhookClient
from jobrelay.webhooks import WebhookSigner
from tests.integration.sqs_worker_harness import SECRET, Receiver, running_receiver

_OUTCOME = WorkerOutcome.model_validate(
    {"kind": "code2des", "id": "cd-1", "outcome": "failed", "errorMessage": "no"}
)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as receiver:
        yield receiver


async def _deliver(url: str, *, budget_s: float, cap_s: float = 0.05) -> Delivery:
    async with httpx.AsyncClient() as http:
        client = WebhookClient(
            http,
            url=url,
            signer=WebhookSigner(SECRET),
            request_timeout_s=5,
            retry_budget_s=budget_s,
            backoff_base_s=0.01,
            backoff_cap_s=cap_s,
        )
        # A bound far above the budget: a wait past it would be a bug, not a slow machine.
        return await asyncio.wait_for(client.deliver(_OUTCOME), timeout=20)


async def test_a_server_that_stays_unavailable_is_given_up_after_the_budget(
    receiver: Receiver,
) -> None:
    receiver.always = 503
    with capture_logs() as logs:
        delivery = await _deliver(receiver.webhook_url, budget_s=0.3)
    seen = receiver.deliveries_for("cd-1")
    assert (delivery.verdict, delivery.status_code) == ("gave_up", 503)
    assert delivery.attempts == len(seen) >= 3
    assert len({d.webhook_id for d in seen}) == 1
    waits = [e for e in logs if e["event"] == "retry.waiting"]
    assert len(waits) == len(seen) - 1
    assert waits[0]["error"] == "WebhookUnavailable: HTTP 503"


async def test_an_unreachable_server_is_given_up_with_no_status() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1/webhooks/worker"
    delivery = await _deliver(url, budget_s=0.2)
    assert (delivery.verdict, delivery.status_code) == ("gave_up", None)
    assert delivery.attempts >= 2


async def test_retry_after_is_honoured_only_up_to_the_cap(receiver: Receiver) -> None:
    receiver.script.extend([429, 503])
    receiver.webhook_headers = {"retry-after": "3600"}
    delivery = await _deliver(receiver.webhook_url, budget_s=10, cap_s=0.05)
    assert (delivery.verdict, delivery.status_code, delivery.attempts) == ("accepted", 200, 3)
    assert [d.status for d in receiver.deliveries_for("cd-1")] == [429, 503, 200]


async def test_a_retry_after_longer_than_the_budget_gives_up_at_once(receiver: Receiver) -> None:
    # The hinted wait (capped at 5 s) would end past the 1 s budget: no second try.
    receiver.always = 429
    receiver.webhook_headers = {"retry-after": "60"}
    delivery = await _deliver(receiver.webhook_url, budget_s=1.0, cap_s=5.0)
    assert (delivery.verdict, delivery.status_code, delivery.attempts) == ("gave_up", 429, 1)
