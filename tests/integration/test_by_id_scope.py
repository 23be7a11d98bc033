"""Resources reached by their own id (issue 15: one way to authorize them): every by-id route
answers another organization's caller exactly as it answers a missing id (404, same body)
and changes nothing, while a member of the owning organization reaches the resource."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

import pytest
from fastapi.routing import APIRoute

from jobrelay.api import routes as routes_package
from jobrelay.api.app import create_app
from jobrelay.api.deps import (
    visible_batch_id,
    visible_code2des_id,
    visible_code2wf_id,
    visible_page_import_id,
)
from tests.batch_support import create_batch, outcome, page_items, post_webhook
from tests.harness import ApiHarness


@dataclass(frozen=True)
class ByIdRoute:
    method: str
    path: str  # as the app declares it, e.g. /v1/batches/{batchId}
    resource: str  # which of `Resources` the id names
    member_status: int  # a member's answer: 200/204, or 409 where the state forbids the action
    read_path: str  # where the owner reads the resource to see that a foreign call changed nothing


ROUTES = [
    ByIdRoute("GET", "/v1/batches/{batchId}", "batch", 200, "/v1/batches/{batchId}"),
    ByIdRoute("GET", "/v1/batches/{batchId}/items", "batch", 200, "/v1/batches/{batchId}"),
    ByIdRoute("POST", "/v1/batches/{batchId}/cancel", "batch", 200, "/v1/batches/{batchId}"),
    ByIdRoute("DELETE", "/v1/batches/{batchId}", "batch", 204, "/v1/batches/{batchId}"),
    ByIdRoute(
        "GET",
        "/v1/page-imports/{pageImportId}",
        "page_import",
        200,
        "/v1/page-imports/{pageImportId}",
    ),
    ByIdRoute("GET", "/v1/code2des/{code2desId}", "code2des", 200, "/v1/code2des/{code2desId}"),
    ByIdRoute("GET", "/v1/code2wf/{code2wfId}", "code2wf", 200, "/v1/code2wf/{code2wfId}"),
    # The generation is still processing: 409 shows the member got through to it.
    ByIdRoute("GET", "/v1/code2wf/{code2wfId}/result", "code2wf", 409, "/v1/code2wf/{code2wfId}"),
    ByIdRoute(
        "POST", "/v1/code2wf/{code2wfId}/materialize", "code2wf", 409, "/v1/code2wf/{code2wfId}"
    ),
    ByIdRoute("DELETE", "/v1/code2wf/{code2wfId}", "code2wf", 204, "/v1/code2wf/{code2wfId}"),
]
ID_PARAMETERS = ("{batchId}", "{pageImportId}", "{code2desId}", "{code2wfId}")
AUTHORIZERS = {
    visible_batch_id,
    visible_page_import_id,
    visible_code2des_id,
    visible_code2wf_id,
}


@dataclass(frozen=True)
class Resources:
    """One of each by-id resource, owned by alice's organization."""

    organization_id: int
    batch: str  # a processing code2des batch (cancellable)
    page_import: str  # completed, the source of the generation
    code2des: str
    code2wf: str  # processing

    def url(self, template: str, resource: str) -> str:
        return _with_id(template, str(getattr(self, resource)))


def _with_id(template: str, resource_id: str) -> str:
    for name in ID_PARAMETERS:
        template = template.replace(name, resource_id)
    return template


async def _resources_of_alice(api: ApiHarness) -> Resources:
    alice = await api.tenant("alice")
    await api.tenant("bob")  # bob is a member, of another organization
    headers = api.headers("alice")
    imports = await create_batch(api, alice, page_items(1))
    [page_import] = (
        await api.client.get(f"/v1/batches/{imports['id']}/items", headers=headers)
    ).json()["items"]
    finished = await post_webhook(api.client, outcome(page_import["jobId"]))
    assert finished.status_code == 200, finished.text
    designs = await create_batch(api, alice, [{"html": "<p>x</p>"}], batch_type="code2des")
    [code2des] = (
        await api.client.get(f"/v1/batches/{designs['id']}/items", headers=headers)
    ).json()["items"]
    generation = await api.client.post(
        f"/v1/projects/{alice.project_id}/code2wf",
        json={"pageImportId": page_import["jobId"], "figmaFileKey": "F", "screenId": "s"},
        headers=headers,
    )
    assert generation.status_code == 201, generation.text
    return Resources(
        organization_id=alice.organization_id,
        batch=designs["id"],
        page_import=page_import["jobId"],
        code2des=code2des["jobId"],
        code2wf=generation.json()["code2wfId"],
    )


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
async def test_another_organizations_resource_is_404_like_a_missing_one(
    api: ApiHarness, route: ByIdRoute
) -> None:
    resources = await _resources_of_alice(api)
    owner_view = resources.url(route.read_path, route.resource)
    before = await api.client.get(owner_view, headers=api.headers("alice"))
    assert before.status_code == 200

    foreign = await api.client.request(
        route.method, resources.url(route.path, route.resource), headers=api.headers("bob")
    )
    missing = await api.client.request(
        route.method, _with_id(route.path, "no-such-id"), headers=api.headers("bob")
    )

    assert foreign.status_code == missing.status_code == 404
    assert foreign.json() == missing.json(), "a foreign id must look exactly like a missing one"
    after = await api.client.get(owner_view, headers=api.headers("alice"))
    assert after.json() == before.json(), "a refused call must change nothing"


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
async def test_a_member_of_the_owning_organization_reaches_the_resource(
    api: ApiHarness, route: ByIdRoute
) -> None:
    resources = await _resources_of_alice(api)
    answer = await api.client.request(
        route.method, resources.url(route.path, route.resource), headers=api.headers("alice")
    )
    assert answer.status_code == route.member_status, answer.text
    if route.member_status == 200 and route.path == route.read_path:
        assert answer.json()["organizationId"] == resources.organization_id


def _dependencies(route: APIRoute) -> set[object]:
    pending, calls = [route.dependant], set()
    while pending:
        dependant = pending.pop()
        calls.add(dependant.call)
        pending.extend(dependant.dependencies)
    return calls


def _api_routes() -> list[APIRoute]:
    """Every route of every module of `jobrelay.api.routes` (a new module included)."""
    found = []
    for module in pkgutil.iter_modules(routes_package.__path__):
        router = importlib.import_module(f"{routes_package.__name__}.{module.name}").router
        found.extend(r for r in router.routes if isinstance(r, APIRoute))
    return found


def _by_id(path: str) -> bool:
    return any(name in path for name in ID_PARAMETERS)


async def test_every_by_id_route_is_authorized_by_the_shared_dependency(api: ApiHarness) -> None:
    """A new route taking a resource id must use an `...IdDep` (and be listed above)."""
    document = create_app(api.services).openapi()
    served = {
        (method.upper(), path)
        for path, operations in document["paths"].items()
        if _by_id(path)
        for method in operations
    }
    assert served == {(r.method, r.path) for r in ROUTES}
    declared = [route for route in _api_routes() if _by_id(route.path)]
    assert {(m, r.path) for r in declared for m in r.methods} == served
    for route in declared:
        assert _dependencies(route) & AUTHORIZERS, f"{route.path} reaches a resource unchecked"
