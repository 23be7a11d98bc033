"""`jobrelay token` and `jobrelay admin …` as subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

from jobrelay.auth.local_issuer import LOCAL_CLIENT_ID, LOCAL_ISSUER, LocalIssuer
from jobrelay.auth.tokens import JwksCache, TokenPolicy, TokenVerifier
from tests.harness import run_cli


async def test_token_verifies_against_the_data_directory_issuer(tmp_path: Path) -> None:
    result = run_cli("token", "--sub", "alice", "--admin", JOBRELAY_DATA_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    issuer = LocalIssuer(tmp_path)

    async def fetch() -> dict[str, object]:
        return issuer.jwks()

    verifier = TokenVerifier(
        TokenPolicy(issuer=LOCAL_ISSUER, client_ids=frozenset({LOCAL_CLIENT_ID})),
        JwksCache(fetch),
    )
    caller = await verifier.verify(result.stdout.strip())
    assert (caller.sub, caller.is_admin) == ("alice", True)


def test_token_refuses_a_long_subject(tmp_path: Path) -> None:
    result = run_cli("token", "--sub", "x" * 51, JOBRELAY_DATA_DIR=str(tmp_path))
    assert result.returncode == 2
    assert "--sub must be 1 to 50 characters" in result.stderr


def test_admin_commands_build_a_tenant(db_dsn: str) -> None:
    org = json.loads(run_cli("admin", "create-org", "acme", DATABASE_URL=db_dsn).stdout)
    project = json.loads(
        run_cli(
            "admin", "create-project", "web", "--org", str(org["id"]), DATABASE_URL=db_dsn
        ).stdout
    )
    member = run_cli(
        "admin",
        "add-member",
        "--org",
        str(org["id"]),
        "--sub",
        "alice",
        "--role",
        "admin",
        DATABASE_URL=db_dsn,
    )
    assert member.returncode == 0, member.stderr
    listing = json.loads(run_cli("admin", "list", DATABASE_URL=db_dsn).stdout)
    assert listing == [
        {
            "id": org["id"],
            "name": "acme",
            "projects": [{"id": project["id"], "name": "web"}],
            "members": [{"subject": "alice", "role": "admin"}],
        }
    ]


def test_admin_names_a_missing_organization_and_a_bad_role(db_dsn: str) -> None:
    missing = run_cli("admin", "create-project", "web", "--org", "424242", DATABASE_URL=db_dsn)
    assert missing.returncode == 2
    assert "organization 424242 not found" in missing.stderr
    bad_role = run_cli(
        "admin", "add-member", "--org", "1", "--sub", "a", "--role", "boss", DATABASE_URL=db_dsn
    )
    assert bad_role.returncode == 2
    assert "--role must be member or admin" in bad_role.stderr
