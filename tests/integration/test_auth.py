"""Bearer-token verification and project scoping through the real API (issue 3 matrix)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest

from jobrelay.auth.local_issuer import LOCAL_CLIENT_ID, LOCAL_ISSUER, LocalIssuer
from jobrelay.auth.tokens import JwksCache, TokenPolicy, TokenVerifier
from jobrelay.domain.errors import Unauthenticated
from tests.harness import ApiHarness, api_harness


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {
        "sub": "alice",
        "iss": LOCAL_ISSUER,
        "token_use": "access",
        "client_id": LOCAL_CLIENT_ID,
        "iat": now,
        "nbf": now,
        "exp": now + 600,
    }
    claims.update(overrides)
    return claims


def _unsigned(header: dict[str, Any], claims: dict[str, Any]) -> str:
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"


async def _me(api: ApiHarness, authorization: str | None) -> tuple[int, dict[str, Any]]:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = await api.client.get("/v1/me", headers=headers)
    return response.status_code, response.json()


async def test_a_valid_token_passes(api: ApiHarness) -> None:
    status, body = await _me(api, f"Bearer {api.token('alice')}")
    assert status == 200
    assert body == {"sub": "alice", "isAdmin": False, "organizations": []}


def _bad_tokens(issuer: LocalIssuer) -> dict[str, str]:
    now = int(time.time())
    kid = issuer.kid
    pem = issuer._key.public_key().public_bytes(
        encoding=__import__("cryptography").hazmat.primitives.serialization.Encoding.PEM,
        format=__import__(
            "cryptography"
        ).hazmat.primitives.serialization.PublicFormat.SubjectPublicKeyInfo,
    )
    hs_signing_input = _unsigned({"alg": "HS256", "kid": kid, "typ": "JWT"}, _claims())
    hs_signature = hmac.new(pem, hs_signing_input.encode(), hashlib.sha256).digest()
    good = issuer.mint("alice")
    head, payload, signature = good.split(".")
    tampered_claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    tampered_claims["sub"] = "mallory"
    return {
        "expired": issuer.mint("alice", extra={"exp": now - 120, "iat": now - 720}),
        "not yet valid": issuer.mint("alice", extra={"nbf": now + 120}),
        "wrong issuer": issuer.mint("alice", extra={"iss": "https://cognito-idp.x/evil"}),
        "wrong client id": issuer.mint("alice", client_id="someone-else"),
        "wrong token_use": issuer.mint("alice", token_use="id"),
        "alg none": _unsigned({"alg": "none", "kid": kid}, _claims()) + ".",
        "HS256 with the public key": f"{hs_signing_input}.{_b64(hs_signature)}",
        "tampered payload": f"{head}.{_b64(json.dumps(tampered_claims).encode())}.{signature}",
        "subject over 50 characters": issuer.mint("x" * 51),
        "no token_use": issuer.mint("alice", extra={"token_use": None}),
        "garbage": "not-a-jwt",
    }


@pytest.mark.parametrize(
    "case",
    [
        "expired",
        "not yet valid",
        "wrong issuer",
        "wrong client id",
        "wrong token_use",
        "alg none",
        "HS256 with the public key",
        "tampered payload",
        "subject over 50 characters",
        "no token_use",
        "garbage",
    ],
)
async def test_token_matrix_is_401_problem(api: ApiHarness, case: str) -> None:
    assert api.services.local_issuer is not None
    token = _bad_tokens(api.services.local_issuer)[case]
    response = await api.client.get("/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401, case
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["status"] == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_unknown_kid_is_401(api: ApiHarness, tmp_path: Path) -> None:
    stranger = LocalIssuer(tmp_path)  # another key pair, same issuer name and client
    status, body = await _me(api, f"Bearer {stranger.mint('alice')}")
    assert status == 401
    assert "unknown key" in body["detail"]


@pytest.mark.parametrize("header", [None, "Bearer", "Basic YWxpY2U6cHc=", "Bearer a b", ""])
async def test_missing_or_malformed_header_is_401(api: ApiHarness, header: str | None) -> None:
    status, body = await _me(api, header)
    assert status == 401
    assert body["type"].endswith("/unauthenticated")


async def test_id_tokens_pass_when_configured(db_dsn: str, issuer_dir: Path) -> None:
    async with api_harness(db_dsn, issuer_dir, auth={"token_uses": ["access", "id"]}) as api:
        assert api.services.local_issuer is not None
        token = api.services.local_issuer.mint("bob", token_use="id")
        status, body = await _me(api, f"Bearer {token}")
    assert status == 200
    assert body["sub"] == "bob"


async def test_admin_group_sets_the_admin_role(api: ApiHarness) -> None:
    status, body = await _me(api, f"Bearer {api.token('root', admin=True)}")
    assert (status, body["isAdmin"]) == (200, True)


async def test_unknown_kid_refreshes_the_jwks_once_within_the_interval(tmp_path: Path) -> None:
    issuer = LocalIssuer(tmp_path / "a")
    fetches = 0

    async def fetch() -> dict[str, object]:
        nonlocal fetches
        fetches += 1
        return issuer.jwks()

    cache = JwksCache(fetch, min_refresh_interval_s=60)
    policy = TokenPolicy(issuer=LOCAL_ISSUER, client_ids=frozenset({LOCAL_CLIENT_ID}))
    verifier = TokenVerifier(policy, cache)
    assert (await verifier.verify(issuer.mint("alice"))).sub == "alice"
    assert fetches == 1
    stranger = LocalIssuer(tmp_path / "b")
    for _ in range(5):
        with pytest.raises(Unauthenticated, match="unknown key"):
            await verifier.verify(stranger.mint("alice"))
    assert fetches == 1, "unknown kids within the interval must not refetch the JWKS"


async def test_rotated_key_is_found_after_one_refresh(tmp_path: Path) -> None:
    old, new = LocalIssuer(tmp_path / "old"), LocalIssuer(tmp_path / "new")
    published = [old]
    fetches = 0

    async def fetch() -> dict[str, object]:
        nonlocal fetches
        fetches += 1
        return {"keys": [k for issuer in published for k in issuer.jwks()["keys"]]}

    verifier = TokenVerifier(
        TokenPolicy(issuer=LOCAL_ISSUER, client_ids=frozenset({LOCAL_CLIENT_ID})),
        JwksCache(fetch, min_refresh_interval_s=0),
    )
    await verifier.verify(old.mint("alice"))
    published.append(new)  # the pool rotates its signing key
    assert (await verifier.verify(new.mint("alice"))).sub == "alice"
    assert fetches == 2


async def test_projects_of_other_organizations_are_404(api: ApiHarness) -> None:
    mine = await api.tenant("alice")
    theirs = await api.tenant("eve")
    own = await api.client.get(f"/v1/projects/{mine.project_id}", headers=api.headers("alice"))
    foreign = await api.client.get(
        f"/v1/projects/{theirs.project_id}", headers=api.headers("alice")
    )
    missing = await api.client.get("/v1/projects/999999", headers=api.headers("alice"))
    anonymous = await api.client.get(f"/v1/projects/{mine.project_id}")
    assert own.status_code == 200
    assert own.json()["organizationId"] == mine.organization_id
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json()["detail"] == missing.json()["detail"], "no existence leak"
    assert anonymous.status_code == 401


def test_pyjwt_refuses_our_fixed_algorithm_list_for_hs256() -> None:
    # Guard for the matrix: the HS256 forgery above is what an attacker would send.
    with pytest.raises(jwt.InvalidAlgorithmError):
        jwt.decode(
            jwt.encode({"a": 1}, "k" * 32, algorithm="HS256"), "k" * 32, algorithms=["RS256"]
        )


async def test_the_admin_group_setting_is_what_local_admin_tokens_carry(
    db_dsn: str, issuer_dir: Path
) -> None:
    async with api_harness(db_dsn, issuer_dir, auth={"admin_group": "ops-admins"}) as api:
        status, body = await _me(api, f"Bearer {api.token('root', admin=True)}")
        default_group = LocalIssuer(issuer_dir).mint("root", admin=True)
        _, other = await _me(api, f"Bearer {default_group}")
    assert (status, body["isAdmin"]) == (200, True)
    assert other["isAdmin"] is False, "only the configured group grants the admin role"
