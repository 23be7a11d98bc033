"""`create_app(services)`: the FastAPI application, built from already-wired services."""

from __future__ import annotations

from fastapi import FastAPI

from jobrelay.api.problems import install_problem_handlers
from jobrelay.api.routes import batches, children, dev, health, tenancy, webhooks
from jobrelay.bootstrap import Services


def create_app(services: Services) -> FastAPI:
    """The API for `services`; nothing is read from the environment here."""
    app = FastAPI(
        title="jobrelay",
        version="0.1.0",
        description="Durable jobs, batch outbox and Code2WF generations on PostgreSQL.",
    )
    app.state.services = services
    install_problem_handlers(app)
    app.include_router(health.router)
    app.include_router(tenancy.router)
    app.include_router(batches.router)
    app.include_router(children.router)
    app.include_router(webhooks.router)
    if services.local_issuer is not None:
        app.include_router(dev.router)
    return app
