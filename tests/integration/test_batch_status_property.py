"""Property: the API's status and counts (the SQL aggregate) equal a model of DESIGN.md
section 4 for any mix of item and child states."""

from __future__ import annotations

from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobrelay.domain.batch_status import BatchCounts, ChildStatus, batch_status, item_state
from tests.batch_support import create_batch, page_items
from tests.harness import ApiHarness

ITEM = st.fixed_dictionaries(
    {
        "child": st.sampled_from(["0", "1", "2", "3"]),
        "dispatched": st.booleans(),
        "error": st.booleans(),
        "cancelled": st.booleans(),
    }
)


def model_state(item: dict[str, Any]) -> str:
    """DESIGN.md section 4, written independently of the domain module."""
    terminal = {"1": "completed", "2": "failed", "3": "cancelled"}
    if item["child"] in terminal:
        return terminal[item["child"]]
    if item["cancelled"]:
        return "cancelled"
    if item["error"]:
        return "failed"
    return "running" if item["dispatched"] else "queued"


def model_status(cancelled: bool, states: list[str]) -> str:
    if cancelled:
        return "3"
    if "queued" in states or "running" in states:
        return "0"
    return "2" if "failed" in states else "1"


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(items=st.lists(ITEM, min_size=1, max_size=12), cancelled=st.booleans())
async def test_api_status_matches_the_model(
    api: ApiHarness, db_dsn: str, items: list[dict[str, Any]], cancelled: bool
) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(len(items)))
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT job_id FROM batch_item WHERE batch_id = %s ORDER BY position",
                (batch["id"],),
            )
        ]
        for child_id, item in zip(ids, items, strict=True):
            conn.execute(
                "UPDATE batch_item SET dispatched_at = CASE WHEN %s THEN now() END, "
                "error_message = CASE WHEN %s THEN 'boom' END, "
                "cancelled_at = CASE WHEN %s THEN now() END WHERE job_id = %s",
                (item["dispatched"], item["error"], item["cancelled"], child_id),
            )
            conn.execute(
                "UPDATE page_import SET status = %s WHERE id = %s", (item["child"], child_id)
            )
        if cancelled:
            conn.execute("UPDATE batch SET cancelled_at = now() WHERE id = %s", (batch["id"],))
    body = (await api.client.get(f"/v1/batches/{batch['id']}", headers=api.headers())).json()
    states = [model_state(i) for i in items]
    expected_counts = {
        "total": len(items),
        **{s: states.count(s) for s in ("queued", "running", "completed", "failed", "cancelled")},
    }
    assert body["counts"] == expected_counts
    assert body["status"] == model_status(cancelled, states)
    domain_states = [
        item_state(
            child_status=ChildStatus(i["child"]),
            dispatched=i["dispatched"],
            dispatch_failed=i["error"],
            cancelled=i["cancelled"],
        )
        for i in items
    ]
    assert [s.value for s in domain_states] == states
    assert (
        batch_status(cancelled=cancelled, counts=BatchCounts.of(domain_states)).value
        == (body["status"])
    )
    listed = (
        await api.client.get(f"/v1/batches/{batch['id']}/items", headers=api.headers())
    ).json()["items"]
    assert [i["state"] for i in listed] == states
