"""The console's session: one signed (itsdangerous) cookie holding a CSRF token and, once
logged in, the JWT the API verifies on every request.

The cookie is HttpOnly, SameSite=Lax, Secure outside JOBRELAY_ENV=development, and expires
with the session (`JOBRELAY_UI_SESSION_TTL_S`). Its signature only proves the console wrote
it; who the caller is comes from verifying the JWT inside with the API's own verifier, so the
console knows exactly the identities the API knows. The CSRF token is a synchronizer token:
every state-changing form carries it and `check_csrf` compares it with the session's.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from itsdangerous import BadSignature, URLSafeTimedSerializer

from jobrelay.domain.errors import Forbidden

COOKIE = "jobrelay_ui"
_SALT = "jobrelay.ui.session"


@dataclass(frozen=True, slots=True)
class Session:
    """`csrf` is always set; `token` is the caller's JWT once logged in. `fresh` sessions
    were made for this request and still need their cookie set."""

    csrf: str
    token: str | None = None
    fresh: bool = False

    @classmethod
    def new(cls, token: str | None = None) -> Session:
        return cls(csrf=secrets.token_urlsafe(32), token=token, fresh=True)


class SessionCodec:
    """Reads and writes the session cookie."""

    def __init__(self, secret: str, *, ttl_s: int, secure: bool) -> None:
        self._serializer = URLSafeTimedSerializer(secret, salt=_SALT)
        self.ttl_s = ttl_s
        self._secure = secure

    def load(self, request: Request) -> Session | None:
        """The request's session, or None when there is none, or it is forged or expired."""
        raw = request.cookies.get(COOKIE)
        if raw is None:
            return None
        try:
            data: Any = self._serializer.loads(raw, max_age=self.ttl_s)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("csrf"), str):
            return None
        token = data.get("token")
        return Session(csrf=data["csrf"], token=token if isinstance(token, str) else None)

    def load_or_new(self, request: Request) -> Session:
        return self.load(request) or Session.new()

    def save(self, response: Response, session: Session) -> None:
        value = self._serializer.dumps({"csrf": session.csrf, "token": session.token})
        response.set_cookie(
            COOKIE,
            value,
            max_age=self.ttl_s,
            path="/ui",
            httponly=True,
            secure=self._secure,
            samesite="lax",
        )

    def save_if_fresh(self, response: Response, session: Session) -> None:
        if session.fresh:
            self.save(response, session)


def check_csrf(session: Session | None, submitted: str | None) -> None:
    """`Forbidden` (403) unless the form's token matches the session's."""
    if session is None or not submitted or not hmac.compare_digest(session.csrf, submitted):
        raise Forbidden("missing or wrong CSRF token: reload the page and submit again")
