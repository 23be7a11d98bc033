"""The console's login through the Amazon Cognito Hosted UI: the OAuth 2.0 authorization-code
flow with PKCE (S256), a `state` and an OpenID Connect `nonce`, all through authlib's client
(`AsyncOAuth2Client`), never hand-written crypto.

1. `GET /ui/login` draws a fresh state, nonce and PKCE code verifier, keeps them in a
   short-lived signed cookie (`LOGIN_COOKIE`, path /ui/auth, 10 minutes: the API runs as many
   processes, so nothing is kept in memory) and redirects to `<domain>/oauth2/authorize`.
2. `GET /ui/auth/callback?code&state` checks the state against the cookie, exchanges the code
   at `<domain>/oauth2/token` with the code verifier (Cognito compares it with the challenge),
   verifies the access token with the API's own verifier (so the console knows the same
   identities: sub, organization membership, admin group) and the ID token's audience and
   nonce, then sets the console's session with the access token.
3. `POST /ui/logout` clears the session and sends the browser to `<domain>/logout`, which
   ends the Hosted UI's own session and comes back to `/ui/logged-out`.
"""

from __future__ import annotations

import hmac
import warnings
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
from authlib.common.security import generate_token
from authlib.deprecate import AuthlibDeprecationWarning
from fastapi import Request
from fastapi.responses import Response
from itsdangerous import BadSignature, URLSafeTimedSerializer

from jobrelay.settings import Settings

with warnings.catch_warnings():
    # authlib 1.9 prefers the httpx2 package and warns when it falls back to httpx, which is
    # the HTTP client of this project (its AsyncOAuth2Client works on either).
    warnings.simplefilter("ignore", AuthlibDeprecationWarning)
    from authlib.integrations.httpx_client import AsyncOAuth2Client, OAuthError

LOGIN_COOKIE = "jobrelay_ui_login"
LOGIN_COOKIE_PATH = "/ui/auth"
LOGIN_TTL_S = 600
_SALT = "jobrelay.ui.login"
SCOPE = "openid"
TOKEN_TIMEOUT_S = 10.0


class LoginFailed(Exception):
    """The Hosted UI login cannot go on: `status` and a sentence for the login-failed page."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True, slots=True)
class LoginState:
    """What the callback needs from the redirect that started the login."""

    state: str
    code_verifier: str
    nonce: str
    next_path: str


@dataclass(frozen=True, slots=True)
class Tokens:
    access_token: str
    id_token: str


class HostedUi:
    """The Cognito Hosted UI client of one console (settings `JOBRELAY_UI_COGNITO_*`)."""

    def __init__(
        self,
        *,
        domain: str,
        client_id: str,
        client_secret: str | None,
        redirect_url: str | None,
        signing_secret: str,
        secure: bool,
    ) -> None:
        self.domain = domain.rstrip("/")
        self.client_id = client_id
        self._client_secret = client_secret
        self._redirect_url = redirect_url
        self._serializer = URLSafeTimedSerializer(signing_secret, salt=_SALT)
        self._secure = secure

    @classmethod
    def from_settings(cls, settings: Settings) -> HostedUi | None:
        """The client when Cognito auth and the console's Hosted UI are configured."""
        if settings.auth.mode != "cognito":
            return None
        if not settings.ui.cognito_domain or not settings.ui.cognito_client_id:
            return None
        secret = settings.ui.cognito_client_secret
        return cls(
            domain=settings.ui.cognito_domain,
            client_id=settings.ui.cognito_client_id,
            client_secret=secret.get_secret_value() if secret else None,
            redirect_url=settings.ui.cognito_redirect_url,
            signing_secret=settings.ui.session_secret.get_secret_value(),
            secure=settings.env != "development",
        )

    def redirect_url(self, request: Request) -> str:
        """The registered callback; derived from the request when unset (development)."""
        return self._redirect_url or str(request.url_for("auth_callback"))

    def logout_url(self, request: Request) -> str:
        """Cognito's /logout, coming back to the console's logged-out page."""
        callback = urlsplit(self.redirect_url(request))
        back = f"{callback.scheme}://{callback.netloc}/ui/logged-out"
        query = urlencode({"client_id": self.client_id, "logout_uri": back})
        return f"{self.domain}/logout?{query}"

    def _client(self, redirect_url: str) -> AsyncOAuth2Client:
        return AsyncOAuth2Client(
            client_id=self.client_id,
            client_secret=self._client_secret,
            token_endpoint_auth_method="client_secret_basic" if self._client_secret else "none",
            scope=SCOPE,
            redirect_uri=redirect_url,
            code_challenge_method="S256",
            timeout=TOKEN_TIMEOUT_S,
        )

    async def start(self, request: Request, next_path: str) -> tuple[str, LoginState]:
        """The authorization URL to send the browser to, and the state to keep."""
        login = LoginState(
            state=generate_token(32),
            code_verifier=generate_token(64),  # RFC 7636: 43 to 128 characters
            nonce=generate_token(32),
            next_path=next_path,
        )
        async with self._client(self.redirect_url(request)) as client:
            url, _ = client.create_authorization_url(
                f"{self.domain}/oauth2/authorize",
                state=login.state,
                code_verifier=login.code_verifier,
                nonce=login.nonce,
            )
        return str(url), login

    def save_state(self, response: Response, login: LoginState) -> None:
        value = self._serializer.dumps(
            [login.state, login.code_verifier, login.nonce, login.next_path]
        )
        response.set_cookie(
            LOGIN_COOKIE,
            value,
            max_age=LOGIN_TTL_S,
            path=LOGIN_COOKIE_PATH,
            httponly=True,
            secure=self._secure,
            samesite="lax",  # the callback is a top-level navigation from the Hosted UI
        )

    def clear_state(self, response: Response) -> None:
        response.delete_cookie(
            LOGIN_COOKIE,
            path=LOGIN_COOKIE_PATH,
            httponly=True,
            secure=self._secure,
            samesite="lax",
        )

    def load_state(self, request: Request, state: str | None) -> LoginState:
        """The login this callback answers: its cookie is present, signed, fresh, and its
        state is the callback's; else `LoginFailed` (400)."""
        raw = request.cookies.get(LOGIN_COOKIE)
        data: Any = None
        if raw is not None:
            try:
                data = self._serializer.loads(raw, max_age=LOGIN_TTL_S)
            except BadSignature:
                data = None
        fields_ok = isinstance(data, list) and len(data) == 4
        if not (fields_ok and all(isinstance(x, str) for x in data)):
            raise LoginFailed(
                400,
                "this login was not started here, or it expired (after 10 minutes): log in again",
            )
        login = LoginState(*data)
        if not state or not hmac.compare_digest(login.state, state):
            raise LoginFailed(
                400, "the login's state does not match the one this browser started: refused"
            )
        return login

    async def exchange(self, request: Request, code: str, login: LoginState) -> Tokens:
        """The tokens for `code`, fetched with the login's PKCE code verifier."""
        try:
            async with self._client(self.redirect_url(request)) as client:
                token = await client.fetch_token(
                    f"{self.domain}/oauth2/token",
                    grant_type="authorization_code",
                    code=code,
                    code_verifier=login.code_verifier,
                )
        except OAuthError as exc:
            raise LoginFailed(
                401, f"Cognito refused to exchange the login's code ({exc.error})"
            ) from None
        except (httpx.HTTPError, ValueError) as exc:  # unreachable, 5xx, a body not JSON
            raise LoginFailed(
                502, f"Cognito's token endpoint could not be used ({type(exc).__name__})"
            ) from None
        access, id_token = token.get("access_token"), token.get("id_token")
        if not isinstance(access, str) or not isinstance(id_token, str):
            raise LoginFailed(502, "Cognito's token endpoint returned no access and ID token")
        return Tokens(access_token=access, id_token=id_token)
