"""Batch API against real PostgreSQL: creation in one transaction, validation with positions,
derived status, items, cancel, soft delete, children, scoping (issue 6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from jobrelay.protocol import Code2DesMessage, Code2DesRequest, PageImportMessage
from tests.batch_support import create_batch, page_items
from tests.harness import ApiHarness, api_harness


def _rows(dsn: str, sql: str, *params: object) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]


def _count(dsn: str, table: str) -> int:
    return int(_rows(dsn, f"SELECT count(*) AS n FROM {table}")[0]["n"])


async def test_creation_stores_batch_children_and_outbox_in_one_go(
    api: ApiHarness, db_dsn: str
) -> None:
    scope = await api.tenant("alice")
    items = [{"url": "https://example.com/a"}, {"html": "<p>b</p>"}]
    batch = await create_batch(api, scope, items)

    assert batch["status"] == "0"
    assert batch["counts"] == {
        "total": 2, "queued": 2, "running": 0, "completed": 0, "failed": 0, "cancelled": 0,
    }  # fmt: skip
    assert batch["createdBy"] == "alice"
    rows = _rows(
        db_dsn,
        "SELECT bi.*, p.status, p.request AS child_request, p.created_by AS child_by "
        "FROM batch_item bi JOIN page_import p ON p.id = bi.job_id "
        "WHERE bi.batch_id = %s ORDER BY position",
        batch["id"],
    )
    assert [r["position"] for r in rows] == [0, 1]
    assert [r["request"] for r in rows] == items
    for row, item in zip(rows, items, strict=True):
        assert row["status"] == "0"
        assert row["child_request"] == item
        assert row["dispatch_attempts"] == 0
        assert row["dispatched_at"] is None
        assert (row["created_by"], row["child_by"]) == ("alice", "alice")
        expected = PageImportMessage.model_validate(
            {
                "page_import_id": row["job_id"],
                "batch_id": batch["id"],
                "organization_id": scope.organization_id,
                "project_id": scope.project_id,
                "request": item,
            }
        ).model_dump(mode="json")
        assert row["message"] == expected


async def test_code2des_batches_create_code2des_children(api: ApiHarness, db_dsn: str) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(
        api, scope, [{"html": "<b>x</b>", "css": "b{}"}], batch_type="code2des"
    )
    [row] = _rows(
        db_dsn,
        "SELECT bi.message, c.status FROM batch_item bi JOIN code2des c ON c.id = bi.job_id "
        "WHERE bi.batch_id = %s",
        batch["id"],
    )
    message = Code2DesMessage.model_validate(row["message"])
    assert message.request == Code2DesRequest(html="<b>x</b>", css="b{}")
    child = await api.client.get(f"/v1/code2des/{message.code2des_id}", headers=api.headers())
    assert child.status_code == 200
    assert child.json()["status"] == "0"
    assert child.json()["batchId"] == batch["id"]


@pytest.mark.parametrize(
    ("body", "paths"),
    [
        ({"type": "video", "items": [{"url": "https://e.com"}]}, ["type"]),
        ({"type": "page_import", "items": []}, ["items"]),
        (
            {
                "type": "page_import",
                "items": [
                    {"url": "https://ok.example"},
                    {"url": "not a url"},
                    {"url": "https://e.com", "html": "<p/>"},
                    {"html": ""},
                    "text",
                ],
            },
            ["items.1.url", "items.2", "items.3.html", "items.4"],
        ),
        (
            {"type": "code2des", "items": [{"html": "<p/>"}, {"css": "a{}"}, {"html": 3}]},
            ["items.1.html", "items.2.html"],
        ),
        (
            {"type": "page_import", "items": [{"url": "https://e.com", "extra": 1}]},
            ["items.0.extra"],
        ),
    ],
)
async def test_invalid_batches_are_422_with_positions_and_store_nothing(
    api: ApiHarness, db_dsn: str, body: dict[str, Any], paths: list[str]
) -> None:
    scope = await api.tenant("alice")
    response = await api.client.post(
        f"/v1/projects/{scope.project_id}/batches", json=body, headers=api.headers()
    )
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert [e["path"] for e in response.json()["errors"]] == paths
    for table in ("batch", "batch_item", "page_import", "code2des"):
        assert _count(db_dsn, table) == 0


async def test_item_limit_and_utf8_message_size_are_checked_before_writing(
    db_dsn: str, issuer_dir: Path
) -> None:
    async with api_harness(
        db_dsn, issuer_dir, batches={"max_items": 3}, sqs={"message_limit_bytes": 4096}
    ) as api:
        scope = await api.tenant("alice")
        url = f"/v1/projects/{scope.project_id}/batches"
        too_many = await api.client.post(
            url, json={"type": "page_import", "items": page_items(4)}, headers=api.headers()
        )
        assert too_many.status_code == 422
        assert too_many.json()["errors"][0]["path"] == "items"
        # 1,500 characters but 4,500 UTF-8 bytes: over the limit although short in characters.
        wide = "日" * 1500
        oversized = await api.client.post(
            url,
            json={"type": "code2des", "items": [{"html": "<p/>"}, {"html": wide}]},
            headers=api.headers(),
        )
        assert oversized.status_code == 422
        [error] = oversized.json()["errors"]
        assert error["path"] == "items.1"
        assert "bytes" in error["message"]
        fits = await api.client.post(
            url, json={"type": "code2des", "items": [{"html": "日" * 1000}]}, headers=api.headers()
        )
        assert fits.status_code == 201
    assert _count(db_dsn, "batch") == 1
    assert _count(db_dsn, "batch_item") == 1


async def test_size_check_counts_the_body_the_relay_sends(api: ApiHarness, db_dsn: str) -> None:
    """The creation-time estimate equals the UTF-8 length of PostgreSQL's `message::text`."""
    from jobrelay.batches.creation import message_size

    scope = await api.tenant("alice")
    batch = await create_batch(
        api, scope, [{"html": 'é "quoted" \n\t 日本 \\ /'}], batch_type="code2des"
    )
    [row] = _rows(
        db_dsn,
        "SELECT message, message::text AS body FROM batch_item WHERE batch_id = %s",
        batch["id"],
    )
    assert message_size(row["message"]) == len(row["body"].encode("utf-8"))


async def test_unknown_and_foreign_batches_are_404(api: ApiHarness) -> None:
    alice = await api.tenant("alice")
    await api.tenant("bob")
    batch = await create_batch(api, alice, page_items(1))
    [child] = (
        await api.client.get(f"/v1/batches/{batch['id']}/items", headers=api.headers())
    ).json()["items"]
    for sub, batch_id in (("alice", "no-such-batch"), ("bob", batch["id"])):
        headers = api.headers(sub)
        assert (await api.client.get(f"/v1/batches/{batch_id}", headers=headers)).status_code == 404
        assert (
            await api.client.get(f"/v1/batches/{batch_id}/items", headers=headers)
        ).status_code == 404
        assert (
            await api.client.post(f"/v1/batches/{batch_id}/cancel", headers=headers)
        ).status_code == 404
        assert (
            await api.client.delete(f"/v1/batches/{batch_id}", headers=headers)
        ).status_code == 404
    bob = api.headers("bob")
    assert (
        await api.client.get(f"/v1/page-imports/{child['jobId']}", headers=bob)
    ).status_code == 404
    assert (await api.client.get("/v1/page-imports/nope", headers=api.headers())).status_code == 404
    assert (await api.client.get("/v1/code2des/nope", headers=api.headers())).status_code == 404
    foreign = await api.client.post(
        f"/v1/projects/{alice.project_id}/batches",
        json={"type": "page_import", "items": page_items(1)},
        headers=bob,
    )
    assert foreign.status_code == 404
    assert (await api.client.get(f"/v1/batches/{batch['id']}")).status_code == 401


async def test_items_page_by_position(api: ApiHarness) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(7))
    seen: list[int] = []
    after = -1
    while True:
        page = (
            await api.client.get(
                f"/v1/batches/{batch['id']}/items",
                params={"after": after, "limit": 3},
                headers=api.headers(),
            )
        ).json()
        seen.extend(i["position"] for i in page["items"])
        assert all(i["state"] == "queued" and i["dispatchAttempts"] == 0 for i in page["items"])
        if page["nextAfter"] is None:
            break
        after = page["nextAfter"]
    assert seen == list(range(7))
    child = page["items"][-1]["jobId"]
    detail = (await api.client.get(f"/v1/page-imports/{child}", headers=api.headers())).json()
    assert detail["request"] == {"url": "https://example.com/page/6"}
    assert detail["status"] == "0"


async def test_cancel_ends_every_open_item_and_is_idempotent(api: ApiHarness, db_dsn: str) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(3))
    cancelled = await api.client.post(f"/v1/batches/{batch['id']}/cancel", headers=api.headers())
    assert cancelled.status_code == 200
    body = cancelled.json()
    assert body["status"] == "3"
    assert body["counts"]["cancelled"] == 3
    assert body["cancelledAt"] is not None
    rows = _rows(
        db_dsn,
        "SELECT bi.cancelled_at, p.status, p.updated_by FROM batch_item bi "
        "JOIN page_import p ON p.id = bi.job_id WHERE bi.batch_id = %s",
        batch["id"],
    )
    assert all(r["cancelled_at"] is not None and r["status"] == "3" for r in rows)
    assert {r["updated_by"] for r in rows} == {"alice"}
    again = await api.client.post(f"/v1/batches/{batch['id']}/cancel", headers=api.headers())
    assert again.status_code == 200
    assert again.json()["cancelledAt"] == body["cancelledAt"]


async def test_a_finished_batch_cannot_be_cancelled(api: ApiHarness, db_dsn: str) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(1))
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("UPDATE page_import SET status = '1' WHERE batch_id = %s", (batch["id"],))
    response = await api.client.post(f"/v1/batches/{batch['id']}/cancel", headers=api.headers())
    assert response.status_code == 409
    assert (await api.client.get(f"/v1/batches/{batch['id']}", headers=api.headers())).json()[
        "status"
    ] == "1"


async def test_soft_delete_hides_the_batch_and_its_children(api: ApiHarness, db_dsn: str) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(2))
    items = (
        await api.client.get(f"/v1/batches/{batch['id']}/items", headers=api.headers())
    ).json()["items"]
    response = await api.client.delete(f"/v1/batches/{batch['id']}", headers=api.headers())
    assert response.status_code == 204
    assert (
        await api.client.get(f"/v1/batches/{batch['id']}", headers=api.headers())
    ).status_code == 404
    assert (
        await api.client.get(f"/v1/page-imports/{items[0]['jobId']}", headers=api.headers())
    ).status_code == 404
    assert (
        await api.client.delete(f"/v1/batches/{batch['id']}", headers=api.headers())
    ).status_code == 404
    rows = _rows(
        db_dsn,
        "SELECT bi.deleted_at, bi.deleted_by, p.status FROM batch_item bi "
        "JOIN page_import p ON p.id = bi.job_id WHERE bi.batch_id = %s",
        batch["id"],
    )
    assert all(r["deleted_at"] and r["deleted_by"] == "alice" and r["status"] == "3" for r in rows)


async def test_creation_notifies_the_relays_on_commit(api: ApiHarness, db_dsn: str) -> None:
    scope = await api.tenant("alice")
    async with await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as listener:
        await listener.execute("LISTEN jobrelay_batch_items")
        batch = await create_batch(api, scope, page_items(1))
        notes = [n async for n in listener.notifies(timeout=10, stop_after=1)]
    assert [n.payload for n in notes] == [batch["id"]]


BODIES = [
    ({"type": "page_import", "items": [{"url": "https://example.com/a"}, {"html": "<p/>"}]}, True),
    ({"type": "page_import", "items": [{"html": "<p/>", "css": "p{}"}]}, False),
    ({"type": "page_import", "items": [{"url": "ftp://example.com"}]}, False),
    ({"type": "code2des", "items": [{"html": "<p/>", "css": "p{}"}, {"html": "<b/>"}]}, True),
    ({"type": "code2des", "items": [{"url": "https://example.com/a"}]}, False),
    ({"type": "code2des", "items": [{"html": ""}]}, False),
    ({"type": "media", "items": [{"html": "<p/>"}]}, False),
]


async def test_openapi_types_batch_items_per_batch_type(api: ApiHarness) -> None:
    """The creation body is documented as one variant per batch type with that type's item
    model, and the document agrees with what the API accepts (201) and refuses (422)."""
    import jsonschema

    document = (await api.client.get("/openapi.json")).json()
    body = document["paths"]["/v1/projects/{projectId}/batches"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    schemas = document["components"]["schemas"]
    assert set(schema["discriminator"]["mapping"]) == {"page_import", "code2des"}
    assert set(schemas["BatchItem.page_import"]["properties"]) == {"url", "html"}
    assert set(schemas["BatchItem.code2des"]["properties"]) == {"html", "css"}
    items = schemas["CreateBatch.code2des"]["properties"]["items"]["items"]
    assert items == {"$ref": "#/components/schemas/BatchItem.code2des"}

    validator = jsonschema.Draft202012Validator({**schema, "components": document["components"]})
    scope = await api.tenant("alice")
    for request, valid in BODIES:
        assert validator.is_valid(request) is valid, request
        answer = await api.client.post(
            f"/v1/projects/{scope.project_id}/batches", json=request, headers=api.headers()
        )
        assert answer.status_code == (201 if valid else 422), (request, answer.text)
