"""The console in a real browser (issue 14's acceptance): Playwright for Python drives Debian's
Chromium (/usr/bin/chromium, installed by `make system-packages`; no downloaded browser)
against the real stack as processes (`jobrelay api`, `relay`, `worker`, `sqs-worker` on the
emulator, tests/e2e_support.py).

One walk through the console: log in with the local form; submit a 20-item batch through the
API and watch its progress bar reach completed in the page, without a reload, while the
reference SQS worker fetches the pages and signs the webhooks; cancel another batch from its
page; retry a failed job from its page; read the blocking job's id in the diagnosis of a job
whose source is busy; a second user from another organization gets the 404 page for the
first user's batch; POSTs without (or with a wrong) CSRF token are refused.

With `JOBRELAY_CONSOLE_SCREENSHOTS=<folder>` it also saves overview.png, batch.png and job.png
there (docs/images/ holds the ones the docs show; see docs/how-to/use-the-console.md).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from tests.acceptance.test_e2e_stack import _submit
from tests.e2e_support import Stack, page_server, running_stack, tenant, token
from tests.harness import AwsTestResources, run_cli, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.long]

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = "JOBRELAY_CONSOLE_SCREENSHOTS"
VIEWPORT = {"width": 1366, "height": 900}  # a laptop screen
LONG_MS = 180_000  # generous upper bounds for a loaded 2-core machine, not timings


def _admin_token(data_dir: Path, sub: str) -> str:
    result = run_cli("token", "--sub", sub, "--admin", JOBRELAY_DATA_DIR=str(data_dir))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _log_in(browser: Browser, base: str, sub: str, *, admin: bool) -> tuple[BrowserContext, Page]:
    context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(f"{base}/ui/login")
    page.fill("form#login input[name=subject]", sub)
    if admin:
        page.check("form#login input[name=admin]")
    page.click("form#login button[type=submit]")
    expect(page.locator("header .who")).to_contain_text(sub)
    return context, page


def _job(stack: Stack, headers: dict[str, str], job_id: str) -> dict[str, Any]:
    response = httpx.get(f"{stack.base_url}/v1/jobs/{job_id}", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    job: dict[str, Any] = response.json()
    return job


def _enqueue(stack: Stack, headers: dict[str, str], type_: str, payload: dict[str, Any]) -> str:
    response = httpx.post(
        f"{stack.base_url}/v1/jobs",
        json={"type": type_, "payload": payload},
        headers=headers,
        timeout=10,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _wait_status(stack: Stack, headers: dict[str, str], job_id: str, status: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        job = _job(stack, headers, job_id)
        return job if job["status"] == status else None

    return wait_until(reached, timeout_s=120, interval_s=0.1, what=f"job {job_id} {status}")


def _screenshot(page: Page, name: str) -> None:
    folder = os.environ.get(SCREENSHOTS)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name), full_page=False)


def test_the_console_in_chromium_against_the_real_stack(
    db_dsn: str, emulator_url: str, aws_resources: AwsTestResources, tmp_path: Path
) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"Debian's Chromium is missing ({CHROMIUM}): run make system-packages")
    project_id = tenant(db_dsn, "alice")
    tenant(db_dsn, "bob")  # another organization
    alice = {"Authorization": f"Bearer {token(tmp_path, 'alice')}"}
    ops = {"Authorization": f"Bearer {_admin_token(tmp_path, 'ops')}"}
    with (
        running_stack(
            db_dsn, emulator_url, aws_resources, tmp_path, JOBRELAY_DIAG_JOBS_ENABLED="true"
        ) as stack,
        page_server(20) as urls,
        sync_playwright() as playwright,
    ):
        base = stack.base_url
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            context, page = _log_in(browser, base, "alice", admin=True)
            expect(page.locator("h1")).to_have_text("Overview")  # admins land there
            [session] = [c for c in context.cookies() if c["name"] == "jobrelay_ui"]
            assert session["httpOnly"] and session["sameSite"] == "Lax"

            # -- a 20-item batch, watched to completion without a reload ----------------
            stack.stop("sqs-worker")  # nothing completes until the page is open
            batch_id = _submit(stack, alice, project_id, urls)
            page.goto(f"{base}/ui/batches/{quote(batch_id, safe='')}")
            expect(page.locator("#batch-status")).to_have_text("processing")
            expect(page.locator("#progress")).to_have_text("0 / 20")
            page.evaluate("window.__sameDocument = true")
            stack.start("sqs-worker")
            expect(page.locator("#batch-status")).to_have_text("completed", timeout=LONG_MS)
            expect(page.locator("#progress")).to_have_text("20 / 20")
            assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
            bar = page.locator("#live .bar span.completed")
            expect(bar).to_have_attribute("style", "width: 100.0%")
            # Once final, the live part removes the cancel button and says the items table
            # is from before; a reload shows the items' new state.
            expect(page.locator("button#cancel")).to_have_count(0)
            expect(page.locator("#items-stale")).to_be_visible()
            page.reload()
            expect(page.locator("#items-stale")).to_be_hidden()
            expect(page.locator("button#cancel")).to_have_count(0)
            expect(page.locator("#items td:nth-child(3)")).to_have_text(["completed"] * 20)
            _screenshot(page, "batch.png")

            # -- cancel another batch from its page -------------------------------------
            stack.stop("relay")  # it stays undispatched: processing
            other_id = _submit(stack, alice, project_id, urls[:3])
            other_url = f"{base}/ui/batches/{quote(other_id, safe='')}"
            page.goto(other_url)
            expect(page.locator("#batch-status")).to_have_text("processing")

            # A POST without the CSRF token, or with a wrong one, is refused (same cookies).
            for form in ({}, {"csrf": "not-the-session-token"}):
                refused = context.request.post(f"{other_url}/cancel", form=form)
                assert refused.status == 403, refused.text()
                assert "CSRF" in refused.text()
            expect(page.locator("#batch-status")).to_have_text("processing")

            page.click("button#cancel")
            expect(page.locator("#batch-status")).to_have_text("cancelled")
            expect(page.locator("button#cancel")).to_have_count(0)
            stack.start("relay")

            # -- retry a failed job from its page ---------------------------------------
            failed_id = _enqueue(stack, ops, "diag.fail", {"kind": "permanent"})
            failed = _wait_status(stack, ops, failed_id, "failed")
            stack.stop("worker")  # so the retried job visibly waits for one
            page.goto(f"{base}/ui/jobs/{failed_id}")
            expect(page.locator("#status")).to_have_text("failed")
            expect(page.locator("#last-error")).to_contain_text("diag.fail attempt 1")
            refused = context.request.post(f"{base}/ui/jobs/{failed_id}/retry", form={})
            assert refused.status == 403
            page.click("button#retry")
            expect(page).to_have_url(f"{base}/ui/jobs/{failed_id}")
            expect(page.locator("#status")).to_have_text("pending")
            assert _job(stack, ops, failed_id)["finishedAt"] is None
            stack.start("worker")  # it runs again (and fails again: it always does)
            again = _wait_status(stack, ops, failed_id, "failed")
            finished = [dt.datetime.fromisoformat(j["finishedAt"]) for j in (failed, again)]
            assert finished[1] > finished[0], "the retried job ran again"

            # -- why isn't this job running? its source is busy -------------------------
            busy = {"seconds": 600, "sourceKey": "site:console-test"}
            running_id = _enqueue(stack, ops, "diag.sleep", busy)
            _wait_status(stack, ops, running_id, "in_progress")
            waiting_id = _enqueue(stack, ops, "diag.sleep", {**busy, "seconds": 0})
            page.goto(f"{base}/ui/jobs/{waiting_id}")
            expect(page.locator("#status")).to_have_text("pending")
            expect(page.locator("#diagnosis strong")).to_have_text("source_busy")
            blocking = page.locator("#blocking li a code")
            expect(blocking).to_have_text([running_id])
            _screenshot(page, "job.png")
            # The blocking job's page cancels it (a running handler is stopped), and the
            # waiting job then runs.
            page.locator("#blocking li a").click()
            expect(page).to_have_url(f"{base}/ui/jobs/{running_id}")
            page.click("button#cancel")
            expect(page.locator("#status")).to_have_text("cancelled")
            _wait_status(stack, ops, waiting_id, "completed")

            page.goto(f"{base}/ui/overview")
            expect(page.locator("h1")).to_have_text("Overview")
            _screenshot(page, "overview.png")

            # -- another organization's member: the same 404 page as a missing batch ---
            _, bob = _log_in(browser, base, "bob", admin=False)
            expect(bob.locator("h1")).to_have_text("Batches")  # members land there
            response = bob.goto(f"{base}/ui/batches/{quote(batch_id, safe='')}")
            assert response is not None and response.status == 404
            expect(bob.locator("h1")).to_have_text("404 Not found")
            missing = bob.goto(f"{base}/ui/batches/no-such-batch")
            assert missing is not None and missing.status == 404
            expect(bob.locator("h1")).to_have_text("404 Not found")
            forbidden = bob.goto(f"{base}/ui/jobs/{failed_id}")
            assert forbidden is not None and forbidden.status == 403
        finally:
            browser.close()
