"""The console in a real browser: Debian's Chromium (headless, installed by
`make system-packages`) loads the login page of a real `jobrelay api` process on a loopback
port and the form is in its DOM; a console page without a session lands on that form."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

from selectolax.lexbor import LexborHTMLParser

from jobrelay.aws.emulator import free_port
from tests.harness import cli_env, jobrelay_command, wait_healthy


def _chromium() -> str:
    found = shutil.which("chromium")
    assert found, "Chromium is missing: make system-packages (apt-get install -y chromium)"
    return found


def _dump_dom(chromium: str, url: str, profile: Path) -> LexborHTMLParser:
    result = subprocess.run(
        [
            chromium,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return LexborHTMLParser(result.stdout)


def test_chromium_renders_the_login_form_of_a_real_api(db_dsn: str, tmp_path: Path) -> None:
    chromium = _chromium()
    port = free_port()
    env = cli_env(
        JOBRELAY_ENV="development",
        JOBRELAY_AUTH_MODE="local",
        DATABASE_URL=db_dsn,
        JOBRELAY_DATA_DIR=str(tmp_path / "data"),
        JOBRELAY_API_HOST="127.0.0.1",
    )
    process = subprocess.Popen(
        [*jobrelay_command(), "api", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"

    try:
        wait_healthy(process, base, what="the API to answer /healthz")
        dom = _dump_dom(chromium, f"{base}/ui/login", tmp_path / "profile")
        form = dom.css_first("form#login")
        assert form is not None, dom.html
        assert form.attributes["action"] == "/ui/login"
        assert form.css_first("input[name=subject]") is not None
        assert form.css_first("input[name=admin][type=checkbox]") is not None
        csrf = form.css_first("input[name=csrf]")
        assert csrf is not None and csrf.attributes.get("value")

        # Without a session, a console page redirects the browser to the same form.
        dom = _dump_dom(chromium, f"{base}/ui/overview", tmp_path / "profile2")
        assert dom.css_first("form#login input[name=next]").attributes["value"] == "/ui/overview"  # type: ignore[union-attr]
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
