"""A body that is not JSON is a 422 problem whose path is `body`, with the line and column
where parsing stopped (FastAPI's own path is a character offset, `"path": "22"`)."""

from __future__ import annotations

from tests.harness import ApiHarness


async def test_a_body_that_is_not_json_points_at_its_line_and_column(api: ApiHarness) -> None:
    response = await api.client.post(
        "/v1/jobs",
        content=b'{"type": "diag.noop",\n "payload": {,}}',
        headers={**api.headers("ops", admin=True), "Content-Type": "application/json"},
    )
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    [error] = response.json()["errors"]
    assert error["path"] == "body"
    assert error["message"].startswith("invalid JSON at line 2, column 14: "), error


async def test_other_validation_errors_keep_their_field_paths(api: ApiHarness) -> None:
    scope = await api.tenant("alice")
    response = await api.client.post(
        f"/v1/projects/{scope.project_id}/batches",
        json={"type": "page_import", "items": "not a list"},
        headers=api.headers("alice"),
    )
    assert response.status_code == 422
    assert all(e["path"] != "body" for e in response.json()["errors"]), response.json()
