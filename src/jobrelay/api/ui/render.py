"""Rendering: the Jinja2 environment (autoescaped), its filters, and the one `render` every
page uses, which hands the template the session's CSRF token and sets the cookie of a
session made for this request."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, StrictUndefined

from jobrelay.api.ui.session import Session, SessionCodec


def _age(seconds: float | None) -> str:
    """`93.4` -> `1m 33s`; None -> `-`."""
    if seconds is None:
        return "-"
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{seconds:.1f}s" if seconds < 10 else f"{secs}s"


def _when(at: dt.datetime | None) -> str:
    """A timestamp in UTC to the second; None -> `-`."""
    if at is None:
        return "-"
    return at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def _percent(part: int, total: int) -> float:
    return 0.0 if total <= 0 else round(100.0 * part / total, 1)


environment = Environment(
    loader=PackageLoader("jobrelay.api.ui", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
environment.filters.update(age=_age, when=_when, size=_size, pretty=_pretty)
environment.globals.update(percent=_percent)


def codec(request: Request) -> SessionCodec:
    """The console's session codec (built once per app)."""
    found: SessionCodec = request.app.state.ui_codec
    return found


def render(
    request: Request,
    template: str,
    context: Mapping[str, Any],
    *,
    status_code: int = 200,
    session: Session | None = None,
) -> HTMLResponse:
    """`template` with `context`, `csrf` (the session's token) and `caller` (None unless
    given); a session created for this request gets its cookie."""
    session = session or codec(request).load_or_new(request)
    html = environment.get_template(template).render(
        {"caller": None, **context, "csrf": session.csrf}
    )
    response = HTMLResponse(html, status_code=status_code)
    codec(request).save_if_fresh(response, session)
    return response
