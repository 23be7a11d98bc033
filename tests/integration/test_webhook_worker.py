"""`POST /v1/webhooks/worker` (issue 6 webhook matrix) against real PostgreSQL."""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from jobrelay.auth.tenancy import ProjectScope
from tests.batch_support import SECRET, create_batch, outcome, page_items, post_webhook, signed
from tests.harness import ApiHarness, api_harness


async def _children(api: ApiHarness, scope: ProjectScope, count: int = 1, **kw: Any) -> list[str]:
    batch = await create_batch(api, scope, page_items(count), **kw)
    items = (
        await api.client.get(f"/v1/batches/{batch['id']}/items", headers=api.headers())
    ).json()["items"]
    return [i["jobId"] for i in items]


def _child(dsn: str, child_id: str, table: str = "page_import") -> dict[str, Any]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        row = conn.execute(
            f"SELECT status, result_url, error_message, updated_at, updated_by "
            f"FROM {table} WHERE id = %s",
            (child_id,),
        ).fetchone()
    assert row is not None
    return row


async def test_completed_outcome_is_applied_once_then_acknowledged(
    api: ApiHarness, db_dsn: str
) -> None:
    [child] = await _children(api, await api.tenant("alice"))
    first = await post_webhook(api.client, outcome(child))
    assert first.status_code == 200
    assert first.json() == {"kind": "page_import", "id": child, "status": "1", "changed": True}
    row = _child(db_dsn, child)
    assert row["status"] == "1"
    assert row["result_url"] == f"results/{child}/manifest.json"
    assert row["updated_by"] == "webhook"
    detail = (await api.client.get(f"/v1/page-imports/{child}", headers=api.headers())).json()
    assert detail["manifestHash"] == "ab" * 32

    again = await post_webhook(api.client, outcome(child))  # a new webhook-id, same outcome
    assert again.status_code == 200
    assert again.json()["changed"] is False
    assert _child(db_dsn, child)["updated_at"] == row["updated_at"]

    conflicting = await post_webhook(api.client, outcome(child, "failed"))
    assert conflicting.status_code == 409
    assert conflicting.headers["content-type"] == "application/problem+json"
    assert _child(db_dsn, child) == row


async def test_failed_outcome_and_code2des(api: ApiHarness, db_dsn: str) -> None:
    scope = await api.tenant("alice")
    [page] = await _children(api, scope)
    failed = await post_webhook(api.client, outcome(page, "failed"))
    assert failed.status_code == 200
    assert _child(db_dsn, page)["error_message"] == "the page could not be fetched"
    batch = await create_batch(api, scope, [{"html": "<p/>"}], batch_type="code2des")
    [item] = (
        await api.client.get(f"/v1/batches/{batch['id']}/items", headers=api.headers())
    ).json()["items"]
    done = await post_webhook(api.client, outcome(item["jobId"], kind="code2des"))
    assert done.status_code == 200
    assert _child(db_dsn, item["jobId"], "code2des")["status"] == "1"
    status = (await api.client.get(f"/v1/batches/{batch['id']}", headers=api.headers())).json()
    assert status["status"] == "1"


async def test_a_cancelled_child_stays_cancelled(api: ApiHarness, db_dsn: str) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(1))
    [item] = (
        await api.client.get(f"/v1/batches/{batch['id']}/items", headers=api.headers())
    ).json()["items"]
    await api.client.post(f"/v1/batches/{batch['id']}/cancel", headers=api.headers())
    for result in ("completed", "failed"):
        late = await post_webhook(api.client, outcome(item["jobId"], result))
        assert late.status_code == 200
        assert late.json() == {
            "kind": "page_import", "id": item["jobId"], "status": "3", "changed": False,
        }  # fmt: skip
    assert _child(db_dsn, item["jobId"])["status"] == "3"


async def test_unknown_child_is_404(api: ApiHarness) -> None:
    response = await post_webhook(api.client, outcome("no-such-child"))
    assert response.status_code == 404


def _stale(minutes: int) -> datetime:
    return datetime.now(UTC) + timedelta(minutes=minutes)


@pytest.mark.parametrize(
    "case",
    [
        "wrong-secret",
        "missing-id",
        "missing-signature",
        "missing-timestamp",
        "old",
        "future",
        "tampered",
    ],
)
async def test_unauthenticated_deliveries_are_401_and_change_nothing(
    api: ApiHarness, db_dsn: str, case: str
) -> None:
    [child] = await _children(api, await api.tenant("alice"))
    before = _child(db_dsn, child)
    other = "whsec_" + base64.b64encode(b"another-secret-of-32-bytes-long!").decode()
    raw, headers = signed(
        outcome(child),
        secret=other if case == "wrong-secret" else SECRET,
        timestamp=_stale(-6) if case == "old" else _stale(6) if case == "future" else None,
    )
    if case.startswith("missing-"):
        del headers[f"webhook-{case.removeprefix('missing-')}"]
    if case == "tampered":
        raw = raw.replace(b"completed", b"failed   ")
    response = await api.client.post("/v1/webhooks/worker", content=raw, headers=headers)
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert _child(db_dsn, child) == before


@pytest.mark.parametrize(
    ("case", "body", "header_override"),
    [
        ("timestamp-not-a-number", None, {"webhook-timestamp": "yesterday"}),
        ("signature-not-v1", None, {"webhook-signature": "garbage"}),
        ("signature-not-base64", None, {"webhook-signature": "v1,***"}),
        ("body-not-utf8", b"\xff\xfe{}", {"webhook-signature": "v1,AAAA"}),
        ("body-not-json", b"{not json", None),
        ("json-not-an-outcome", b'{"kind": "page_import"}', None),
        ("outcome-missing-result", b'{"kind":"page_import","id":"x","outcome":"completed"}', None),
        ("json-array", b"[1, 2]", None),
    ],
)
async def test_malformed_deliveries_are_400_never_5xx(
    api: ApiHarness,
    db_dsn: str,
    case: str,
    body: bytes | None,
    header_override: dict[str, str] | None,
) -> None:
    [child] = await _children(api, await api.tenant("alice"))
    before = _child(db_dsn, child)
    raw = body if body is not None else json.dumps(outcome(child)).encode()
    if case == "body-not-utf8":
        _, headers = signed(b"{}")
    else:
        raw, headers = signed(raw)
    headers.update(header_override or {})
    response = await api.client.post("/v1/webhooks/worker", content=raw, headers=headers)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert _child(db_dsn, child) == before


async def test_repeated_webhook_id_is_acknowledged_without_reprocessing(
    api: ApiHarness, db_dsn: str
) -> None:
    [child, other] = await _children(api, await api.tenant("alice"), 2)
    first = await post_webhook(api.client, outcome(child), webhook_id="msg_1")
    row = _child(db_dsn, child)
    replay = await post_webhook(api.client, outcome(child), webhook_id="msg_1")
    assert (replay.status_code, replay.json()) == (first.status_code, first.json())
    assert _child(db_dsn, child) == row
    reused = await post_webhook(api.client, outcome(other), webhook_id="msg_1")
    assert reused.status_code == 409
    assert _child(db_dsn, other)["status"] == "0"


async def test_concurrent_duplicate_delivery_changes_once(db_dsn: str, issuer_dir: Path) -> None:
    """The same delivery posted at once through two apps with their own pools."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE change_log (child_id text, status text)")
        conn.execute(
            "CREATE FUNCTION log_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO change_log VALUES (NEW.id, NEW.status); RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER log_change AFTER UPDATE ON page_import "
            "FOR EACH ROW EXECUTE FUNCTION log_change()"
        )
    async with api_harness(db_dsn, issuer_dir) as one, api_harness(db_dsn, issuer_dir) as two:
        children = await _children(one, await one.tenant("alice"), 5)
        for n, child in enumerate(children):
            raw, headers = signed(outcome(child), webhook_id=f"msg_dup_{n}")
            responses = await asyncio.gather(
                *(
                    app.client.post("/v1/webhooks/worker", content=raw, headers=headers)
                    for app in (one, two, one, two)
                )
            )
            assert {r.status_code for r in responses} == {200}
            assert all(r.json() == responses[0].json() for r in responses)
    with psycopg.connect(db_dsn) as conn:
        changes = conn.execute(
            "SELECT child_id, count(*) FROM change_log GROUP BY child_id"
        ).fetchall()
        deliveries = conn.execute("SELECT count(*) FROM webhook_delivery").fetchone()
    assert sorted(changes) == sorted((c, 1) for c in children)
    assert deliveries == (5,)


async def test_any_configured_secret_verifies(db_dsn: str, issuer_dir: Path) -> None:
    new = "whsec_" + base64.b64encode(b"the-new-secret-after-rotation-01").decode()
    async with api_harness(db_dsn, issuer_dir, webhooks={"secrets": f"{new},{SECRET}"}) as api:
        [a, b] = await _children(api, await api.tenant("alice"), 2)
        assert (await post_webhook(api.client, outcome(a), secret=new)).status_code == 200
        assert (await post_webhook(api.client, outcome(b), secret=SECRET)).status_code == 200
