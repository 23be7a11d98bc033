"""End to end (issue 9): the stack as real processes, a batch over HTTP with a token from
`jobrelay token`, real page fetching and parsing by the reference worker, results in S3,
signed webhooks back; with a worker SIGKILLed and the API restarted mid-run; Code2WF."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from jobrelay.aws.clients import AwsEndpoint, s3_client
from jobrelay.aws.emulator import free_port
from tests.e2e_support import Stack, page_server, running_stack, tenant, token
from tests.harness import AwsTestResources, cli_env, jobrelay_command, wait_until

pytestmark = pytest.mark.slow


def _submit(stack: Stack, headers: dict[str, str], project_id: int, urls: list[str]) -> str:
    response = httpx.post(
        f"{stack.base_url}/v1/projects/{project_id}/batches",
        json={"type": "page_import", "items": [{"url": u} for u in urls]},
        headers=headers,
        timeout=30,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _batch(stack: Stack, headers: dict[str, str], batch_id: str) -> dict[str, Any] | None:
    try:
        response = httpx.get(f"{stack.base_url}/v1/batches/{batch_id}", headers=headers, timeout=5)
    except httpx.HTTPError:
        return None  # the API may be restarting
    return response.json() if response.status_code == 200 else None


def _code2wf_from_first_item(
    stack: Stack, headers: dict[str, str], project_id: int, batch_id: str
) -> dict[str, Any]:
    """Create a Code2WF generation from the batch's first Page Import and wait until it ends."""
    items = httpx.get(f"{stack.base_url}/v1/batches/{batch_id}/items", headers=headers)
    page_import_id = items.json()["items"][0]["jobId"]
    created = httpx.post(
        f"{stack.base_url}/v1/projects/{project_id}/code2wf",
        json={"pageImportId": page_import_id, "figmaFileKey": "FIG1", "screenId": "mobile"},
        headers=headers,
    )
    assert created.status_code == 201, created.text
    code2wf_id = created.json()["code2wfId"]

    def finished() -> dict[str, Any] | None:
        row = httpx.get(f"{stack.base_url}/v1/code2wf/{code2wf_id}", headers=headers).json()
        return row if row["status"] != "0" else None

    row: dict[str, Any] = wait_until(finished, timeout_s=120, interval_s=0.2, what="the generation")
    return row


def _terminal(stack: Stack, headers: dict[str, str], batch_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        batch = _batch(stack, headers, batch_id)
        return batch if batch and batch["status"] != "0" else None

    return wait_until(done, timeout_s=180, interval_s=0.2, what=f"batch {batch_id} to end")


async def _manifests_match_their_hashes(dsn: str, aws: AwsEndpoint, bucket: str) -> int:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, status, result_url, manifest_hash FROM page_import"
        ).fetchall()
    async with s3_client(aws) as s3:
        for child_id, status, key, digest in rows:
            assert status == "1", (child_id, status)
            body = await (await s3.get_object(Bucket=bucket, Key=key))["Body"].read()
            assert hashlib.sha256(body).hexdigest() == digest, child_id
            manifest = json.loads(body)
            assert manifest["title"].startswith("Demo page"), manifest
    return len(rows)


async def test_a_50_item_batch_completes_end_to_end(
    db_dsn: str,
    emulator_url: str,
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
    tmp_path: Path,
) -> None:
    project_id = tenant(db_dsn, "alice")
    headers = {"Authorization": f"Bearer {token(tmp_path, 'alice')}"}
    with (
        running_stack(db_dsn, emulator_url, aws_resources, tmp_path) as stack,
        page_server(50) as urls,
    ):
        batch_id = _submit(stack, headers, project_id, urls)
        batch = _terminal(stack, headers, batch_id)
    assert batch["status"] == "1", batch
    assert batch["counts"]["completed"] == 50
    assert await _manifests_match_their_hashes(db_dsn, aws, aws_resources.bucket) == 50


# 15-27 s of kills and restarts: in make test-long (CI runs it), keeping make test in budget.
@pytest.mark.long
async def test_a_sqs_worker_killed_mid_run_and_an_api_restart_do_not_stop_the_batch(
    db_dsn: str,
    emulator_url: str,
    aws: AwsEndpoint,
    aws_resources: AwsTestResources,
    tmp_path: Path,
) -> None:
    project_id = tenant(db_dsn, "alice")
    headers = {"Authorization": f"Bearer {token(tmp_path, 'alice')}"}
    with (
        running_stack(
            db_dsn,
            emulator_url,
            aws_resources,
            tmp_path,
            JOBRELAY_SQS_WORKER_VISIBILITY_TIMEOUT_S="3",
            JOBRELAY_SQS_WORKER_HEARTBEAT_S="1",
            JOBRELAY_SQS_WORKER_CONCURRENCY="2",
        ) as stack,
        page_server(50) as urls,
    ):
        stack.stop("api")  # outcomes cannot be delivered for a while
        stack.start("api")  # (the API must be up to accept the batch)
        batch_id = _submit(stack, headers, project_id, urls)

        def some_done() -> bool:
            batch = _batch(stack, headers, batch_id)
            return bool(batch and batch["counts"]["completed"] >= 5)

        wait_until(some_done, timeout_s=120, interval_s=0.1, what="first completions")
        stack.stop("sqs-worker", signal.SIGKILL)  # messages in flight are abandoned
        stack.stop("api")  # webhooks now fail until the API is back
        stack.start("sqs-worker")
        stack.start("api")
        batch = _terminal(stack, headers, batch_id)
    assert batch["status"] == "1", batch
    assert batch["counts"]["completed"] == 50
    assert await _manifests_match_their_hashes(db_dsn, aws, aws_resources.bucket) == 50


def test_code2wf_end_to_end(
    db_dsn: str, emulator_url: str, aws_resources: AwsTestResources, tmp_path: Path
) -> None:
    project_id = tenant(db_dsn, "alice")
    headers = {"Authorization": f"Bearer {token(tmp_path, 'alice')}"}
    with (
        running_stack(db_dsn, emulator_url, aws_resources, tmp_path) as stack,
        page_server(1) as urls,
    ):
        batch_id = _submit(stack, headers, project_id, urls)
        assert _terminal(stack, headers, batch_id)["status"] == "1"
        row = _code2wf_from_first_item(stack, headers, project_id, batch_id)
        code2wf_id = row["code2wfId"]
        assert row["status"] == "1", row
        assert row["flagCount"] >= 0 and row["resultUrl"].startswith(f"code2wf/{code2wf_id}/")
        discovered = httpx.get(
            f"{stack.base_url}/v1/projects/{project_id}/code2wf",
            params={"figmaFileKey": "FIG1", "status": "1"},
            headers=headers,
        ).json()
        assert [g["code2wfId"] for g in discovered["items"]] == [code2wf_id]
        result = httpx.get(f"{stack.base_url}/v1/code2wf/{code2wf_id}/result", headers=headers)
        assert result.status_code == 200
        assert isinstance(result.json(), dict)
        placed = httpx.post(
            f"{stack.base_url}/v1/code2wf/{code2wf_id}/materialize", headers=headers
        )
        assert placed.status_code == 200 and placed.json()["materializedAt"]


def test_up_prints_urls_and_demo_completes_a_batch(tmp_path: Path) -> None:
    port = str(free_port())
    env = cli_env(
        DATABASE_URL=None,
        JOBRELAY_AWS_ENDPOINT_URL=None,
        JOBRELAY_DATA_DIR=str(tmp_path),
        JOBRELAY_API_PORT=port,
    )
    up = subprocess.Popen(
        [*jobrelay_command(), "up"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert up.stdout is not None
        seen: list[str] = []
        for line in up.stdout:
            seen.append(line)
            if "Press Ctrl-C to stop." in line:
                break
        text = "".join(seen)
        assert f"http://127.0.0.1:{port}/docs" in text, text
        assert "export TOKEN=" in text
        demo = subprocess.run(
            [*jobrelay_command(), "demo", "--timeout", "120"],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "(25 completed, 0 failed, 0 cancelled of 25)" in demo.stdout
        assert "Code2WF" in demo.stdout and ": completed" in demo.stdout
    finally:
        up.send_signal(signal.SIGINT)
        up.communicate(timeout=60)
    assert up.returncode == 0
