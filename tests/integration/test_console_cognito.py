"""The console's login through the Cognito Hosted UI, against a stand-in Cognito on a loopback
port (tests/cognito_support.py) and the real app over PostgreSQL: the authorization-code flow
with PKCE gives a session with the same identity the API knows; a code issued for another
code challenge, a tampered or missing state, an ID token with another nonce and a refused
login are each a clear "Login failed" page, never a session and never a 500."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from selectolax.lexbor import LexborHTMLParser as HTMLParser

from jobrelay.api import create_app
from jobrelay.api.ui.hosted_ui import LOGIN_COOKIE
from jobrelay.api.ui.session import COOKIE
from tests.cognito_support import FakeCognito, User, running
from tests.harness import ApiHarness, api_harness

CONSOLE_CLIENT = "console-client"
ADMINS = "jobrelay-admins"


@pytest.fixture
def cognito() -> AsyncIterator[FakeCognito]:  # type: ignore[misc]
    with running(FakeCognito(client_id=CONSOLE_CLIENT)) as fake:
        yield fake


@dataclasses.dataclass
class Console:
    api: ApiHarness
    cognito: FakeCognito
    browser: httpx.AsyncClient  # the API's console, with a cookie jar
    idp: httpx.AsyncClient  # the same browser's requests to the Hosted UI


@pytest.fixture
async def console(db_dsn: str, issuer_dir: Path, cognito: FakeCognito) -> AsyncIterator[Console]:
    async with api_harness(
        db_dsn,
        issuer_dir,
        auth={
            "mode": "cognito",
            "cognito_user_pool_id": "eu-west-1_Test123",
            "cognito_region": "eu-west-1",
            "client_ids": "api-client",
        },
        ui={"cognito_domain": cognito.base, "cognito_client_id": CONSOLE_CLIENT},
    ) as harness:
        # The API's own verifier (its settings' policy) with the stand-in as the user pool.
        services = dataclasses.replace(
            harness.services, tokens=cognito.verifier_like(harness.services.tokens)
        )
        transport = httpx.ASGITransport(app=create_app(services))
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://api") as browser,
            httpx.AsyncClient() as idp,
        ):
            yield Console(dataclasses.replace(harness, services=services), cognito, browser, idp)


def _page(response: httpx.Response) -> HTMLParser:
    assert response.headers["content-type"].startswith("text/html"), response.text
    return HTMLParser(response.text)


def _text(response: httpx.Response, selector: str) -> str:
    node = _page(response).css_first(selector)
    assert node is not None, f"{selector} not in {response.text}"
    return " ".join(node.text().split())


async def _start(c: Console, path: str = "/ui/overview") -> str:
    """Open a console page without a session: the console's redirect to the Hosted UI."""
    response = await c.browser.get(path)
    assert response.status_code == 303
    assert response.headers["location"] == f"/ui/login?next={path}"
    response = await c.browser.get(response.headers["location"])
    assert response.status_code == 303, response.text
    authorize = response.headers["location"]
    assert authorize.startswith(f"{c.cognito.base}/oauth2/authorize?")
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{LOGIN_COOKIE}=") and "HttpOnly" in cookie
    assert "Path=/ui/auth" in cookie and "SameSite=lax" in cookie
    return authorize


async def _approve(c: Console, authorize: str) -> str:
    """The Hosted UI approves: the callback path (with code and state) it redirects to."""
    response = await c.idp.get(authorize)
    assert response.status_code == 302, response.text
    callback = urlsplit(response.headers["location"])
    assert f"{callback.scheme}://{callback.netloc}{callback.path}" == (
        "http://api/ui/auth/callback"
    )
    return f"{callback.path}?{callback.query}"


async def _logged_in(c: Console) -> bool:
    response = await c.browser.get("/ui/batches")
    return response.status_code == 200


async def test_hosted_ui_login_with_pkce_gives_the_api_identity_and_the_overview(
    console: Console,
) -> None:
    c = console
    c.cognito.user = User("carol-admin", groups=[ADMINS])
    authorize = await _start(c)
    query = parse_qs(urlsplit(authorize).query)
    assert query["client_id"] == [CONSOLE_CLIENT]
    assert query["response_type"] == ["code"]
    assert query["code_challenge_method"] == ["S256"]
    assert query["scope"] == ["openid"]
    assert query["redirect_uri"] == ["http://api/ui/auth/callback"]
    assert all(len(query[k][0]) >= 32 for k in ("state", "nonce", "code_challenge"))

    response = await c.browser.get(await _approve(c, authorize))
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/ui/overview"
    cookies = response.headers.get_list("set-cookie")
    assert any(h.startswith(f"{COOKIE}=") and "HttpOnly" in h for h in cookies)
    assert any(h.startswith(f'{LOGIN_COOKIE}=""') for h in cookies)  # the login is spent

    # The token request carried the verifier of the challenge (the stand-in checked it).
    [token_request] = c.cognito.token_requests
    assert token_request["grant_type"] == "authorization_code"
    assert token_request["client_id"] == CONSOLE_CLIENT
    assert len(token_request["code_verifier"]) >= 43

    overview = await c.browser.get("/ui/overview")
    assert overview.status_code == 200, overview.text
    assert "carol-admin (admin)" in _text(overview, "header .who")

    # Same identity as the API: the member of an organization sees its projects.
    scope = await c.api.tenant("carol-admin")
    projects = await c.browser.get("/ui/batches")
    assert f"/ui/projects/{scope.project_id}/batches" in projects.text

    # Log out: the session is cleared and the browser goes through Cognito's /logout.
    csrf = _page(overview).css_first("header form input[name=csrf]")
    assert csrf is not None
    response = await c.browser.post("/ui/logout", data={"csrf": str(csrf.attributes["value"])})
    assert response.status_code == 303
    logout = urlsplit(response.headers["location"])
    assert f"{logout.scheme}://{logout.netloc}{logout.path}" == f"{c.cognito.base}/logout"
    assert parse_qs(logout.query) == {
        "client_id": [CONSOLE_CLIENT],
        "logout_uri": ["http://api/ui/logged-out"],
    }
    assert not await _logged_in(c)
    back = await c.idp.get(response.headers["location"])
    assert back.headers["location"] == "http://api/ui/logged-out"
    page = await c.browser.get("/ui/logged-out")
    assert _text(page, "h1") == "Logged out"


async def test_a_non_admin_from_the_hosted_ui_cannot_see_the_jobs_pages(
    console: Console,
) -> None:
    c = console
    c.cognito.user = User("dave")
    response = await c.browser.get(await _approve(c, await _start(c, "/ui/jobs")))
    assert response.headers["location"] == "/ui/jobs"
    jobs = await c.browser.get("/ui/jobs")
    assert jobs.status_code == 403
    assert "admin role" in _text(jobs, "#detail")
    assert await _logged_in(c)


async def test_a_code_issued_for_another_code_challenge_is_refused(console: Console) -> None:
    # Authorization-code injection: the code was issued for someone else's PKCE challenge
    # (with this browser's state); this browser's verifier does not match it.
    c = console
    authorize = await _start(c)
    state = parse_qs(urlsplit(authorize).query)["state"][0]
    other = httpx.URL(authorize).copy_merge_params(
        {"code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM", "state": state}
    )
    response = await c.browser.get(await _approve(c, str(other)))
    assert response.status_code == 401, response.text
    assert _text(response, "h1") == "401 Login failed"
    assert "refused to exchange the login's code (invalid_grant)" in _text(response, "#detail")
    assert c.cognito.token_requests[-1]["code_verifier"]  # it was sent, and did not match
    assert not await _logged_in(c)


async def test_a_tampered_missing_or_foreign_state_is_refused(console: Console) -> None:
    c = console
    callback = await _approve(c, await _start(c))
    code = parse_qs(urlsplit(callback).query)["code"][0]

    tampered = await c.browser.get("/ui/auth/callback", params={"code": code, "state": "x" * 43})
    assert tampered.status_code == 400
    assert "state does not match" in _text(tampered, "#detail")
    assert c.cognito.token_requests == []  # the code was never exchanged

    # The refusal spent this browser's login: the genuine callback now finds no login.
    genuine = await c.browser.get(callback)
    assert genuine.status_code == 400
    assert "not started here, or it expired" in _text(genuine, "#detail")

    # A forged login cookie (not signed by the console) is no login either.
    c.browser.cookies.set(LOGIN_COOKIE, "forged.value.sig", domain="api", path="/ui/auth")
    forged = await c.browser.get(callback)
    assert forged.status_code == 400
    assert not await _logged_in(c)


async def test_an_id_token_with_another_nonce_is_refused(console: Console) -> None:
    c = console
    c.cognito.nonce_override = "replayed-nonce"
    response = await c.browser.get(await _approve(c, await _start(c)))
    assert response.status_code == 401
    assert "nonce" in _text(response, "#detail")
    assert not await _logged_in(c)


async def test_a_login_cognito_refused_and_bad_parameters_are_clear_pages(
    console: Console,
) -> None:
    c = console
    authorize = await _start(c)
    state = parse_qs(urlsplit(authorize).query)["state"][0]
    refused = await c.browser.get(
        "/ui/auth/callback",
        params={"error": "access_denied", "error_description": "user cancelled", "state": state},
    )
    assert refused.status_code == 401
    assert "Cognito did not log you in (access_denied: user cancelled)" in _text(refused, "#detail")
    huge = await c.browser.get("/ui/auth/callback", params={"code": "c" * 5000, "state": "s"})
    assert huge.status_code == 422
    assert _text(huge, "h1") == "422 Invalid input"


async def test_the_callback_is_a_404_page_without_the_hosted_ui(api: ApiHarness) -> None:
    response = await api.client.get("/ui/auth/callback", params={"code": "c", "state": "s"})
    assert response.status_code == 404
    assert "Hosted UI" in _text(response, "#detail")


async def test_unreachable_signing_keys_are_a_502_page(console: Console) -> None:
    c = console
    c.cognito.jwks_down = True
    response = await c.browser.get(await _approve(c, await _start(c)))
    assert response.status_code == 502
    assert "signing keys could not be fetched" in _text(response, "#detail")
    assert not await _logged_in(c)
