"""Traces across the real processes (issue 25): `jobrelay api`, `relay`, `worker` and
`sqs-worker`, each exporting OTLP/HTTP to a receiver this test runs on a loopback port.

One trace follows each batch item from its POST through the relay's send (W3C context in
the batch row, then in the SQS message attributes), the SQS worker's handling and its
webhook call (the `traceparent` header) to the webhook's completion in the API; a job
enqueued over the API runs in the worker process as one span per attempt under its
enqueue; a Code2WF generation goes from its POST through its dispatch job to the SQS
worker; and log lines written inside spans carry their trace id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e_support import Stack, page_server, running_stack, tenant, token
from tests.harness import AwsTestResources, run_cli, wait_until
from tests.tracing_support import Collected, Spans, otlp_receiver

pytestmark = pytest.mark.long

ITEMS = 3


def _get(stack: Stack, path: str, headers: dict[str, str]) -> Any:
    response = httpx.get(f"{stack.base_url}{path}", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def _chain(spans: Spans, span: Collected) -> list[tuple[str, str, str]]:
    """(service, kind, name) from `span` up to its trace's root."""
    chain = [(span.service, span.kind, span.name)]
    while span.parent_id is not None:
        span = spans.parent_of(span)
        chain.append((span.service, span.kind, span.name))
    return chain


def test_one_trace_follows_each_batch_item_and_each_job_attempt(
    db_dsn: str, emulator_url: str, aws_resources: AwsTestResources, tmp_path: Path
) -> None:
    project_id = tenant(db_dsn, "alice")
    alice = {"Authorization": f"Bearer {token(tmp_path, 'alice')}"}
    minted = run_cli("token", "--sub", "root", "--admin", JOBRELAY_DATA_DIR=str(tmp_path))
    assert minted.returncode == 0, minted.stderr
    root = {"Authorization": f"Bearer {minted.stdout.strip()}"}
    with (
        otlp_receiver() as (endpoint, spans),
        running_stack(
            db_dsn,
            emulator_url,
            aws_resources,
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_BSP_SCHEDULE_DELAY="100",  # ms: spans leave each process promptly
            JOBRELAY_WORKER_POLL_INTERVAL_S="0.1",
        ) as stack,
        page_server(ITEMS) as urls,
    ):
        created = httpx.post(
            f"{stack.base_url}/v1/projects/{project_id}/batches",
            json={"type": "page_import", "items": [{"url": u} for u in urls]},
            headers=alice,
            timeout=30,
        )
        assert created.status_code == 201, created.text
        batch_id = created.json()["id"]
        job = httpx.post(
            f"{stack.base_url}/v1/jobs",
            json={"type": "diag.fail", "payload": {"kind": "retryable", "times": 1}},
            headers=root,
            timeout=30,
        )
        assert job.status_code == 201, job.text
        job_id = job.json()["id"]

        def ended() -> bool:
            batch = _get(stack, f"/v1/batches/{batch_id}", alice)
            return batch["status"] != "0" and _get(stack, f"/v1/jobs/{job_id}", root)["status"] in (
                "completed",
                "failed",
            )

        wait_until(ended, timeout_s=180, interval_s=0.2, what="the batch and the job to end")
        assert _get(stack, f"/v1/batches/{batch_id}", alice)["status"] == "1"
        assert _get(stack, f"/v1/jobs/{job_id}", root)["status"] == "completed"
        children = [
            item["jobId"] for item in _get(stack, f"/v1/batches/{batch_id}/items", alice)["items"]
        ]
        assert len(children) == ITEMS
        generation = httpx.post(
            f"{stack.base_url}/v1/projects/{project_id}/code2wf",
            json={"pageImportId": children[0], "figmaFileKey": "FIG1", "screenId": "mobile"},
            headers=alice,
            timeout=30,
        )
        assert generation.status_code == 201, generation.text
        code2wf_id = generation.json()["code2wfId"]
        wait_until(
            lambda: _get(stack, f"/v1/code2wf/{code2wf_id}", alice)["status"] != "0",
            timeout_s=120,
            interval_s=0.2,
            what="the generation to end",
        )
        assert _get(stack, f"/v1/code2wf/{code2wf_id}", alice)["status"] == "1"

        def exported() -> bool:
            completions = spans.named("jobrelay.webhook.complete")
            runs = spans.named("jobrelay.jobs.run", **{"jobrelay.job.id": job_id})
            return len(completions) >= ITEMS + 1 and len(runs) >= 2

        wait_until(exported, timeout_s=60, interval_s=0.1, what="the spans to be exported")
        sqs_worker_log = (stack.logs / "sqs-worker.log").read_text(errors="replace")

    post = spans.one("POST /v1/projects/{projectId}/batches")
    assert post.service == "jobrelay-api" and post.parent_id is None
    for child in children:
        completion = [
            s
            for s in spans.named("jobrelay.webhook.complete", **{"jobrelay.child.id": child})
            if not s.attributes["jobrelay.webhook.replayed"]
        ]
        assert len(completion) == 1, (child, completion)
        assert completion[0].attributes["jobrelay.webhook.status_code"] == 200
        assert completion[0].trace_id == post.trace_id
        assert _chain(spans, completion[0]) == [
            ("jobrelay-api", "internal", "jobrelay.webhook.complete"),
            ("jobrelay-api", "server", "POST /v1/webhooks/worker"),
            ("jobrelay-sqs-worker", "client", "jobrelay.webhook.call"),
            ("jobrelay-sqs-worker", "consumer", "jobrelay.sqs_worker.process"),
            ("jobrelay-relay", "producer", "jobrelay.relay.send"),
            ("jobrelay-api", "server", "POST /v1/projects/{projectId}/batches"),
        ]
        send = spans.one("jobrelay.relay.send", **{"jobrelay.child.id": child})
        assert send.attributes["jobrelay.dispatch.attempt"] == 1 and not send.error
    # The SQS worker's log lines inside its spans name the batch's trace.
    lines = [json.loads(line) for line in sqs_worker_log.splitlines() if line.startswith("{")]
    traced = [
        line
        for line in lines
        if line.get("event") == "webhook accepted" and line.get("child_id") in children
    ]
    assert len(traced) == ITEMS and {line.get("trace_id") for line in traced} == {post.trace_id}

    generated = spans.one("jobrelay.webhook.complete", **{"jobrelay.child.id": code2wf_id})
    assert _chain(spans, generated) == [
        ("jobrelay-api", "internal", "jobrelay.webhook.complete"),
        ("jobrelay-api", "server", "POST /v1/webhooks/worker"),
        ("jobrelay-sqs-worker", "client", "jobrelay.webhook.call"),
        ("jobrelay-sqs-worker", "consumer", "jobrelay.sqs_worker.process"),
        ("jobrelay-worker", "consumer", "jobrelay.jobs.run code2wf.dispatch"),
        ("jobrelay-api", "producer", "jobrelay.jobs.enqueue"),
        ("jobrelay-api", "server", "POST /v1/projects/{projectId}/code2wf"),
    ]

    request = spans.one("POST /v1/jobs")
    enqueue = spans.one("jobrelay.jobs.enqueue", **{"jobrelay.job.id": job_id})
    assert spans.parent_of(enqueue) == request and request.parent_id is None
    runs = sorted(
        spans.named("jobrelay.jobs.run diag.fail", **{"jobrelay.job.id": job_id}),
        key=lambda s: s.attributes["jobrelay.job.attempt"],
    )
    assert [(r.service, r.attributes["jobrelay.job.attempt"], r.error) for r in runs] == [
        ("jobrelay-worker", 1, True),
        ("jobrelay-worker", 2, False),
    ]
    assert all(spans.parent_of(r) == enqueue for r in runs)
    claims = spans.named("jobrelay.jobs.claim", **{"jobrelay.job.id": job_id})
    assert {c.attributes["jobrelay.job.claim_token_hash"] for c in claims} == {
        r.attributes["jobrelay.job.claim_token_hash"] for r in runs
    }
