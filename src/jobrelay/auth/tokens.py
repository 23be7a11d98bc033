"""Verify Amazon Cognito user pool tokens (and the local issuer's, which look the same).

Cognito access tokens carry `client_id` and no `aud`; ID tokens carry `aud`. PyJWT checks
neither `token_use` nor `client_id`, so both are checked here. Only RS256 is accepted, and
the algorithm list is fixed here, never taken from the token.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import jwt
from jwt import PyJWK

from jobrelay.domain.errors import Unauthenticated

MAX_SUBJECT_LENGTH = 50  # audit columns are varchar(50) (seed 000)
DEFAULT_ADMIN_GROUP = "jobrelay-admins"  # settings.auth.admin_group overrides it

JwksFetcher = Callable[[], Awaitable[dict[str, object]]]


@dataclass(frozen=True, slots=True)
class Caller:
    """The authenticated principal of a request."""

    sub: str
    is_admin: bool = False
    token_use: str = "access"


@dataclass(frozen=True)
class TokenPolicy:
    """What a valid token must say."""

    issuer: str
    client_ids: frozenset[str]
    token_uses: frozenset[str] = frozenset({"access"})
    admin_group: str = DEFAULT_ADMIN_GROUP
    leeway_s: float = 10.0


class JwksCache:
    """Signing keys by `kid`, fetched on demand; an unknown `kid` triggers at most one
    refresh per `min_refresh_interval_s`, so forged kids cannot hammer the JWKS endpoint."""

    def __init__(self, fetch: JwksFetcher, *, min_refresh_interval_s: float = 30.0) -> None:
        self._fetch = fetch
        self._min_interval = min_refresh_interval_s
        self._keys: dict[str, PyJWK] = {}
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()
        self.refreshes = 0

    async def key(self, kid: str) -> PyJWK | None:
        if kid not in self._keys:
            await self._refresh()
        return self._keys.get(kid)

    async def _refresh(self) -> None:
        async with self._lock:
            now = time.monotonic()
            if self._fetched_at is not None and now - self._fetched_at < self._min_interval:
                return
            document = await self._fetch()
            keys: dict[str, PyJWK] = {}
            entries = document.get("keys")
            for entry in entries if isinstance(entries, list) else []:
                if not isinstance(entry, dict):
                    continue
                if entry.get("kty") == "RSA" and entry.get("kid"):
                    keys[str(entry["kid"])] = PyJWK(entry, algorithm="RS256")
            self._keys = keys
            self._fetched_at = now
            self.refreshes += 1


class TokenVerifier:
    """Turns a bearer token into a `Caller` or raises `Unauthenticated`."""

    def __init__(self, policy: TokenPolicy, keys: JwksCache) -> None:
        self._policy = policy
        self._keys = keys

    async def verify(self, token: str) -> Caller:
        return self._caller(await self._verified_claims(token))

    async def verify_id_token(self, token: str, *, client_id: str, nonce: str) -> str:
        """The subject of an OpenID Connect ID token (signature, issuer, expiry as `verify`)
        issued to `client_id` for the login whose nonce is `nonce`; else `Unauthenticated`."""
        claims = await self._verified_claims(token)
        if claims.get("token_use") != "id":
            raise Unauthenticated("the ID token is not an ID token")
        audience = claims.get("aud")
        audiences = [audience] if isinstance(audience, str) else list(audience or [])
        if client_id not in audiences:
            raise Unauthenticated("the ID token was issued for another client")
        found = claims.get("nonce")
        if not isinstance(found, str) or not hmac.compare_digest(found, nonce):
            raise Unauthenticated("the ID token's nonce is not this login's")
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise Unauthenticated("the token has no subject")
        return sub

    async def _verified_claims(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthenticated("the bearer token is malformed") from exc
        if header.get("alg") != "RS256":
            raise Unauthenticated("the token must be signed with RS256")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise Unauthenticated("the token has no key id")
        key = await self._keys.key(kid)
        if key is None:
            raise Unauthenticated("the token was signed by an unknown key")
        return self._decode(token, key)

    def _decode(self, token: str, key: PyJWK) -> dict[str, Any]:
        try:
            return jwt.decode(
                token,
                key,
                algorithms=["RS256"],
                issuer=self._policy.issuer,
                leeway=self._policy.leeway_s,
                options={
                    "require": ["exp", "iat", "iss", "sub", "token_use"],
                    "verify_aud": False,  # checked below: Cognito access tokens have no aud
                },
            )
        except jwt.ExpiredSignatureError as exc:
            raise Unauthenticated("the token has expired") from exc
        except jwt.ImmatureSignatureError as exc:
            raise Unauthenticated("the token is not valid yet") from exc
        except jwt.InvalidIssuerError as exc:
            raise Unauthenticated("the token has the wrong issuer") from exc
        except jwt.PyJWTError as exc:
            raise Unauthenticated("the token is invalid") from exc

    def _caller(self, claims: dict[str, Any]) -> Caller:
        token_use = claims.get("token_use")
        if token_use not in self._policy.token_uses:
            raise Unauthenticated(f"token_use {token_use!r} is not accepted")
        if token_use == "access":
            client_ok = claims.get("client_id") in self._policy.client_ids
        else:
            audience = claims.get("aud")
            audiences = [audience] if isinstance(audience, str) else list(audience or [])
            client_ok = any(a in self._policy.client_ids for a in audiences)
        if not client_ok:
            raise Unauthenticated("the token was issued for another client")
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise Unauthenticated("the token has no subject")
        if len(sub) > MAX_SUBJECT_LENGTH:
            raise Unauthenticated(f"the token subject is longer than {MAX_SUBJECT_LENGTH}")
        groups = claims.get("cognito:groups") or []
        is_admin = isinstance(groups, list) and self._policy.admin_group in groups
        return Caller(sub=sub, is_admin=is_admin, token_use=str(token_use))
