"""The API's problem+json answers as exceptions: one class per status, field paths kept."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldProblem:
    """One field of the request that was refused: `path` as the API names it
    (`items.3.url`, `payload.name`, `Idempotency-Key`) and why."""

    path: str
    message: str


class ApiError(Exception):
    """An error answer of the API (RFC 9457 problem details)."""

    def __init__(
        self,
        status: int,
        *,
        title: str,
        detail: str,
        type: str = "about:blank",
        errors: list[FieldProblem] | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type
        self.errors = errors or []
        self.retry_after_s = retry_after_s
        fields = "; ".join(f"{e.path}: {e.message}" for e in self.errors)
        super().__init__(f"{status} {title}: {detail}" + (f" ({fields})" if fields else ""))

    @property
    def field_paths(self) -> list[str]:
        """The paths of the refused fields, in the API's order."""
        return [e.path for e in self.errors]


class BadRequest(ApiError):
    """400: a malformed request the API could not read."""


class Unauthorized(ApiError):
    """401: no token, or a token the API does not accept (expired, wrong issuer)."""


class Forbidden(ApiError):
    """403: the caller lacks the role (the jobs endpoints need the admin group)."""


class NotFound(ApiError):
    """404: no such resource, or one of an organization the caller does not belong to."""


class Conflict(ApiError):
    """409: the resource's state forbids the action (e.g. the result of a processing
    generation)."""


class PayloadTooLarge(ApiError):
    """413: the body is over the API's limit."""


class InvalidRequest(ApiError):
    """422: the request was refused; `errors` names every field."""


class Unavailable(ApiError):
    """503: the database (or the API) is unavailable; the client already retried idempotent
    calls as `Retry-After` asked."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidRequest,
    503: Unavailable,
}


def error_of(status: int, problem: Any, retry_after_s: float | None = None) -> ApiError:
    """The exception for an error answer with body `problem` (problem+json, or anything
    else a proxy may have sent)."""
    body = problem if isinstance(problem, dict) else {}
    errors = [
        FieldProblem(path=str(e.get("path", "")), message=str(e.get("message", "")))
        for e in body.get("errors") or []
        if isinstance(e, dict)
    ]
    cls = _BY_STATUS.get(status, ApiError)
    return cls(
        status,
        title=str(body.get("title") or f"HTTP {status}"),
        detail=str(body.get("detail") or (problem if isinstance(problem, str) else "")),
        type=str(body.get("type") or "about:blank"),
        errors=errors,
        retry_after_s=retry_after_s,
    )
