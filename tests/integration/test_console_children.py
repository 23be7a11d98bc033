"""The console's pages of a batch's children (/ui/page-imports/{id}, /ui/code2des/{id}),
Code2WF generations (/ui/code2wf/{id}) and Code2WF discovery by Figma file key, over the
real app and PostgreSQL: reached from the batch page, showing status, dispatch attempts,
errors and outputs; another organization's row is the same 404 page as a missing one."""

from __future__ import annotations

from tests.batch_support import create_batch, outcome, page_items, post_webhook
from tests.harness import ApiHarness
from tests.integration import test_console_ui
from tests.integration.test_console_ui import Login, _page, _text

login = test_console_ui.login  # the fixture: a client logged in through the login form


async def _children(api: ApiHarness, batch_id: str) -> list[str]:
    items = await api.client.get(f"/v1/batches/{batch_id}/items", headers=api.headers("alice"))
    assert items.status_code == 200, items.text
    return [str(i["jobId"]) for i in items.json()["items"]]


async def _generation(api: ApiHarness, project_id: int, page_import_id: str, file: str) -> str:
    created = await api.client.post(
        f"/v1/projects/{project_id}/code2wf",
        json={"pageImportId": page_import_id, "figmaFileKey": file, "screenId": "desktop"},
        headers=api.headers("alice"),
    )
    assert created.status_code == 201, created.text
    return str(created.json()["code2wfId"])


async def test_children_are_reachable_from_the_batch_page_with_their_state(
    api: ApiHarness, login: Login
) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(3))
    done, failed, waiting = await _children(api, batch["id"])
    assert (await post_webhook(api.client, outcome(done))).status_code == 200
    assert (await post_webhook(api.client, outcome(failed, "failed"))).status_code == 200
    alice = await login("alice")

    page = _page(await alice.get(f"/ui/batches/{batch['id']}"))
    links = [a.attributes["href"] for a in page.css("table#items a")]
    assert links[:3] == [f"/ui/page-imports/{c}" for c in (done, failed, waiting)]

    completed = _page(await alice.get(f"/ui/page-imports/{done}"))
    assert _text(completed, "#status") == "completed"
    assert _text(completed, "#result") == f"results/{done}/manifest.json"
    assert _text(completed, "#batch") == batch["id"]
    assert '"url": "https://example.com/page/0"' in _text(completed, "#request")

    failure = _page(await alice.get(f"/ui/page-imports/{failed}"))
    assert _text(failure, "#status") == "failed"
    assert _text(failure, "#error") == "the page could not be fetched"

    queued = _page(await alice.get(f"/ui/page-imports/{waiting}"))
    assert _text(queued, "#status") == "processing"
    assert _text(queued, "#dispatch-attempts") == "0"  # no relay runs in this test
    assert "position 2" in _text(queued, "#dispatch")

    # A Code2Des batch links to the Code2Des pages.
    c2d = await create_batch(api, scope, [{"html": "<div/>"}], batch_type="code2des")
    [child] = await _children(api, c2d["id"])
    c2d_page = _page(await alice.get(f"/ui/batches/{c2d['id']}"))
    assert [a.attributes["href"] for a in c2d_page.css("table#items a")] == [
        f"/ui/code2des/{child}"
    ]
    assert _text(_page(await alice.get(f"/ui/code2des/{child}")), "#status") == "processing"


async def test_code2wf_from_a_page_import_and_discovery_by_figma_file_key(
    api: ApiHarness, login: Login
) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(1))
    [page_import] = await _children(api, batch["id"])
    assert (await post_webhook(api.client, outcome(page_import))).status_code == 200
    first = await _generation(api, scope.project_id, page_import, "FILE-A")
    second = await _generation(api, scope.project_id, page_import, "FILE-A")
    other = await _generation(api, scope.project_id, page_import, "FILE-B")
    alice = await login("alice")

    page = _page(await alice.get(f"/ui/page-imports/{page_import}"))
    assert [a.text() for a in page.css("table#generations td:first-child a")] == [
        first,
        second,
        other,
    ]
    generation = _page(await alice.get(f"/ui/code2wf/{first}"))
    assert _text(generation, "#status") == "processing"
    assert _text(generation, "#page-import") == page_import
    assert _text(generation, "#figma-file") == "FILE-A"

    project = f"/ui/projects/{scope.project_id}"
    listing = _page(await alice.get(f"{project}/batches"))
    assert listing.css_first("a#code2wf").attributes["href"] == f"{project}/code2wf"  # type: ignore[union-attr]
    form = _page(await alice.get(f"{project}/code2wf"))
    assert form.css_first("form#discover") is not None and form.css_first("table") is None
    found = _page(await alice.get(f"{project}/code2wf", params={"figmaFileKey": "FILE-A"}))
    assert [a.text() for a in found.css("table#generations td:first-child a")] == [first, second]
    none = _page(
        await alice.get(f"{project}/code2wf", params={"figmaFileKey": "FILE-A", "status": "1"})
    )
    assert "no generations of this file" in _text(none, "table#generations")

    bad = await alice.get(f"{project}/code2wf", params={"figmaFileKey": "F", "status": "9"})
    assert bad.status_code == 422 and "unknown status '9'" in _page(bad).text()
    long_key = await alice.get(f"{project}/code2wf", params={"figmaFileKey": "k" * 300})
    assert long_key.status_code == 422 and "figmaFileKey" in long_key.text


async def test_another_organizations_children_are_404_pages(api: ApiHarness, login: Login) -> None:
    scope = await api.tenant("alice")
    await api.tenant("bob")
    batch = await create_batch(api, scope, page_items(1))
    [page_import] = await _children(api, batch["id"])
    assert (await post_webhook(api.client, outcome(page_import))).status_code == 200
    generation = await _generation(api, scope.project_id, page_import, "FILE-A")
    c2d = await create_batch(api, scope, [{"html": "<div/>"}], batch_type="code2des")
    [code2des] = await _children(api, c2d["id"])
    alice = await login("alice")
    bob = await login("bob")

    cases: list[tuple[str, str, str]] = [
        (f"/ui/page-imports/{page_import}", "/ui/page-imports/nope", "page_import not found"),
        (f"/ui/code2des/{code2des}", "/ui/code2des/nope", "code2des not found"),
        (f"/ui/code2wf/{generation}", "/ui/code2wf/nope", "code2wf not found"),
    ]
    for path, missing, detail in cases:
        assert (await alice.get(path)).status_code == 200, path
        foreign = await bob.get(path)
        absent = await alice.get(missing)
        assert foreign.status_code == absent.status_code == 404, path
        assert _text(_page(foreign), "#detail") == _text(_page(absent), "#detail") == detail
    discover = await bob.get(
        f"/ui/projects/{scope.project_id}/code2wf", params={"figmaFileKey": "FILE-A"}
    )
    assert discover.status_code == 404
    assert (await alice.get("/ui/page-imports/" + "x" * 300)).status_code == 422
