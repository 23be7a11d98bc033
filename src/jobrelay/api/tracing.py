"""Request spans: a pure ASGI middleware, installed only when the process traces.

One server span per HTTP request, continuing the caller's trace when the request carries a
W3C `traceparent` header (a webhook call of an SQS worker), else starting one. Named
`<method> <route template>` once the router matched (`POST /v1/projects/{projectId}/batches`;
the method alone for a path no route matched), with the method, the path, the route and
the status; a 5xx answer is an error. Every span the request starts (an enqueue, a webhook
outcome) and every line it logs is inside it.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobrelay import tracing


class RequestSpans:
    """One server span per HTTP request (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        method = str(scope["method"])
        carried = dict(scope.get("headers", [])).get(b"traceparent")
        status = 500  # unless a response starts

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        with tracing.span(
            method,
            kind="server",
            parent=None if carried is None else carried.decode("latin-1"),
            attributes={"http.request.method": method, "url.path": str(scope["path"])},
        ) as span:
            try:
                await self._app(scope, receive, recording_send)
            finally:
                if span is not None:
                    route = _route(scope)
                    if route is not None:
                        span.update_name(f"{method} {route}")
                        span.set_attribute("http.route", route)
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        tracing.fail(f"HTTP {status}")


def _route(scope: Scope) -> str | None:
    """The template of the route the router matched (under its mount), if any."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if not isinstance(path, str):
        return None
    return f"{scope.get('root_path', '')}{path}"
