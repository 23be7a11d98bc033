"""Who the console's caller is: the session cookie's JWT verified like the API's bearer
tokens, and the flow that puts it there (the local login form, or the Cognito Hosted UI with
PKCE, state and nonce) and takes it out again (logout). Every POST, here and on the pages,
goes through `checked_form`, which checks the session's CSRF token."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs

import httpx
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from jobrelay.api.deps import ServicesDep
from jobrelay.api.ui.hosted_ui import HostedUi, LoginFailed
from jobrelay.api.ui.render import codec, render
from jobrelay.api.ui.session import Session, check_csrf
from jobrelay.auth.tokens import Caller
from jobrelay.domain.errors import FieldError, InvalidInput, NotFound, Unauthenticated

router = APIRouter()

MAX_SUBJECT = 128


class LoginRequired(Exception):
    """No valid session: the error handler redirects to the login page."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


async def ui_caller(request: Request, services: ServicesDep) -> Caller:
    """The caller of the session's JWT, verified like the API's bearer tokens."""
    session = codec(request).load(request)
    if session is None or session.token is None:
        raise LoginRequired(request.url.path)
    try:
        return await services.tokens.verify(session.token)
    except Unauthenticated:
        raise LoginRequired(request.url.path) from None


UiCallerDep = Annotated[Caller, Depends(ui_caller)]


async def form_of(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (the last value of each)."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}


async def checked_form(request: Request) -> tuple[Session, dict[str, str]]:
    """The session and the form of a POST whose CSRF token matches (else 403)."""
    form = await form_of(request)
    session = codec(request).load(request)
    check_csrf(session, form.get("csrf"))
    assert session is not None
    return session, form


def see_other(url: str) -> RedirectResponse:
    """A 303 to `url`: after a form's POST the browser follows it with a GET."""
    return RedirectResponse(url, status_code=303)


# -- login and logout --------------------------------------------------------------------


def hosted_ui(request: Request) -> HostedUi | None:
    """The Cognito Hosted UI client, when the console logs in through it."""
    found: HostedUi | None = request.app.state.hosted_ui
    return found


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, services: ServicesDep, next: str = "/ui/") -> Response:
    hosted = hosted_ui(request)
    if hosted is not None:
        url, state = await hosted.start(request, _safe_next(next))
        response = see_other(url)
        hosted.save_state(response, state)
        return response
    if services.local_issuer is None:
        return render(request, "not_configured.html", {}, status_code=501)
    return render(request, "login.html", {"next": _safe_next(next)})


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request, services: ServicesDep) -> Response:
    _, form = await checked_form(request)
    if services.local_issuer is None:
        return render(request, "not_configured.html", {}, status_code=501)
    subject = form.get("subject", "").strip()
    if not subject or len(subject) > MAX_SUBJECT:
        raise InvalidInput(
            "invalid login", [FieldError("subject", f"give 1 to {MAX_SUBJECT} characters")]
        )
    token = services.local_issuer.mint(
        subject, admin=form.get("admin") == "on", ttl_s=codec(request).ttl_s
    )
    response = see_other(_safe_next(form.get("next", "/ui/")))
    codec(request).save(response, Session.new(token))  # a new CSRF token per login
    return response


CallbackParam = Annotated[str | None, Query(max_length=4096)]


@router.get("/auth/callback", response_class=HTMLResponse, name="auth_callback")
async def auth_callback(
    request: Request,
    services: ServicesDep,
    code: CallbackParam = None,
    state: CallbackParam = None,
    error: CallbackParam = None,
    error_description: CallbackParam = None,
) -> Response:
    """The Hosted UI's redirect back: state, code exchange with PKCE, token checks, session."""
    hosted = hosted_ui(request)
    if hosted is None:
        raise NotFound("the console does not log in through the Cognito Hosted UI")
    try:
        login = hosted.load_state(request, state)
        if error:
            because = f": {error_description}" if error_description else ""
            raise LoginFailed(401, f"Cognito did not log you in ({error}{because})")
        if not code:
            raise LoginFailed(400, "the Hosted UI's answer has no authorization code")
        tokens = await hosted.exchange(request, code, login)
        try:
            caller = await services.tokens.verify(tokens.access_token)
            sub = await services.tokens.verify_id_token(
                tokens.id_token, client_id=hosted.client_id, nonce=login.nonce
            )
        except Unauthenticated as exc:
            raise LoginFailed(401, f"Cognito's tokens were refused: {exc}") from None
        except httpx.HTTPError as exc:
            raise LoginFailed(
                502, f"the user pool's signing keys could not be fetched ({type(exc).__name__})"
            ) from None
        if sub != caller.sub:
            raise LoginFailed(401, "the ID token and the access token name different users")
    except LoginFailed as exc:
        context = {"status": exc.status, "title": "Login failed", "detail": exc.detail}
        page = render(request, "error.html", {**context, "errors": []}, status_code=exc.status)
        hosted.clear_state(page)
        return page
    response = see_other(_safe_next(login.next_path))
    codec(request).save(response, Session.new(tokens.access_token))  # a new CSRF token
    hosted.clear_state(response)
    return response


@router.post("/logout", response_class=HTMLResponse)
async def logout(request: Request) -> Response:
    """Clears the session; with the Hosted UI, also its session (Cognito's /logout)."""
    await checked_form(request)
    hosted = hosted_ui(request)
    response = see_other(hosted.logout_url(request) if hosted else "/ui/login")
    codec(request).save(response, Session.new())
    return response


@router.get("/logged-out", response_class=HTMLResponse)
async def logged_out(request: Request) -> Response:
    """Where Cognito's /logout sends the browser back."""
    return render(request, "logged_out.html", {})


def _safe_next(target: str) -> str:
    """Only paths of the console: never an absolute or scheme-relative URL."""
    if target.startswith("/ui/") and not target.startswith("/ui//") and "\\" not in target:
        return target
    return "/ui/"
