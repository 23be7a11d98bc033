"""Page fetching for Page Import, with a closed policy: no network beyond loopback.

Allowed sources:
- `http(s)://` to a loopback address only: a literal IPv4 127.0.0.0/8 or IPv6 ::1 host,
  or `localhost`. Other host names are refused without being resolved (no DNS, so no DNS
  rebinding). Redirects are followed (at most 5) and every hop is checked the same way.
- `file://` under `file_root` only (JOBRELAY_SQS_WORKER_FILE_ROOT); unset refuses file URLs.
  The path is resolved (symlinks included) before the check.

Permanent problems (refused URL, 4xx, not HTML, too large, missing file) raise
`HandlerFailed`; network errors, timeouts, 429 and 5xx raise `TransientFailure`.
"""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import httpx

from jobrelay.sqs_workers.errors import HandlerFailed, TransientFailure

MAX_REDIRECTS = 5
_HTML_TYPES = ("text/html", "application/xhtml+xml", "text/plain")


@dataclass(frozen=True)
class FetchedPage:
    url: str
    text: str


def check_http_url(url: str) -> None:
    """Raise `HandlerFailed` unless `url` is http(s) to a loopback host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise HandlerFailed(f"refused URL scheme {parts.scheme!r}: only http(s) and file")
    host = (parts.hostname or "").lower()
    if host == "localhost":
        return
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise HandlerFailed(
            f"refused host {host!r}: the reference worker fetches loopback addresses only"
        ) from None
    if not address.is_loopback:
        raise HandlerFailed(
            f"refused host {host!r}: the reference worker fetches loopback addresses only"
        )


class PageFetcher:
    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        file_root: Path | None,
        max_bytes: int,
        timeout_s: float,
    ) -> None:
        self._http = http
        self._file_root = file_root.resolve() if file_root is not None else None
        self._max_bytes = max_bytes
        self._timeout_s = timeout_s

    async def fetch(self, url: str) -> FetchedPage:
        scheme = urlsplit(url).scheme
        if scheme == "file":
            return await self._read_file(url)
        return await self._get(url)

    async def _get(self, url: str) -> FetchedPage:
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            check_http_url(current)
            try:
                async with self._http.stream(
                    "GET", current, timeout=self._timeout_s, follow_redirects=False
                ) as response:
                    if response.is_redirect:
                        location = response.headers.get("location")
                        if not location:
                            raise HandlerFailed(f"page answered HTTP {response.status_code}")
                        current = urljoin(current, location)
                        continue
                    if response.status_code == 429 or response.status_code >= 500:
                        raise TransientFailure(f"page answered HTTP {response.status_code}")
                    if response.status_code >= 400:
                        raise HandlerFailed(f"page answered HTTP {response.status_code}")
                    content_type = response.headers.get("content-type", "text/html")
                    if not content_type.lower().startswith(_HTML_TYPES):
                        raise HandlerFailed(f"not an HTML page (content type {content_type})")
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body.extend(chunk)
                        if len(body) > self._max_bytes:
                            raise HandlerFailed(f"page is larger than {self._max_bytes} bytes")
                    encoding = response.charset_encoding or "utf-8"
                    return FetchedPage(url=current, text=_decode(bytes(body), encoding))
            except httpx.HTTPError as exc:
                raise TransientFailure(f"fetching the page failed: {type(exc).__name__}") from exc
        raise HandlerFailed(f"more than {MAX_REDIRECTS} redirects")

    async def _read_file(self, url: str) -> FetchedPage:
        if self._file_root is None:
            raise HandlerFailed("file:// URLs are disabled (JOBRELAY_SQS_WORKER_FILE_ROOT unset)")
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise HandlerFailed("file:// URLs must not name a remote host")
        root = self._file_root

        def read() -> bytes:
            path = Path(unquote(parts.path)).resolve()
            if not path.is_relative_to(root):
                raise HandlerFailed("file:// URL outside the allowed directory")
            if not path.is_file():
                raise HandlerFailed("no such file")
            if path.stat().st_size > self._max_bytes:
                raise HandlerFailed(f"page is larger than {self._max_bytes} bytes")
            return path.read_bytes()

        try:
            data = await asyncio.to_thread(read)
        except OSError as exc:
            raise HandlerFailed(f"cannot read the file: {exc.strerror or 'I/O error'}") from exc
        return FetchedPage(url=url, text=_decode(data, "utf-8"))


def _decode(body: bytes, encoding: str) -> str:
    try:
        return body.decode(encoding, errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")
