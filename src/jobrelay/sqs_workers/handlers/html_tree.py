"""A small, forgiving HTML tree builder on the standard library's `html.parser`.

`html.parser` tokenizes; this builds the element tree a browser would roughly build:
void elements never take children, the usual implied end tags are honoured (`<li>`,
`<p>`, table cells, `<option>`, `<dt>/<dd>`), stray end tags are ignored, unclosed
elements end with their parent. Script, template and noscript content is dropped;
`<style>` text is kept aside (Code2Des reads it). Depth and size are bounded so a
hostile page cannot make the worker recurse or allocate without limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = frozenset(
    [
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "param",
        "source",
        "track",
        "wbr",
    ]
)
_DROPPED = frozenset({"script", "template", "noscript"})
_IMPLIED: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # tag: (open tags it closes, boundaries the search stops at)
    "li": (frozenset({"li"}), frozenset({"ul", "ol", "menu"})),
    "dt": (frozenset({"dt", "dd"}), frozenset({"dl"})),
    "dd": (frozenset({"dt", "dd"}), frozenset({"dl"})),
    "tr": (frozenset({"tr", "td", "th"}), frozenset({"table", "thead", "tbody", "tfoot"})),
    "td": (frozenset({"td", "th"}), frozenset({"tr", "table"})),
    "th": (frozenset({"td", "th"}), frozenset({"tr", "table"})),
    "option": (frozenset({"option"}), frozenset({"select", "datalist", "optgroup"})),
    "thead": (frozenset({"thead", "tbody", "tfoot"}), frozenset({"table"})),
    "tbody": (frozenset({"thead", "tbody", "tfoot"}), frozenset({"table"})),
    "tfoot": (frozenset({"thead", "tbody", "tfoot"}), frozenset({"table"})),
}
# Starting one of these closes an open <p> (HTML's "close a p element" rule, abridged).
_CLOSES_P = frozenset(
    [
        "address",
        "article",
        "aside",
        "blockquote",
        "details",
        "div",
        "dl",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hgroup",
        "hr",
        "main",
        "menu",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "table",
        "ul",
    ]
)
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
class Element:
    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[Element | str] = field(default_factory=list)

    def elements(self) -> list[Element]:
        return [child for child in self.children if isinstance(child, Element)]

    def iter(self) -> list[Element]:
        """This element and every descendant element, in document order."""
        out: list[Element] = []
        stack: list[Element] = [self]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(node.elements()))
        return out

    def text(self) -> str:
        """The whitespace-collapsed text of this element and its descendants."""
        parts: list[str] = []
        stack: list[Element | str] = [self]
        while stack:
            node = stack.pop()
            if isinstance(node, str):
                parts.append(node)
            else:
                stack.extend(reversed(node.children))
        return collapse(" ".join(parts))

    def classes(self) -> list[str]:
        return self.attrs.get("class", "").split()


@dataclass
class Document:
    root: Element
    styles: list[str]
    truncated: bool

    def find(self, tag: str) -> Element | None:
        return next((el for el in self.root.iter() if el.tag == tag), None)


def collapse(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


def parse_html(html: str) -> Document:
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return Document(root=builder.root, styles=builder.styles, truncated=builder.truncated)


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document")
        self.stack: list[Element] = [self.root]
        self.styles: list[str] = []
        self.truncated = False
        self._count = 0
        self._dropped_depth = 0  # > 0 while inside script/template/noscript
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._dropped_depth:
            if tag in _DROPPED:
                self._dropped_depth += 1
            return
        if tag in _DROPPED:
            self._dropped_depth = 1
            return
        if tag == "style":
            self._in_style = True
            self.styles.append("")
            return
        self._close_implied(tag)
        element = self._make(tag, attrs)
        if element is None:
            return
        self.stack[-1].children.append(element)
        if tag not in VOID:
            if len(self.stack) >= MAX_DEPTH:
                self.truncated = True
                return
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._dropped_depth or tag in _DROPPED or tag == "style":
            return
        self._close_implied(tag)
        element = self._make(tag, attrs)
        if element is not None:
            self.stack[-1].children.append(element)

    def handle_endtag(self, tag: str) -> None:
        if self._dropped_depth:
            if tag in _DROPPED:
                self._dropped_depth -= 1
            return
        if tag == "style":
            self._in_style = False
            return
        for index in range(len(self.stack) - 1, 0, -1):
            if self.stack[index].tag == tag:
                del self.stack[index:]
                return

    def handle_data(self, data: str) -> None:
        if self._dropped_depth:
            return
        if self._in_style:
            self.styles[-1] += data
            return
        if data.strip() or (self.stack[-1].children and data):
            self.stack[-1].children.append(data)

    def _make(self, tag: str, attrs: list[tuple[str, str | None]]) -> Element | None:
        if self._count >= MAX_ELEMENTS:
            self.truncated = True
            return None
        self._count += 1
        return Element(tag, {name: value or "" for name, value in attrs})

    def _close_implied(self, tag: str) -> None:
        implied = _IMPLIED.get(tag)
        if implied is not None:
            closes, boundaries = implied
            for index in range(len(self.stack) - 1, 0, -1):
                open_tag = self.stack[index].tag
                if open_tag in boundaries:
                    break
                if open_tag in closes:
                    del self.stack[index:]
                    break
        if tag in _CLOSES_P:
            for index in range(len(self.stack) - 1, 0, -1):
                open_tag = self.stack[index].tag
                if open_tag == "p":
                    del self.stack[index:]
                    break
                if open_tag not in INLINE:
                    break
