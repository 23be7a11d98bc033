"""Page Import: fetch (or take inline) a page and describe it as a manifest.

The manifest (`page_import/<id>/attempt-<n>/manifest.json`, canonical JSON) holds the
title, language, description, headings, landmarks, links, images and a simplified layout
tree. It is a pure function of the HTML and its source URL; the reported `manifestHash`
is the SHA-256 of the stored bytes.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urljoin

from jobrelay.protocol import PageImportMessage, WorkerOutcome
from jobrelay.sqs_workers.errors import HandlerFailed
from jobrelay.sqs_workers.handlers.common import (
    SPEC_VERSION,
    HandlerContext,
    canonical_json,
    result_key,
    sha256_hex,
)
from jobrelay.sqs_workers.handlers.html_tree import (
    Document,
    Element,
    collapse,
    parse_html,
    text_of,
)

LANDMARK_TAGS = {
    "header": "banner",
    "nav": "navigation",
    "main": "main",
    "aside": "complementary",
    "footer": "contentinfo",
    "search": "search",
}
LANDMARK_ROLES = frozenset(
    ["banner", "navigation", "main", "complementary", "contentinfo", "search", "form", "region"]
)
# Elements kept in the layout tree; everything else is transparent (its children move up).
LAYOUT_TAGS = frozenset(
    [
        "body",
        "header",
        "nav",
        "main",
        "section",
        "article",
        "aside",
        "footer",
        "div",
        "form",
        "fieldset",
        "figure",
        "figcaption",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "p",
        "blockquote",
        "pre",
        "ul",
        "ol",
        "li",
        "dl",
        "table",
        "a",
        "button",
        "input",
        "select",
        "textarea",
        "label",
        "img",
        "picture",
        "video",
        "audio",
        "iframe",
        "canvas",
        "svg",
        "object",
        "embed",
        "dialog",
        "details",
        "summary",
        "search",
    ]
)
# Kept without descending: their inside is not layout.
LAYOUT_LEAVES = frozenset(["table", "svg", "select", "picture", "video", "audio", "object"])
TEXT_TAGS = frozenset(
    [
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "p",
        "a",
        "button",
        "label",
        "li",
        "figcaption",
        "summary",
        "pre",
    ]
)
MAX_TEXT = 120
MAX_LAYOUT_NODES = 5_000


class PageImportHandler:
    def result_key(self, message: PageImportMessage) -> str:
        return result_key("page_import", message.page_import_id, message.attempt, "manifest.json")

    async def produce(self, message: PageImportMessage, context: HandlerContext) -> bytes:
        if message.request.html is not None:
            return canonical_json(build_manifest(message.request.html, source_url=None))
        if message.request.url is None:  # the request model requires one of the two
            raise HandlerFailed("the request has neither url nor html")
        page = await context.fetcher.fetch(message.request.url)
        return canonical_json(build_manifest(page.text, source_url=page.url))

    def completed(self, message: PageImportMessage, key: str, stored: bytes) -> WorkerOutcome:
        return WorkerOutcome(
            kind="page_import",
            id=message.page_import_id,
            outcome="completed",
            attempt=message.attempt,
            result_url=key,
            manifest_hash=sha256_hex(stored),
        )


def build_manifest(html: str, *, source_url: str | None) -> dict[str, Any]:
    """The manifest of one page; `source_url` resolves relative links (None: inline HTML)."""
    document = parse_html(html)
    base = _base_url(document, source_url)
    root = document.root
    html_element = document.find("html")
    title = document.find("title")
    return {
        "version": SPEC_VERSION,
        "kind": "page_import",
        "source": {"url": source_url} if source_url else {"inline": True},
        "contentSha256": sha256_hex(html.encode("utf-8")),
        "title": text_of(title) if title is not None else "",
        "lang": html_element.get("lang", "") if html_element is not None else "",
        "description": _meta_description(root),
        "headings": [
            {"level": int(el.tag[1]), "text": text_of(el), "id": el.get("id") or None}
            for el in root.iter()
            if el.tag in {"h1", "h2", "h3", "h4", "h5", "h6"}
        ],
        "landmarks": [
            {"role": role, "tag": el.tag, "label": _label(el)}
            for el in root.iter()
            if (role := landmark_role(el)) is not None
        ],
        "links": [
            {
                "href": _resolve(base, el.attrib["href"]),
                "text": text_of(el) or el.get("aria-label", "") or _image_alt(el),
                "rel": el.get("rel") or None,
            }
            for el in root.iter()
            if el.tag == "a" and el.get("href", "").strip()
        ],
        "images": [
            {
                "src": _resolve(base, el.get("src", "")),
                "alt": el.get("alt"),
                "width": _int_attr(el, "width"),
                "height": _int_attr(el, "height"),
            }
            for el in root.iter()
            if el.tag == "img"
        ],
        "layout": layout_tree(document),
        "truncated": document.truncated,
    }


def landmark_role(element: Element) -> str | None:
    role = element.get("role", "").strip().lower()
    if role:
        return role if role in LANDMARK_ROLES else None
    if element.tag == "form" and (element.get("aria-label") or element.get("name")):
        return "form"
    if element.tag == "section" and element.get("aria-label"):
        return "region"
    return LANDMARK_TAGS.get(element.tag)


def layout_tree(document: Document) -> dict[str, Any]:
    """A simplified tree of the body: structural, text and media elements only."""
    body = document.find("body")
    if body is None:  # never `or`: an Element without children is falsy
        body = document.root
    budget = [MAX_LAYOUT_NODES]
    node = _layout_node(body, budget)
    node["tag"] = "body"
    return node


def _layout_node(element: Element, budget: list[int]) -> dict[str, Any]:
    budget[0] -= 1
    node: dict[str, Any] = {"tag": element.tag}
    role = element.get("role", "").strip().lower()
    if role:
        node["role"] = role
    if element.get("id"):
        node["id"] = element.attrib["id"]
    if element.tag in TEXT_TAGS:
        text = text_of(element)
        if text:
            node["text"] = text[:MAX_TEXT]
    if element.tag == "img":
        node["alt"] = element.get("alt", "")
    if element.tag in LAYOUT_LEAVES:
        return node
    children = [_layout_node(child, budget) for child in _kept_children(element) if budget[0] > 0]
    if children:
        node["children"] = children
    return node


def _kept_children(element: Element) -> list[Element]:
    kept: list[Element] = []
    for child in element:
        if _is_layout(child):
            kept.append(child)
        else:
            kept.extend(_kept_children(child))
    return kept


def _is_layout(element: Element) -> bool:
    return element.tag in LAYOUT_TAGS or "-" in element.tag or bool(element.get("role"))


def _base_url(document: Document, source_url: str | None) -> str | None:
    base = document.find("base")
    href = base.get("href", "").strip() if base is not None else ""
    if href:
        return urljoin(source_url or "", href) or None
    return source_url


def _resolve(base: str | None, href: str) -> str:
    href = href.strip()
    return urljoin(base, href) if base else href


def _meta_description(root: Element) -> str:
    for element in root.iter():
        if element.tag == "meta" and element.get("name", "").lower() == "description":
            return collapse(element.get("content", ""))
    return ""


def _label(element: Element) -> str | None:
    return element.get("aria-label") or element.get("id") or None


def _image_alt(element: Element) -> str:
    image = next(element.iter("img"), None)
    return image.get("alt", "") if image is not None else ""


def _int_attr(element: Element, name: str) -> int | None:
    value = element.get(name, "").strip().removesuffix("px")
    return int(value) if value.isdigit() else None
