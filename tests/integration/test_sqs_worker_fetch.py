"""Page Import fetching against a real loopback server and real files."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from jobrelay.sqs_workers.errors import HandlerFailed, TransientFailure
from jobrelay.sqs_workers.fetch import PageFetcher
from tests.integration.sqs_worker_harness import Page, Receiver, running_receiver


@pytest.fixture
def server() -> Iterator[Receiver]:
    with running_receiver() as receiver:
        receiver.pages["ok.html"] = Page("<h1>Grüße</h1>".encode(), content_type="text/html")
        receiver.pages["latin.html"] = Page(
            "<p>café</p>".encode("latin-1"), content_type="text/html; charset=iso-8859-1"
        )
        receiver.pages["hop.html"] = Page(b"", status=302, headers={"location": "ok.html"})
        receiver.pages["out.html"] = Page(
            b"", status=302, headers={"location": "http://example.com/"}
        )
        receiver.pages["loop.html"] = Page(b"", status=302, headers={"location": "loop.html"})
        receiver.pages["image.png"] = Page(b"\x89PNG", content_type="image/png")
        receiver.pages["big.html"] = Page(b"<p>" + b"x" * 5000 + b"</p>")
        receiver.pages["busy.html"] = Page(b"", status=503)
        receiver.pages["slow-down.html"] = Page(b"", status=429)
        yield receiver


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False) as client:
        yield client


def fetcher(http: httpx.AsyncClient, root: Path | None = None) -> PageFetcher:
    return PageFetcher(http, file_root=root, max_bytes=4096, timeout_s=10)


async def test_loopback_pages_are_fetched_and_decoded(
    server: Receiver, http: httpx.AsyncClient
) -> None:
    page = await fetcher(http).fetch(server.page_url("ok.html"))
    assert page.text == "<h1>Grüße</h1>"
    latin = await fetcher(http).fetch(server.page_url("latin.html"))
    assert latin.text == "<p>café</p>"
    localhost = server.page_url("ok.html").replace("127.0.0.1", "localhost")
    assert (await fetcher(http).fetch(localhost)).text == "<h1>Grüße</h1>"


async def test_redirects_are_followed_only_within_loopback(
    server: Receiver, http: httpx.AsyncClient
) -> None:
    hop = await fetcher(http).fetch(server.page_url("hop.html"))
    assert hop.url == server.page_url("ok.html")
    with pytest.raises(HandlerFailed, match="loopback"):
        await fetcher(http).fetch(server.page_url("out.html"))
    with pytest.raises(HandlerFailed, match="redirects"):
        await fetcher(http).fetch(server.page_url("loop.html"))


@pytest.mark.parametrize(
    ("name", "error", "match"),
    [
        ("missing.html", HandlerFailed, "HTTP 404"),
        ("image.png", HandlerFailed, "not an HTML page"),
        ("big.html", HandlerFailed, "larger than 4096 bytes"),
        ("busy.html", TransientFailure, "HTTP 503"),
        ("slow-down.html", TransientFailure, "HTTP 429"),
    ],
)
async def test_bad_pages_fail_permanently_or_transiently(
    server: Receiver,
    http: httpx.AsyncClient,
    name: str,
    error: type[Exception],
    match: str,
) -> None:
    with pytest.raises(error, match=match):
        await fetcher(http).fetch(server.page_url(name))


async def test_a_closed_port_is_transient(http: httpx.AsyncClient) -> None:
    with running_receiver() as gone:
        url = gone.page_url("x.html")
    with pytest.raises(TransientFailure):
        await fetcher(http).fetch(url)


async def test_file_urls_read_only_inside_the_root(tmp_path: Path, http: httpx.AsyncClient) -> None:
    root = tmp_path / "pages"
    root.mkdir()
    (root / "a.html").write_text("<title>A</title>")
    (tmp_path / "secret.html").write_text("secret")
    (root / "link.html").symlink_to(tmp_path / "secret.html")

    page = await fetcher(http, root).fetch((root / "a.html").as_uri())
    assert page.text == "<title>A</title>"
    for outside in (tmp_path / "secret.html", root / "link.html"):
        with pytest.raises(HandlerFailed, match="outside the allowed directory"):
            await fetcher(http, root).fetch(outside.as_uri())
    with pytest.raises(HandlerFailed, match="no such file"):
        await fetcher(http, root).fetch((root / "nope.html").as_uri())
    with pytest.raises(HandlerFailed, match="remote host"):
        await fetcher(http, root).fetch("file://elsewhere/etc/passwd")
