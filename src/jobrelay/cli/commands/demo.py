"""`jobrelay demo`: drive a running stack like a user would, over HTTP.

It makes sure the organization/project `demo` exists with the subject `demo` as a member,
serves 25 small pages from a local fixture server (loopback, so the reference worker may
fetch them), submits them as one Page Import batch, shows live progress until the batch is
terminal, then requests a Code2WF for one imported page and shows its outcome.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from jobrelay.bootstrap import build_services, database, local_issuer
from jobrelay.cli.running_stack import load_cli_settings
from jobrelay.domain.batch_status import BATCH_STATUS_NAMES, CHILD_STATUS_NAMES, ChildStatus
from jobrelay.domain.errors import InvalidInput
from jobrelay.settings import Settings

console = Console(soft_wrap=True)
DEMO_SUBJECT = "demo"


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)


def demo_command(
    pages: int = typer.Option(25, min=1, max=500, help="Pages in the batch."),
    api: str | None = typer.Option(
        None, help="API base URL (default: the running `jobrelay up`, else from settings)."
    ),
    timeout: float = typer.Option(300.0, min=1, help="Give up after this many seconds."),
) -> None:
    """Submit a Page Import batch to a running stack and follow it to the end."""
    settings = load_cli_settings()
    if settings.auth.mode != "local":
        raise InvalidInput("`jobrelay demo` mints its token locally: JOBRELAY_AUTH_MODE=local")
    base = (api or f"http://{settings.api.host}:{settings.api.port}").rstrip("/")
    project_id = asyncio.run(_demo_project(settings))
    token = local_issuer(settings).mint(DEMO_SUBJECT, ttl_s=3600)
    headers = {"Authorization": f"Bearer {token}"}
    with serve_demo_pages(pages) as page_urls, httpx.Client(base_url=base, headers=headers) as http:
        _check_api(http, base)
        batch = _submit(http, project_id, page_urls)
        final = _follow(http, batch["id"], deadline=time.monotonic() + timeout)
        counts = final["counts"]
        console.print(
            f"batch {final['id']}: [bold]{BATCH_STATUS_NAMES.get(final['status'], final['status'])}"
            f"[/] ({counts['completed']} completed, {counts['failed']} failed, "
            f"{counts['cancelled']} cancelled of {counts['total']})"
        )
        _code2wf(http, project_id, final["id"], deadline=time.monotonic() + timeout)
    if final["status"] != "1":
        raise typer.Exit(1)


async def _demo_project(settings: Settings) -> int:
    """The `demo` project id, created with its organization and membership when missing."""

    async def ensure(dsn: str) -> int:
        async with build_services(settings, dsn) as services:
            tenancy = services.tenancy
            for org in await tenancy.organizations_of(DEMO_SUBJECT):
                for project in org["projects"]:
                    return int(project["id"])
            org = await tenancy.create_organization("demo", actor="ops")
            project = await tenancy.create_project(int(org["id"]), "demo", actor="ops")
            await tenancy.add_member(int(org["id"]), DEMO_SUBJECT, actor="ops")
            return int(project["id"])

    with database(settings, run_migrations=False) as dsn:
        return await ensure(dsn)


def _check_api(http: httpx.Client, base: str) -> None:
    try:
        http.get("/readyz", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        raise InvalidInput(
            f"the API at {base} is not ready ({exc}); start the stack with `make up`"
        ) from exc


def _submit(http: httpx.Client, project_id: int, urls: list[str]) -> dict[str, Any]:
    response = http.post(
        f"/v1/projects/{project_id}/batches",
        json={"type": "page_import", "items": [{"url": url} for url in urls]},
    )
    if response.status_code != 201:
        raise InvalidInput(f"creating the batch failed: {response.status_code} {response.text}")
    batch: dict[str, Any] = response.json()
    console.print(f"submitted batch {batch['id']} with {len(urls)} pages")
    return batch


def _follow(http: httpx.Client, batch_id: str, *, deadline: float) -> dict[str, Any]:
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("batch", total=None, counts="")
        while True:
            batch: dict[str, Any] = http.get(f"/v1/batches/{batch_id}").raise_for_status().json()
            c = batch["counts"]
            done = c["completed"] + c["failed"] + c["cancelled"]
            progress.update(
                task,
                total=c["total"],
                completed=done,
                counts=(
                    f"queued {c['queued']}  running {c['running']}  completed {c['completed']}"
                    f"  failed {c['failed']}"
                ),
            )
            if batch["status"] != "0" or time.monotonic() > deadline:
                return batch
            time.sleep(0.25)  # a human-paced refresh of the progress bar


def _code2wf(http: httpx.Client, project_id: int, batch_id: str, *, deadline: float) -> None:
    items = http.get(f"/v1/batches/{batch_id}/items").raise_for_status().json()["items"]
    done = [i for i in items if i["state"] == "completed"]
    if not done:
        console.print("no completed page to turn into a wireframe")
        return
    response = http.post(
        f"/v1/projects/{project_id}/code2wf",
        json={"pageImportId": done[0]["jobId"], "figmaFileKey": "DEMOFILE", "screenId": "desktop"},
    )
    if response.status_code == 404:
        console.print("Code2WF is not available on this API")
        return
    response.raise_for_status()
    generation: dict[str, Any] = response.json()
    console.print(f"requested Code2WF {generation['code2wfId']} for page {done[0]['jobId']}")
    while generation["status"] == ChildStatus.PROCESSING and time.monotonic() < deadline:
        time.sleep(0.25)
        generation = http.get(f"/v1/code2wf/{generation['code2wfId']}").raise_for_status().json()
    console.print(
        f"Code2WF {generation['code2wfId']}: "
        f"{CHILD_STATUS_NAMES.get(generation['status'], generation['status'])}, "
        f"flagCount {generation.get('flagCount')}, result {generation.get('resultUrl')}"
        + (f", error {generation['errorMessage']}" if generation.get("errorMessage") else "")
    )


def demo_page(index: int) -> bytes:
    """A small, varied, deterministic page."""
    return f"""<!doctype html>
<html lang="en"><head><title>Demo page {index}</title></head>
<body>
<header><nav><a href="/page-{(index + 1)}.html">next</a> <a href="/">home</a></nav></header>
<main>
  <h1>Product {index}</h1>
  <section><h2>Overview</h2><p>Page {index} of the jobrelay demo.</p>
    <img src="/img/{index}.png" alt="picture {index}"></section>
  <section><h2>Details</h2><ul><li>one</li><li>two</li></ul>
    <form><input name="q"><button>Search</button></form></section>
  {"<video src='/clip.mp4'></video>" if index % 3 == 0 else ""}
</main>
<footer><p>footer {index}</p></footer>
</body></html>""".encode()


@contextmanager
def serve_demo_pages(pages: int) -> Iterator[list[str]]:
    """Serve `pages` demo pages on 127.0.0.1 (the reference worker fetches loopback only)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            name = self.path.strip("/")
            if name.startswith("page-") and name.endswith(".html"):
                body = demo_page(int(name[5:-5]))
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_error(404)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="demo-pages", daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        yield [f"http://127.0.0.1:{port}/page-{i}.html" for i in range(pages)]
    finally:
        server.shutdown()
        server.server_close()
