"""Batch, child and generation statuses are documented enums in the served OpenAPI schema."""

from __future__ import annotations

from typing import Any

from tests.harness import ApiHarness

CODES = ["'0' processing", "'1' completed", "'2' failed", "'3' cancelled"]


def _property(openapi: dict[str, Any], model: str, name: str) -> dict[str, Any]:
    """A model's property with its `$ref` (if any) resolved; the property's own description
    (beside the `$ref`) wins over the referenced schema's."""
    schemas = openapi["components"]["schemas"]
    prop: dict[str, Any] = schemas[model]["properties"][name]
    ref = prop.get("$ref")
    if ref is None:
        return prop
    return {**schemas[ref.rsplit("/", 1)[-1]], **prop}


async def _openapi(api: ApiHarness) -> dict[str, Any]:
    response = await api.client.get("/openapi.json")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


async def test_batch_and_child_status_codes_are_enums_with_their_meaning(
    api: ApiHarness,
) -> None:
    openapi = await _openapi(api)
    for model in ("Batch", "PageImport", "Code2Des"):
        status = _property(openapi, model, "status")
        assert status["enum"] == ["0", "1", "2", "3"], model
        assert all(code in status["description"] for code in CODES), (model, status)


async def test_item_states_are_an_enum_with_their_meaning(api: ApiHarness) -> None:
    state = _property(await _openapi(api), "Item", "state")
    assert state["enum"] == ["queued", "running", "completed", "failed", "cancelled"]
    assert "queued (not yet sent to the queue)" in state["description"]


async def test_generation_status_is_an_enum_in_the_body_and_the_discovery_filter(
    api: ApiHarness,
) -> None:
    openapi = await _openapi(api)
    status = _property(openapi, "Code2Wf", "status")
    assert status["enum"] == ["0", "1", "2"]
    assert all(code in status["description"] for code in CODES[:3])
    discover = openapi["paths"]["/v1/projects/{projectId}/code2wf"]["get"]
    (query,) = [p for p in discover["parameters"] if p["name"] == "status"]
    assert {"enum": ["0", "1", "2"], "type": "string"} in query["schema"]["anyOf"]
    assert all(code in query["description"] for code in CODES[:3])
