"""`create_app(services)`: the FastAPI application, built from already-wired services."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import RedirectResponse

from jobrelay import __version__, tracing
from jobrelay.api.limits import BodySizeLimit
from jobrelay.api.openapi import install_openapi, operation_id
from jobrelay.api.problems import install_problem_handlers
from jobrelay.api.routes import (
    batches,
    children,
    code2wf,
    console,
    dev,
    health,
    jobs,
    metrics,
    schedules,
    tenancy,
    webhooks,
    workflows,
)
from jobrelay.api.tracing import RequestSpans
from jobrelay.api.ui import create_ui
from jobrelay.bootstrap import Services


def create_app(services: Services) -> FastAPI:
    """The API for `services`; nothing is read from the environment here."""
    app = FastAPI(
        title="jobrelay",
        version=__version__,
        description="Durable jobs, batch outbox and Code2WF generations on PostgreSQL.",
        generate_unique_id_function=operation_id,
    )
    app.state.services = services
    install_problem_handlers(app)
    install_openapi(app, services.jobs.registry)
    app.add_middleware(BodySizeLimit, max_bytes=services.settings.api.max_body_bytes)
    if tracing.enabled():  # outermost of ours: the span covers the size check too
        app.add_middleware(RequestSpans)
    app.include_router(health.router)
    app.include_router(tenancy.router)
    app.include_router(jobs.router)
    app.include_router(workflows.router)
    app.include_router(schedules.router)
    app.include_router(batches.router)
    app.include_router(children.router)
    app.include_router(webhooks.router)
    app.include_router(code2wf.router)
    app.include_router(console.router)
    app.include_router(metrics.router)
    app.mount("/ui", create_ui(services))

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        # A browser pointed at the API's address lands on the console, not a JSON 404.
        return RedirectResponse("/ui/", status_code=307)

    # Development only: production refuses local auth at startup, and even a production
    # object built in-process (tests, embedding) never publishes the local issuer's keys.
    if services.local_issuer is not None and services.settings.env == "development":
        app.include_router(dev.router)
    return app
