"""The API against its own OpenAPI document: every route is covered by auth and scoping,
and schemathesis finds no 5xx and no response that breaks the schema."""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from jobrelay.auth.local_issuer import LocalIssuer
from jobrelay.auth.tenancy import ProjectScope
from jobrelay.aws.emulator import free_port
from tests.batch_support import create_batch, page_items
from tests.harness import ApiHarness, cli_env, jobrelay_command, wait_until

# Routes anyone may call. Everything else needs a bearer token.
PUBLIC = {"/healthz", "/readyz", "/dev/local-issuer/jwks.json", "/v1/webhooks/worker"}
# (The worker webhook is authenticated by its Standard Webhooks signature instead.)

# Routes not scoped to an organization: the caller itself, and admin-only jobs endpoints.
NOT_TENANT_SCOPED = re.compile(r"^/v1/(me|jobs.*|workflows.*|media/.*|schedules)$")

# How to make a resource in another organization for each path parameter (optionally per
# path); a new route with a new parameter must add its factory here, so no endpoint escapes
# the 404 check.
ResourceFactory = Callable[[ApiHarness, ProjectScope], Awaitable[str]]


async def _foreign_project(api: ApiHarness, theirs: ProjectScope) -> str:
    return str(theirs.project_id)


async def _any_job(api: ApiHarness, theirs: ProjectScope) -> str:
    return str(uuid.uuid4())  # jobs are not tenant resources: admin role, checked as 401/403


async def _foreign_batch(api: ApiHarness, theirs: ProjectScope) -> str:
    return str((await create_batch(api, theirs, page_items(1), sub="eve"))["id"])


async def _foreign_child(kind: str, api: ApiHarness, theirs: ProjectScope) -> str:
    items = page_items(1) if kind == "page_import" else [{"html": "<p>x</p>"}]
    batch = await create_batch(api, theirs, items, batch_type=kind, sub="eve")
    listed = await api.client.get(f"/v1/batches/{batch['id']}/items", headers=api.headers("eve"))
    return str(listed.json()["items"][0]["jobId"])


async def _foreign_page_import(api: ApiHarness, theirs: ProjectScope) -> str:
    return await _foreign_child("page_import", api, theirs)


async def _foreign_code2des(api: ApiHarness, theirs: ProjectScope) -> str:
    return await _foreign_child("code2des", api, theirs)


async def _foreign_code2wf(api: ApiHarness, theirs: ProjectScope) -> str:
    page_import_id = await _foreign_page_import(api, theirs)
    async with api.services.pool.connection() as conn:
        await conn.execute(
            "UPDATE page_import SET status = '1', result_url = 'k' WHERE id = %s",
            (page_import_id,),
        )
    created = await api.client.post(
        f"/v1/projects/{theirs.project_id}/code2wf",
        json={"pageImportId": page_import_id, "figmaFileKey": "F", "screenId": "s"},
        headers=api.headers("eve"),
    )
    assert created.status_code == 201, created.text
    return str(created.json()["code2wfId"])


RESOURCE_FACTORIES: dict[str, ResourceFactory] = {
    "code2wfId": _foreign_code2wf,
    "projectId": _foreign_project,
    "jobId": _any_job,
    "workflowId": _any_job,  # workflows, like jobs, are the admin role's, not a tenant's
    "batchId": _foreign_batch,
    "pageImportId": _foreign_page_import,
    "code2desId": _foreign_code2des,
}


def _factory(path: str, param: str) -> ResourceFactory | None:
    return RESOURCE_FACTORIES.get(f"{path}:{param}") or RESOURCE_FACTORIES.get(param)


def _operations(openapi: dict[str, object]) -> Iterator[tuple[str, str]]:
    paths = openapi["paths"]
    assert isinstance(paths, dict)
    for path, item in paths.items():
        for method in item:
            yield method.upper(), path


async def test_every_route_needs_a_token_and_hides_other_organizations(api: ApiHarness) -> None:
    openapi = (await api.client.get("/openapi.json")).json()
    theirs = await api.tenant("eve")
    await api.tenant("alice")
    checked = 0
    for method, path in _operations(openapi):
        if path in PUBLIC:
            continue
        params = re.findall(r"{(\w+)}", path)
        missing = [p for p in params if _factory(path, p) is None]
        assert not missing, f"{method} {path}: add a factory for {missing} to RESOURCE_FACTORIES"
        values = {}
        for param in params:
            factory = _factory(path, param)
            assert factory is not None
            values[param] = await factory(api, theirs)
        url = path.format(**values)
        anonymous = await api.client.request(method, url, json={})
        assert anonymous.status_code == 401, f"{method} {path} without a token"
        if NOT_TENANT_SCOPED.match(path) or not params:
            continue
        foreign = await api.client.request(method, url, json={}, headers=api.headers("alice"))
        assert foreign.status_code == 404, f"{method} {path} as a member of another org"
        assert foreign.headers["content-type"] == "application/problem+json"
        checked += 1
    assert checked >= 1


async def test_oversized_bodies_are_413_problem(api: ApiHarness) -> None:
    cap = api.services.settings.api.max_body_bytes
    response = await api.client.post(
        "/v1/webhooks/worker", content=b"x" * (cap + 1), headers=api.headers("alice")
    )
    assert response.status_code == 413
    assert response.json()["type"].endswith("/body-too-large")


@pytest.fixture
def running_api(db_dsn: str, issuer_dir: Path) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [*jobrelay_command(), "api", "--port", str(port)],
        env=cli_env(DATABASE_URL=db_dsn, JOBRELAY_DATA_DIR=str(issuer_dir)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        try:
            return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, timeout_s=60, what="the API subprocess")
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


# 18-47 s of generated requests: in make test-long (CI runs it), keeping make test in budget.
@pytest.mark.slow
@pytest.mark.long
def test_schemathesis_finds_no_server_error_or_schema_violation(
    running_api: str, db_dsn: str, issuer_dir: Path, tmp_path: Path
) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            """
            WITH org AS (INSERT INTO organization (name, created_by, updated_by)
                         VALUES ('fuzz', 'fuzzer', 'fuzzer') RETURNING id),
                 proj AS (INSERT INTO project (organization_id, name, created_by, updated_by)
                          SELECT id, 'fuzz', 'fuzzer', 'fuzzer' FROM org)
            INSERT INTO organization_member (organization_id, subject, role, created_by,
                                             updated_by)
            SELECT id, 'fuzzer', 'admin', 'fuzzer', 'fuzzer' FROM org
            """
        )
    token = LocalIssuer(issuer_dir).mint("fuzzer", admin=True)
    result = subprocess.run(
        [
            str(Path(jobrelay_command()[0]).with_name("schemathesis")),
            "run",
            f"{running_api}/openapi.json",
            "--header",
            f"Authorization: Bearer {token}",
            "--checks",
            "not_a_server_error,response_schema_conformance,content_type_conformance",
            "--max-examples",
            "40",
            "--seed",
            "20261129",
            "--generation-database",
            "none",
            "--request-timeout",
            "10",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
        env=cli_env(SCHEMATHESIS_HOOKS=None),
    )

    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
