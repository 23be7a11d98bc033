"""`jobrelay token` and `jobrelay admin …`: local tokens and tenancy administration."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import typer

from jobrelay.auth.tenancy import Role, Tenancy
from jobrelay.bootstrap import build_services, database, local_issuer
from jobrelay.cli.running_stack import load_cli_settings
from jobrelay.domain.errors import InvalidInput

admin_app = typer.Typer(help="Organizations, projects and members (prints JSON).")

OPS_ACTOR = "ops"


def register(app: typer.Typer) -> None:
    app.command("token")(token_command)
    app.add_typer(admin_app, name="admin")


def token_command(
    sub: str = typer.Option(..., "--sub", help="Subject (user name), at most 50 characters."),
    ttl: int = typer.Option(3600, "--ttl", min=1, help="Lifetime in seconds."),
    admin: bool = typer.Option(False, "--admin", help="Add the admin group (jobs endpoints)."),
    id_token: bool = typer.Option(False, "--id-token", help="Mint an ID token, not access."),
) -> None:
    """Print a token from the local issuer (JOBRELAY_AUTH_MODE=local)."""
    settings = load_cli_settings()
    if settings.auth.mode != "local":
        raise InvalidInput("`jobrelay token` works only with JOBRELAY_AUTH_MODE=local")
    if not sub or len(sub) > 50:
        raise InvalidInput("--sub must be 1 to 50 characters (audit columns are varchar(50))")
    issuer = local_issuer(settings)
    token_use = "id" if id_token else "access"
    typer.echo(issuer.mint(sub, ttl_s=ttl, admin=admin, token_use=token_use))


def _run(action: Callable[[Tenancy], Awaitable[Any]]) -> None:
    settings = load_cli_settings()

    async def go(dsn: str) -> Any:
        async with build_services(settings, dsn) as services:
            return await action(services.tenancy)

    with database(settings) as dsn:
        result = asyncio.run(go(dsn))
    typer.echo(json.dumps(result, default=str, indent=2))


@admin_app.command("create-org")
def create_org(name: str = typer.Argument(..., help="Organization name.")) -> None:
    """Create an organization."""
    _run(lambda t: t.create_organization(name, actor=OPS_ACTOR))


@admin_app.command("create-project")
def create_project(
    name: str = typer.Argument(..., help="Project name."),
    org: int = typer.Option(..., "--org", help="Organization id."),
) -> None:
    """Create a project in an organization."""
    _run(lambda t: t.create_project(org, name, actor=OPS_ACTOR))


@admin_app.command("add-member")
def add_member(
    org: int = typer.Option(..., "--org", help="Organization id."),
    sub: str = typer.Option(..., "--sub", help="Cognito subject."),
    role: str = typer.Option("member", "--role", help="member or admin."),
) -> None:
    """Add (or change the role of) a member of an organization."""
    if role not in ("member", "admin"):
        raise InvalidInput(f"--role must be member or admin, not {role!r}")
    if not sub or len(sub) > 50:
        raise InvalidInput("--sub must be 1 to 50 characters")
    checked: Role = "admin" if role == "admin" else "member"
    _run(lambda t: t.add_member(org, sub, role=checked, actor=OPS_ACTOR))


@admin_app.command("list")
def list_all() -> None:
    """List organizations with their projects and members."""
    _run(lambda t: t.list_organizations())
