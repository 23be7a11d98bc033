"""The console's pages (/ui) over the real app and PostgreSQL, through httpx with a cookie
jar per user: login and the session cookie, each page showing the state the test built,
retry and cancel with and without the CSRF token, tenancy (another organization's batch is
a 404 page) and the admin role (403 pages)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest
from selectolax.lexbor import LexborHTMLParser as HTMLParser

from jobrelay.api import create_app
from jobrelay.api.ui.session import COOKIE
from jobrelay.domain.jobs import FailureKind
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims, presence
from jobrelay.jobs.claims import Done
from jobrelay.jobs.models import ClaimedJob
from jobrelay.ops.control import set_pause
from tests.batch_support import create_batch, outcome, page_items, post_webhook
from tests.harness import ApiHarness, api_harness
from tests.integration.test_console import _enqueue, _sql

Login = Callable[..., Awaitable[httpx.AsyncClient]]


def _page(response: httpx.Response) -> HTMLParser:
    assert response.headers["content-type"].startswith("text/html"), response.text
    return HTMLParser(response.text)


def _text(page: HTMLParser, selector: str) -> str:
    node = page.css_first(selector)
    assert node is not None, f"{selector} not in the page"
    return " ".join(node.text().split())


def _csrf(response: httpx.Response) -> str:
    node = _page(response).css_first("input[name=csrf]")
    assert node is not None and node.attributes.get("value")
    return str(node.attributes["value"])


def _client(api: ApiHarness) -> httpx.AsyncClient:
    """A browser of its own: a fresh cookie jar over the same services."""
    transport = httpx.ASGITransport(app=create_app(api.services))
    return httpx.AsyncClient(transport=transport, base_url="http://api")


async def _log_in(client: httpx.AsyncClient, sub: str, *, admin: bool = False) -> None:
    form = await client.get("/ui/login")
    assert form.status_code == 200
    data = {"csrf": _csrf(form), "subject": sub, "next": "/ui/"}
    if admin:
        data["admin"] = "on"
    response = await client.post("/ui/login", data=data)
    assert response.status_code == 303, response.text


@pytest.fixture
async def login(api: ApiHarness) -> AsyncIterator[Login]:
    """`await login("alice", admin=False)`: a client logged in through the login form."""
    async with AsyncExitStack() as stack:

        async def log_in(sub: str, *, admin: bool = False) -> httpx.AsyncClient:
            client = await stack.enter_async_context(_client(api))
            await _log_in(client, sub, admin=admin)
            return client

        yield log_in


async def _claim(api: ApiHarness, cls: str = "default", worker: str = "w-test") -> ClaimedJob:
    async with api.services.pool.connection() as conn:
        [job] = await claims.claim(
            conn, QueueLimits(lease_s=60.0, total=1, slots={cls: 1}), worker_id=worker
        )
    return job


async def _failed_job(api: ApiHarness) -> uuid.UUID:
    job_id = await _enqueue(api)
    claimed = await _claim(api)
    assert claimed.id == job_id
    async with api.services.pool.connection() as conn:
        await claims.fail(conn, claimed, kind=FailureKind.PERMANENT, error="the page was gone")
    return job_id


# -- login -------------------------------------------------------------------------------


async def test_login_sets_a_signed_http_only_cookie_and_opens_the_console(
    api: ApiHarness,
) -> None:
    async with _client(api) as client:
        first = await client.get("/ui/overview")
        assert first.status_code == 303
        assert first.headers["location"] == "/ui/login?next=/ui/overview"

        form = await client.get("/ui/login", params={"next": "/ui/overview"})
        page = _page(form)
        assert page.css_first("form#login input[name=subject]") is not None
        assert page.css_first("form#login input[name=admin][type=checkbox]") is not None
        response = await client.post(
            "/ui/login",
            data={"csrf": _csrf(form), "subject": "ops", "admin": "on", "next": "/ui/overview"},
        )
        assert response.status_code == 303
        assert response.headers["location"] == "/ui/overview"
        cookie = response.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}=")
        assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/ui" in cookie
        assert "Secure" not in cookie  # JOBRELAY_ENV=development
        # The JWT is inside the signed cookie; nothing readable to scripts.
        overview = await client.get("/ui/overview")
        assert overview.status_code == 200
        assert _text(_page(overview), "header .who").startswith("ops (admin)")

        # A tampered cookie is no session: back to the login form.
        value = client.cookies[COOKIE]
        client.cookies.clear()
        client.cookies.set(COOKIE, value[:-2] + ("AA" if value[-2:] != "AA" else "BB"))
        assert (await client.get("/ui/overview")).status_code == 303

        # Off-site `next` targets are ignored.
        client.cookies.clear()
        form = await client.get("/ui/login")
        response = await client.post(
            "/ui/login",
            data={"csrf": _csrf(form), "subject": "ops", "next": "//evil.example/x"},
        )
        assert response.headers["location"] == "/ui/"


async def test_login_and_logout_need_the_csrf_token(api: ApiHarness) -> None:
    async with _client(api) as client:
        await client.get("/ui/login")
        refused = await client.post("/ui/login", data={"subject": "ops", "admin": "on"})
        assert refused.status_code == 403
        assert "CSRF" in _text(_page(refused), "#detail")
        wrong = await client.post("/ui/login", data={"csrf": "x" * 43, "subject": "ops"})
        assert wrong.status_code == 403
        assert (await client.get("/ui/batches")).status_code == 303  # still not logged in

        await _log_in(client, "ops")
        assert (await client.get("/ui/batches")).status_code == 200
        assert (await client.post("/ui/logout", data={})).status_code == 403
        page = await client.get("/ui/batches")
        out = await client.post("/ui/logout", data={"csrf": _csrf(page)})
        assert out.status_code == 303
        assert (await client.get("/ui/batches")).status_code == 303


async def test_an_empty_subject_is_a_clear_message(api: ApiHarness) -> None:
    async with _client(api) as client:
        form = await client.get("/ui/login")
        response = await client.post("/ui/login", data={"csrf": _csrf(form), "subject": " "})
        assert response.status_code == 422
        assert "subject" in response.text


async def test_outside_development_the_cookie_is_secure(db_dsn: str, issuer_dir: Path) -> None:
    async with api_harness(
        db_dsn, issuer_dir, env="production", ui={"session_secret": "s" * 40}
    ) as harness:
        transport = httpx.ASGITransport(app=create_app(harness.services))
        async with httpx.AsyncClient(transport=transport, base_url="https://api") as client:
            form = await client.get("/ui/login")
            assert "Secure" in form.headers["set-cookie"]
            response = await client.post("/ui/login", data={"csrf": _csrf(form), "subject": "ops"})
            assert response.status_code == 303
            assert "Secure" in response.headers["set-cookie"]
            assert (await client.get("/ui/batches")).status_code == 200


async def test_cognito_mode_says_the_console_login_is_not_configured(
    db_dsn: str, issuer_dir: Path
) -> None:
    async with api_harness(
        db_dsn,
        issuer_dir,
        auth={
            "mode": "cognito",
            "cognito_user_pool_id": "eu-west-1_AbC123",
            "cognito_region": "eu-west-1",
            "client_ids": "client1",
        },
    ) as harness:
        response = await harness.client.get("/ui/login")
        assert response.status_code == 501
        assert "not configured" in _text(_page(response), "h1")
        assert _page(response).css_first("form#login") is None


# -- admin pages -------------------------------------------------------------------------


async def test_overview_page_shows_jobs_classes_pause_and_batch_progress(
    api: ApiHarness, login: Login
) -> None:
    done = await _enqueue(api)
    claimed = await _claim(api)
    assert claimed.id == done
    async with api.services.pool.connection() as conn:
        await claims.settle_many(conn, [Done(claimed, None)])
    await _failed_job(api)
    await _enqueue(api)
    async with api.services.pool.connection() as conn:
        await presence.announce(
            conn, worker_id="w-1", class_slots={"default": 4}, global_caps={}, interval_s=10.0
        )
    await set_pause(api.services.pool, claims=True, enqueue=False, reason="deploy", actor="ops")
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(4))
    [first, *_] = await _sql(
        api, "SELECT job_id FROM batch_item WHERE batch_id = %s ORDER BY position", batch["id"]
    )
    assert (await post_webhook(api.client, outcome(first["job_id"]))).status_code == 200

    client = await login("ops", admin=True)
    response = await client.get("/ui/overview")
    assert response.status_code == 200
    page = _page(response)
    assert _text(page, "#claims") == "paused" and _text(page, "#enqueue") == "open"
    assert _text(page, "#completed") == "1 / 1" and _text(page, "#failed") == "1 / 1"
    rows = {
        tuple(" ".join(td.text().split()) for td in tr.css("td")[:3])
        for tr in page.css("table#jobs tr")
    }
    assert {("diag.noop", "pending", "1"), ("diag.noop", "completed", "1")} <= rows
    assert ("diag.noop", "failed", "1") in rows
    classes = [" ".join(tr.text().split()) for tr in page.css("table#classes tr")[1:]]
    assert any(row.startswith("default 0 / ∞ 1") and "1 (0)" in row for row in classes)
    [batch_row] = page.css("table#batches tr")[1:]
    assert batch["id"] in batch_row.text() and "1 / 4" in batch_row.text()
    assert batch_row.css_first(".bar .completed").attributes["style"] == "width: 25.0%"
    assert "deploy" in response.text
    # The live part is an HTML fragment the page's script polls.
    live = await client.get("/ui/overview/live")
    assert live.status_code == 200 and "<html" not in live.text
    assert _text(_page(live), "#claims") == "paused"
    assert 'data-src="/ui/overview/live"' in response.text


async def test_health_page_shows_tables_and_relay_lag(api: ApiHarness, login: Login) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(3))
    client = await login("ops", admin=True)
    response = await client.get("/ui/health")
    assert response.status_code == 200
    page = _page(response)
    tables = [tr.css_first("td").text() for tr in page.css("table#tables tr")[1:]]
    assert {"jobs", "batch", "batch_item"} <= set(tables)
    lag = " ".join(page.css_first("#relay-lag").parent.text().split())  # type: ignore[union-attr]
    assert "3 undispatched" in lag and batch["id"] in lag


async def test_jobs_list_filters_and_explains_bad_filters(api: ApiHarness, login: Login) -> None:
    noop = await _enqueue(api)
    sleep = await _enqueue(api, "diag.sleep", payload={"seconds": 1})
    client = await login("ops", admin=True)
    page = _page(await client.get("/ui/jobs"))
    assert {str(noop), str(sleep)} <= {a.text() for a in page.css("table#jobs a")}
    page = _page(await client.get("/ui/jobs", params={"type": "diag.sleep"}))
    assert [a.text() for a in page.css("table#jobs a")] == [str(sleep)]
    page = _page(await client.get("/ui/jobs", params={"status": "completed"}))
    assert page.css("table#jobs a") == []

    bad = await client.get("/ui/jobs", params={"status": "bogus"})
    assert bad.status_code == 422 and "unknown status 'bogus'" in _page(bad).text()
    malformed = await client.get("/ui/jobs", params={"before": "not-a-uuid"})
    assert malformed.status_code == 422 and "before" in malformed.text
    assert (await client.get("/ui/jobs/not-a-uuid")).status_code == 422
    missing = await client.get(f"/ui/jobs/{uuid.uuid4()}")
    assert missing.status_code == 404 and "not found" in _text(_page(missing), "#detail")


async def test_job_page_shows_the_job_and_why_it_waits_for_a_busy_source(
    api: ApiHarness, login: Login
) -> None:
    async with api.services.pool.connection() as conn:
        await presence.announce(
            conn, worker_id="w-live", class_slots={"default": 4}, global_caps={}, interval_s=10.0
        )
    sleep = {"seconds": 1, "sourceKey": "source:7"}
    first = await _enqueue(api, "diag.sleep", payload=sleep)
    second = await _enqueue(api, "diag.sleep", payload=sleep)
    assert (await _claim(api, worker="w-busy")).id == first
    child = await _enqueue(api, parent_id=second)
    client = await login("ops", admin=True)

    page = _page(await client.get(f"/ui/jobs/{second}"))
    assert _text(page, "#status") == "pending"
    assert '"sourceKey": "source:7"' in _text(page, "#payload")
    assert _text(page, "#diagnosis strong") == "source_busy"
    assert [a.text() for a in page.css("#blocking a")] == [str(first)]
    assert "claimed by w-busy" in _text(page, "#blocking")
    assert (await api.services.jobs.get(child)).parent_id == second
    assert [a.text() for a in page.css("table#children a")] == [str(child)]
    assert page.css_first("button#cancel") is not None and page.css_first("button#retry") is None

    child_page = _page(await client.get(f"/ui/jobs/{child}"))
    assert _text(child_page, "#parent") == str(second)
    running = _page(await client.get(f"/ui/jobs/{first}"))
    assert "w-busy" in _text(running, "#details")


async def test_retry_and_cancel_work_with_the_csrf_token_and_are_refused_without(
    api: ApiHarness, login: Login
) -> None:
    failed = await _failed_job(api)
    client = await login("ops", admin=True)
    page = await client.get(f"/ui/jobs/{failed}")
    assert _text(_page(page), "#last-error") == "the page was gone"
    csrf = _csrf(page)

    refused = await client.post(f"/ui/jobs/{failed}/retry", data={})
    assert refused.status_code == 403
    forged = await client.post(f"/ui/jobs/{failed}/retry", data={"csrf": "forged"})
    assert forged.status_code == 403
    assert (await api.services.jobs.get(failed)).status == "failed"

    retried = await client.post(f"/ui/jobs/{failed}/retry", data={"csrf": csrf})
    assert retried.status_code == 303 and retried.headers["location"] == f"/ui/jobs/{failed}"
    assert (await api.services.jobs.get(failed)).status == "pending"

    assert (await client.post(f"/ui/jobs/{failed}/cancel")).status_code == 403
    assert (await api.services.jobs.get(failed)).status == "pending"
    cancelled = await client.post(f"/ui/jobs/{failed}/cancel", data={"csrf": csrf})
    assert cancelled.status_code == 303
    assert (await api.services.jobs.get(failed)).status == "cancelled"
    after = _page(await client.get(f"/ui/jobs/{failed}"))
    assert _text(after, "#status") == "cancelled" and after.css_first("button#retry") is not None
    # Cancelling a cancelled job again is idempotent; retrying a pending one is a conflict page.
    await client.post(f"/ui/jobs/{failed}/retry", data={"csrf": csrf})
    conflict = await client.post(f"/ui/jobs/{failed}/retry", data={"csrf": csrf})
    assert conflict.status_code == 409 and "only failed or cancelled" in conflict.text


async def test_a_member_gets_403_pages_for_admin_pages(api: ApiHarness, login: Login) -> None:
    job_id = await _failed_job(api)
    client = await login("alice")
    assert (await client.get("/ui/")).headers["location"] == "/ui/batches"
    for path in (
        "/ui/overview",
        "/ui/overview/live",
        "/ui/health",
        "/ui/jobs",
        f"/ui/jobs/{job_id}",
    ):
        response = await client.get(path)
        assert response.status_code == 403, path
        assert "admin role" in _text(_page(response), "#detail")
    csrf = _csrf(await client.get("/ui/batches"))
    assert (await client.post(f"/ui/jobs/{job_id}/retry", data={"csrf": csrf})).status_code == 403
    assert (await api.services.jobs.get(job_id)).status == "failed"


# -- batches (members) -------------------------------------------------------------------


async def test_a_member_sees_their_batches_and_404_for_another_organizations(
    api: ApiHarness, login: Login
) -> None:
    alice_scope = await api.tenant("alice")
    await api.tenant("bob")
    batch = await create_batch(api, alice_scope, page_items(150))
    alice = await login("alice")
    bob = await login("bob")

    projects = _page(await alice.get("/ui/batches"))
    links = [a.attributes["href"] for a in projects.css("main a")]
    assert f"/ui/projects/{alice_scope.project_id}/batches" in links
    listing = _page(await alice.get(f"/ui/projects/{alice_scope.project_id}/batches"))
    [row] = listing.css("table#batches tr")[1:]
    assert batch["id"] in row.text() and "processing" in row.text()

    page = _page(await alice.get(f"/ui/batches/{batch['id']}"))
    assert _text(page, "#batch-status") == "processing"
    assert _text(page, "#progress").startswith("0 / 150")
    positions = [tr.css_first("td").text() for tr in page.css("table#items tr")[1:]]
    assert positions == [str(p) for p in range(100)]
    assert page.css_first("a#next").attributes["href"] == "?after=99"  # type: ignore[union-attr]
    second = _page(await alice.get(f"/ui/batches/{batch['id']}?after=99"))
    assert len(second.css("table#items tr")[1:]) == 50

    # Bob: the same 404 page as a batch that does not exist; the project is a 404 too.
    for path in (
        f"/ui/batches/{batch['id']}",
        f"/ui/batches/{batch['id']}/live",
        "/ui/batches/nope",
    ):
        response = await bob.get(path)
        assert response.status_code == 404, path
        assert _text(_page(response), "#detail") == "batch not found"
    assert (await bob.get(f"/ui/projects/{alice_scope.project_id}/batches")).status_code == 404
    csrf = _csrf(await bob.get("/ui/batches"))
    refused = await bob.post(f"/ui/batches/{batch['id']}/cancel", data={"csrf": csrf})
    assert refused.status_code == 404
    assert (await api.services.batches.get(batch["id"])).status.name == "PROCESSING"

    huge = await alice.get(f"/ui/projects/{alice_scope.project_id}/batches?page=99999999")
    assert huge.status_code == 422 and "page" in huge.text


async def test_cancel_a_batch_from_its_page_needs_the_csrf_token(
    api: ApiHarness, login: Login
) -> None:
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(3))
    alice = await login("alice")
    page = await alice.get(f"/ui/batches/{batch['id']}")
    assert _page(page).css_first("button#cancel") is not None

    assert (await alice.post(f"/ui/batches/{batch['id']}/cancel")).status_code == 403
    assert (await api.services.batches.get(batch["id"])).status.name == "PROCESSING"

    response = await alice.post(f"/ui/batches/{batch['id']}/cancel", data={"csrf": _csrf(page)})
    assert response.status_code == 303
    after = _page(await alice.get(f"/ui/batches/{batch['id']}"))
    assert _text(after, "#batch-status") == "cancelled"
    assert after.css_first("button#cancel") is None
    live = _page(await alice.get(f"/ui/batches/{batch['id']}/live"))
    assert _text(live, "#progress").startswith("3 / 3")
    assert (await api.services.batches.get(batch["id"])).updated_by == "alice"
