"""`/healthz` and `/readyz` over the real ASGI app and a real database."""

from __future__ import annotations

import httpx
import pytest

from jobrelay.api import create_app
from jobrelay.bootstrap import build_services
from jobrelay.settings import load_settings
from tests.harness import PgServer


async def test_health_and_readiness_answer_200(db_dsn: str) -> None:
    async with build_services(load_settings(), db_dsn) as services:
        transport = httpx.ASGITransport(app=create_app(services))
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            assert (await client.get("/healthz")).status_code == 200
            ready = await client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "database": "ok"}


async def test_readiness_is_503_problem_when_the_database_is_gone(pg_server: PgServer) -> None:
    name = pg_server.create()
    settings = load_settings(db={"pool_min": 1, "pool_max": 1})
    async with build_services(settings, pg_server.dsn(name)) as services:
        transport = httpx.ASGITransport(app=create_app(services))
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            pg_server.drop(name)  # FORCE ends the pooled connection too
            ready = await client.get("/readyz")
            alive = await client.get("/healthz")
    assert ready.status_code == 503
    assert ready.headers["content-type"] == "application/problem+json"
    assert ready.json()["status"] == 503
    assert alive.status_code == 200


@pytest.mark.parametrize("path", ["/nope", "/v1/unknown"])
async def test_unknown_routes_are_problem_json(db_dsn: str, path: str) -> None:
    async with build_services(load_settings(), db_dsn) as services:
        transport = httpx.ASGITransport(app=create_app(services))
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            response = await client.get(path)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert set(response.json()) >= {"type", "title", "status", "detail"}
