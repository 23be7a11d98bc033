"""A local token issuer for development and tests: Cognito-shaped tokens from a key pair
kept in the data directory. The API verifies them with the same code as Cognito's."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from jobrelay.auth.tokens import DEFAULT_ADMIN_GROUP

LOCAL_ISSUER = "urn:jobrelay:local-issuer"
LOCAL_CLIENT_ID = "jobrelay-local"
JWKS_PATH = "/dev/local-issuer/jwks.json"


class LocalIssuer:
    """Loads (or creates) `issuer/private_key.pem` under `data_dir` and mints tokens."""

    def __init__(self, data_dir: Path, *, admin_group: str = DEFAULT_ADMIN_GROUP) -> None:
        self._admin_group = admin_group
        key_file = data_dir.resolve() / "issuer" / "private_key.pem"
        self._key = _load_or_create_key(key_file)
        public_jwk = json.loads(RSAAlgorithm.to_jwk(self._key.public_key()))
        self.kid = hashlib.sha256(public_jwk["n"].encode()).hexdigest()[:16]
        self._jwk = {**public_jwk, "kid": self.kid, "alg": "RS256", "use": "sig"}

    def jwks(self) -> dict[str, Any]:
        """The public JWKS document, as Cognito serves it."""
        return {"keys": [self._jwk]}

    def mint(
        self,
        sub: str,
        *,
        ttl_s: int = 3600,
        admin: bool = False,
        token_use: str = "access",
        client_id: str = LOCAL_CLIENT_ID,
        extra: dict[str, Any] | None = None,
    ) -> str:
        """A signed token for `sub`, shaped like a Cognito access (or ID) token."""
        now = int(time.time())
        claims: dict[str, Any] = {
            "sub": sub,
            "iss": LOCAL_ISSUER,
            "token_use": token_use,
            "iat": now,
            "nbf": now,
            "exp": now + ttl_s,
            "username": sub,
        }
        if token_use == "access":
            claims["client_id"] = client_id
        else:
            claims["aud"] = client_id
        if admin:
            claims["cognito:groups"] = [self._admin_group]
        claims.update(extra or {})
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": self.kid})


def _load_or_create_key(path: Path) -> rsa.RSAPrivateKey:
    if path.exists():
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        assert isinstance(key, rsa.RSAPrivateKey)
        return key
    path.parent.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # Written once, readable by the owner only; a concurrent creator wins with O_EXCL.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _load_or_create_key(path)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    return key
