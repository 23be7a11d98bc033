"""A stand-in for the Amazon Cognito Hosted UI on a loopback port, for the console's login
tests: a real HTTP server (uvicorn in a thread) with Cognito's endpoints.

- `GET /oauth2/authorize` auto-approves `FakeCognito.user` and redirects to the client's
  redirect URI with a single-use code bound to the request's PKCE `code_challenge` (S256
  only), redirect URI and nonce;
- `POST /oauth2/token` exchanges a code only with the `code_verifier` whose S256 challenge
  was sent (authlib's `compare_s256_code_challenge`), else `invalid_grant` like Cognito;
- `GET /.well-known/jwks.json` publishes the test RSA key the tokens are signed with (503
  while `jwks_down`);
- `GET /logout` records the call and redirects to `logout_uri`.

Tokens are shaped like Cognito's: the access token has `client_id`, `token_use=access` and
`cognito:groups`, the ID token `aud`, `token_use=id` and the nonce.
"""

from __future__ import annotations

import base64
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode

import httpx
import jwt
import uvicorn
from authlib.oauth2.rfc7636.challenge import compare_s256_code_challenge
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from jobrelay.auth.tokens import JwksCache, TokenVerifier
from tests.harness import free_port, wait_until

_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
KID = "fake-cognito-key-1"


@dataclass
class User:
    sub: str
    groups: list[str] = field(default_factory=list)


@dataclass
class FakeCognito:
    client_id: str
    client_secret: str | None = None
    user: User = field(default_factory=lambda: User("carol"))
    port: int = field(default_factory=free_port)
    nonce_override: str | None = None
    jwks_down: bool = False
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    logouts: list[dict[str, str]] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def jwks(self) -> dict[str, object]:
        import json

        public = json.loads(RSAAlgorithm.to_jwk(_KEY.public_key()))
        return {"keys": [{**public, "kid": KID, "alg": "RS256", "use": "sig"}]}

    def verifier_like(self, verifier: TokenVerifier) -> TokenVerifier:
        """`verifier` (the API's, built from its settings) trusting this server as the user
        pool: the same policy (client ids, token uses, admin group) with this issuer."""
        from dataclasses import replace

        policy = replace(verifier._policy, issuer=self.base)

        async def fetch() -> dict[str, object]:  # over HTTP, as the API fetches Cognito's
            async with httpx.AsyncClient(timeout=5.0) as client:
                response = await client.get(f"{self.base}/.well-known/jwks.json")
                response.raise_for_status()
                document: dict[str, object] = response.json()
                return document

        return TokenVerifier(policy, JwksCache(fetch, min_refresh_interval_s=0))

    def _token(self, claims: dict[str, Any]) -> str:
        now = int(time.time())
        base = {"iss": self.base, "sub": self.user.sub, "iat": now, "exp": now + 3600}
        return jwt.encode({**base, **claims}, _KEY, algorithm="RS256", headers={"kid": KID})

    # -- endpoints ---------------------------------------------------------------------

    async def authorize(self, request: Request) -> Response:
        q = request.query_params
        problems = [
            name
            for name, ok in [
                ("response_type", q.get("response_type") == "code"),
                ("client_id", q.get("client_id") == self.client_id),
                ("redirect_uri", bool(q.get("redirect_uri"))),
                ("code_challenge_method", q.get("code_challenge_method") == "S256"),
                ("code_challenge", bool(q.get("code_challenge"))),
                ("scope", "openid" in (q.get("scope") or "").split()),
                ("state", bool(q.get("state"))),
            ]
            if not ok
        ]
        if problems:
            return JSONResponse({"error": "invalid_request", "bad": problems}, status_code=400)
        code = secrets.token_urlsafe(24)
        self.codes[code] = {
            "challenge": q["code_challenge"],
            "redirect_uri": q["redirect_uri"],
            "nonce": q.get("nonce", ""),
        }
        target = f"{q['redirect_uri']}?{urlencode({'code': code, 'state': q['state']})}"
        return RedirectResponse(target, status_code=302)

    async def token(self, request: Request) -> Response:
        body = (await request.body()).decode()
        form = {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}
        self.token_requests.append(form)
        if self.client_secret is not None:
            expected = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode())
            if request.headers.get("authorization") != f"Basic {expected.decode()}":
                return JSONResponse({"error": "invalid_client"}, status_code=401)
        elif form.get("client_id") != self.client_id:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        if form.get("grant_type") != "authorization_code":
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        grant = self.codes.pop(form.get("code", ""), None)  # a code is single use
        if (
            grant is None
            or grant["redirect_uri"] != form.get("redirect_uri")
            or not compare_s256_code_challenge(form.get("code_verifier", ""), grant["challenge"])
        ):
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        groups = {"cognito:groups": self.user.groups} if self.user.groups else {}
        access = self._token(
            {"token_use": "access", "client_id": self.client_id, "username": self.user.sub} | groups
        )
        nonce = self.nonce_override if self.nonce_override is not None else grant["nonce"]
        id_token = self._token({"token_use": "id", "aud": self.client_id, "nonce": nonce})
        return JSONResponse(
            {
                "access_token": access,
                "id_token": id_token,
                "token_type": "Bearer",
                "expires_in": 3600,
            }
        )

    async def jwks_endpoint(self, _: Request) -> Response:
        if self.jwks_down:
            return JSONResponse({"message": "unavailable"}, status_code=503)
        return JSONResponse(self.jwks())

    async def logout(self, request: Request) -> Response:
        self.logouts.append(dict(request.query_params))
        return RedirectResponse(request.query_params.get("logout_uri", "/"), status_code=302)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/oauth2/authorize", self.authorize),
                Route("/oauth2/token", self.token, methods=["POST"]),
                Route("/.well-known/jwks.json", self.jwks_endpoint),
                Route("/logout", self.logout),
            ]
        )


@contextmanager
def running(cognito: FakeCognito) -> Iterator[FakeCognito]:
    """`cognito` served on its loopback port until the block ends."""
    config = uvicorn.Config(
        cognito.app(), host="127.0.0.1", port=cognito.port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="fake-cognito", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout_s=30, what="the fake Cognito to listen")
        yield cognito
    finally:
        server.should_exit = True
        thread.join(timeout=30)
