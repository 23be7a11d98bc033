"""HTML pages as bounded ElementTree documents, parsed by a real HTML5 parser.

selectolax's Lexbor engine builds the tree a browser builds (the WHATWG tree construction:
implied end tags, foster parenting, adoption agency, implied `html`/`head`/`body`,
character references). This module copies that tree into `xml.etree.ElementTree`
elements, the shape cssselect2 matches selectors against, and bounds it on the way: a
hostile page cannot make the workers recurse or allocate without limit. Elements deeper
than `MAX_DEPTH` or beyond `MAX_ELEMENTS` are dropped (their text stays with the deepest
kept ancestor) and the document says `truncated`. Script, template and noscript content
is dropped; `<style>` text is kept aside (Code2Des reads it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from xml.etree.ElementTree import Element

from selectolax.lexbor import LexborHTMLParser, LexborNode

__all__ = [
    "INLINE",
    "MAX_DEPTH",
    "MAX_ELEMENTS",
    "Document",
    "Element",
    "classes",
    "collapse",
    "content",
    "parse_html",
    "text_of",
]

_DROPPED = frozenset({"script", "template", "noscript"})
INLINE = frozenset(
    [
        "a",
        "abbr",
        "b",
        "bdi",
        "bdo",
        "br",
        "cite",
        "code",
        "data",
        "dfn",
        "em",
        "i",
        "kbd",
        "mark",
        "q",
        "s",
        "samp",
        "small",
        "span",
        "strong",
        "sub",
        "sup",
        "time",
        "u",
        "var",
        "label",
    ]
)
MAX_DEPTH = 256
MAX_ELEMENTS = 50_000
_SPACES = re.compile(r"\s+")


@dataclass
class Document:
    """The `<html>` element of a page, the text of its `<style>` elements, and whether the
    bounds cut the tree."""

    root: Element
    styles: list[str]
    truncated: bool

    def find(self, tag: str) -> Element | None:
        """The first element named `tag` in document order (the root included)."""
        return next(self.root.iter(tag), None)


def collapse(text: str) -> str:
    """`text` with each run of whitespace made one space, stripped."""
    return _SPACES.sub(" ", text).strip()


def text_of(element: Element) -> str:
    """The whitespace-collapsed text of `element` and its descendants (one space between
    text nodes, as the manifests always had)."""
    return collapse(" ".join(element.itertext()))


def classes(element: Element) -> list[str]:
    """The element's classes, in attribute order."""
    return element.get("class", "").split()


def content(element: Element) -> Iterator[Element | str]:
    """The element's children in document order: child elements and the text between them."""
    if element.text:
        yield element.text
    for child in element:
        yield child
        if child.tail:
            yield child.tail


def parse_html(html: str) -> Document:
    """Parse `html` as a browser would and copy the tree within the bounds."""
    # Scripting on, as in the browsers users have: `<noscript>` content is then raw text
    # (dropped with the element) instead of markup that closes an open `<p>`.
    parsed = LexborHTMLParser(html, scripting=True)
    top = parsed.root
    root = Element("html", _attributes(top) if top is not None else {})
    styles: list[str] = []
    truncated = False
    count = 1
    # An explicit stack, never recursion: Lexbor itself accepts any depth. Each entry is
    # the next source node to copy, the element it goes into and that element's depth.
    stack: list[tuple[LexborNode | None, Element, int]] = [
        (top.first_child if top is not None else None, root, 0)
    ]
    while stack:
        node, parent, depth = stack[-1]
        if node is None:
            stack.pop()
            continue
        stack[-1] = (node.next, parent, depth)
        if node.is_text_node:
            _append_text(parent, node.text_content or "")
            continue
        tag = node.tag
        if not node.is_element_node or tag is None or tag in _DROPPED:
            continue  # comments, doctype, and content that is never shown
        if tag == "style":
            styles.append(node.text(deep=True))
            continue
        if depth + 1 >= MAX_DEPTH or count >= MAX_ELEMENTS:
            truncated = True
            stack.append((node.first_child, parent, depth))  # its text still counts
            continue
        count += 1
        element = Element(tag, _attributes(node))
        parent.append(element)
        stack.append((node.first_child, element, depth + 1))
    return Document(root=root, styles=styles, truncated=truncated)


def _attributes(node: LexborNode) -> dict[str, str]:
    return {name: value or "" for name, value in node.attributes.items()}


def _append_text(parent: Element, text: str) -> None:
    if len(parent):
        last = parent[-1]
        last.tail = (last.tail or "") + text
    else:
        parent.text = (parent.text or "") + text
