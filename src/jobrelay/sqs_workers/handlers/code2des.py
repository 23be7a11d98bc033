"""Code2Des: an HTML/CSS snippet to a design spec (frames, text, colors).

CSS comes from the request's `css` and the snippet's `<style>` elements, then inline
`style` attributes. Supported selectors: `*`, type, `.class`, `#id`, their compounds
(`button.primary`), descendant combinations (`.card h2`) and selector lists; others
(`>`, `+`, `~`, pseudo-classes, attributes) and at-rules are listed as unsupported, never
guessed. Cascade: specificity, then source order; inline styles win; color and font
properties inherit. Colors are normalized to lowercase `#rrggbb` (or `#rrggbbaa`).

Spec: a tree of `FRAME` (block elements, with layout direction from `display: flex`,
fills, corner radius, size in px), `TEXT` (text runs with color and font) and `IMAGE`
nodes, plus the palette of every color the CSS uses. Stored canonical at
`code2des/<id>/attempt-<n>/design.json`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from jobrelay.protocol import Code2DesMessage, WorkerOutcome
from jobrelay.sqs_workers.handlers.common import (
    SPEC_VERSION,
    HandlerContext,
    canonical_json,
    result_key,
)
from jobrelay.sqs_workers.handlers.html_tree import INLINE, Element, collapse, parse_html

INHERITED = ("color", "font-size", "font-weight", "font-family")
COLOR_PROPERTIES = (
    "color",
    "background",
    "background-color",
    "border",
    "border-color",
    "outline-color",
    "fill",
    "stroke",
)
NAMED_COLORS = {
    "black": "#000000",
    "silver": "#c0c0c0",
    "gray": "#808080",
    "grey": "#808080",
    "white": "#ffffff",
    "maroon": "#800000",
    "red": "#ff0000",
    "purple": "#800080",
    "fuchsia": "#ff00ff",
    "green": "#008000",
    "lime": "#00ff00",
    "olive": "#808000",
    "yellow": "#ffff00",
    "navy": "#000080",
    "blue": "#0000ff",
    "teal": "#008080",
    "aqua": "#00ffff",
    "orange": "#ffa500",
    "transparent": "#00000000",
}
_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_COLOR_TOKEN = re.compile(
    r"#[0-9a-fA-F]{3,8}\b|rgba?\([^)]*\)|\b(?:" + "|".join(NAMED_COLORS) + r")\b", re.I
)
_COMPOUND = re.compile(r"^(?P<tag>[a-zA-Z][\w-]*|\*)?(?P<rest>(?:[#.][\w-]+)*)$")
_LENGTH = re.compile(r"^(-?\d+(?:\.\d+)?)(px|rem|em)?$")
_FONT_WEIGHTS = {"normal": 400, "bold": 700, "lighter": 300, "bolder": 800}
_SKIPPED = frozenset({"head", "title", "meta", "link", "base", "br", "wbr"})
MAX_NODES = 5_000


class Code2DesHandler:
    def result_key(self, message: Code2DesMessage) -> str:
        return result_key("code2des", message.code2des_id, message.attempt, "design.json")

    async def produce(self, message: Code2DesMessage, context: HandlerContext) -> bytes:
        return canonical_json(design_spec(message.request.html, message.request.css))

    def completed(self, message: Code2DesMessage, key: str, stored: bytes) -> WorkerOutcome:
        return WorkerOutcome(
            kind="code2des",
            id=message.code2des_id,
            outcome="completed",
            attempt=message.attempt,
            result_url=key,
        )


@dataclass(frozen=True)
class Rule:
    selector: list[tuple[str | None, frozenset[str], frozenset[str]]]  # compounds, outer first
    specificity: tuple[int, int, int]
    order: int
    declarations: dict[str, str]


@dataclass
class StyleSheet:
    rules: list[Rule]
    unsupported_selectors: list[str]
    unsupported_rules: list[str]
    colors: list[str]


def design_spec(html: str, css: str | None) -> dict[str, Any]:
    """The design spec of an HTML snippet and its CSS (pure, deterministic)."""
    document = parse_html(html)
    sheet = parse_css("\n".join([css or "", *document.styles]))
    body = next((el for el in document.root.iter() if el.tag == "body"), document.root)
    budget = [MAX_NODES]
    children = _children(body, [], {}, sheet, budget)
    palette = sorted(set(sheet.colors))
    return {
        "version": SPEC_VERSION,
        "kind": "code2des",
        "root": {"type": "FRAME", "name": "snippet", "layout": "VERTICAL", "children": children},
        "colors": [{"value": color, "uses": sheet.colors.count(color)} for color in palette],
        "unsupportedSelectors": sorted(set(sheet.unsupported_selectors)),
        "unsupportedRules": sorted(set(sheet.unsupported_rules)),
        "truncated": document.truncated or budget[0] <= 0,
    }


def parse_css(text: str) -> StyleSheet:
    text = _COMMENT.sub("", text)
    sheet = StyleSheet(rules=[], unsupported_selectors=[], unsupported_rules=[], colors=[])
    order = 0
    for prelude, body in _blocks(text):
        if prelude.startswith("@"):
            sheet.unsupported_rules.append(prelude.split()[0])
            continue
        declarations = parse_declarations(body)
        for name, value in declarations.items():
            if name in COLOR_PROPERTIES:
                sheet.colors.extend(colors_in(value))
        for raw in prelude.split(","):
            selector = collapse(raw)
            parsed = _parse_selector(selector)
            if parsed is None:
                if selector:
                    sheet.unsupported_selectors.append(selector)
                continue
            sheet.rules.append(Rule(parsed, _specificity(parsed), order, declarations))
            order += 1
    return sheet


def parse_declarations(body: str) -> dict[str, str]:
    declarations: dict[str, str] = {}
    for part in body.split(";"):
        name, sep, value = part.partition(":")
        name, value = name.strip().lower(), collapse(value.replace("!important", ""))
        if sep and name and value:
            declarations[name] = value
    return declarations


def colors_in(value: str) -> list[str]:
    return [color for token in _COLOR_TOKEN.findall(value) if (color := normalize_color(token))]


def normalize_color(token: str) -> str | None:
    token = token.strip().lower()
    if token in NAMED_COLORS:
        return NAMED_COLORS[token]
    if token.startswith("#"):
        digits = token[1:]
        if len(digits) in (3, 4):
            digits = "".join(ch * 2 for ch in digits)
        if len(digits) in (6, 8) and all(ch in "0123456789abcdef" for ch in digits):
            return "#" + (digits[:6] if digits.endswith("ff") and len(digits) == 8 else digits)
        return None
    match = re.fullmatch(r"rgba?\(([^)]*)\)", token)
    if match is None:
        return None
    parts = [p for p in re.split(r"[\s,/]+", match.group(1).strip()) if p]
    if len(parts) not in (3, 4):
        return None
    try:
        channels = [_channel(p) for p in parts[:3]]
        alpha = _alpha(parts[3]) if len(parts) == 4 else 255
    except ValueError:
        return None
    hex_value = "#" + "".join(f"{c:02x}" for c in channels)
    return hex_value if alpha == 255 else f"{hex_value}{alpha:02x}"


def _channel(part: str) -> int:
    value = float(part[:-1]) * 2.55 if part.endswith("%") else float(part)
    return max(0, min(255, round(value)))


def _alpha(part: str) -> int:
    value = float(part[:-1]) / 100 if part.endswith("%") else float(part)
    return max(0, min(255, round(value * 255)))


def _blocks(text: str) -> list[tuple[str, str]]:
    """Top-level `prelude { body }` pairs; nested blocks (in at-rules) stay in the body."""
    blocks: list[tuple[str, str]] = []
    depth = 0
    start = 0
    prelude = ""
    for index, char in enumerate(text):
        if char == "{":
            if depth == 0:
                prelude = collapse(text[start:index])
                start = index + 1
            depth += 1
        elif char == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                blocks.append((prelude, text[start:index]))
                start = index + 1
        elif char == ";" and depth == 0:
            statement = collapse(text[start:index])  # e.g. `@import url(x);`
            if statement.startswith("@"):
                blocks.append((statement, ""))
            start = index + 1
    return blocks


def _parse_selector(
    selector: str,
) -> list[tuple[str | None, frozenset[str], frozenset[str]]] | None:
    compounds: list[tuple[str | None, frozenset[str], frozenset[str]]] = []
    for part in selector.split(" "):
        match = _COMPOUND.match(part)
        if not part or match is None or (not match.group("tag") and not match.group("rest")):
            return None
        tag = match.group("tag")
        rest = re.findall(r"[#.][\w-]+", match.group("rest"))
        ids = frozenset(item[1:] for item in rest if item.startswith("#"))
        classes = frozenset(item[1:] for item in rest if item.startswith("."))
        compounds.append((None if tag in (None, "*") else tag.lower(), ids, classes))
    return compounds or None


def _specificity(
    compounds: list[tuple[str | None, frozenset[str], frozenset[str]]],
) -> tuple[int, int, int]:
    return (
        sum(len(ids) for _, ids, _ in compounds),
        sum(len(classes) for _, _, classes in compounds),
        sum(1 for tag, _, _ in compounds if tag),
    )


def _matches_compound(
    element: Element, compound: tuple[str | None, frozenset[str], frozenset[str]]
) -> bool:
    tag, ids, classes = compound
    if tag is not None and element.tag != tag:
        return False
    if ids and element.attrs.get("id") not in ids:
        return False
    return classes <= set(element.classes())


def _matches(rule: Rule, element: Element, ancestors: list[Element]) -> bool:
    *outer, last = rule.selector
    if not _matches_compound(element, last):
        return False
    position = len(ancestors)
    for compound in reversed(outer):
        position -= 1
        while position >= 0 and not _matches_compound(ancestors[position], compound):
            position -= 1
        if position < 0:
            return False
    return True


def _computed(
    element: Element, ancestors: list[Element], inherited: dict[str, str], sheet: StyleSheet
) -> dict[str, str]:
    style = {name: value for name, value in inherited.items() if name in INHERITED}
    matching = sorted(
        (rule for rule in sheet.rules if _matches(rule, element, ancestors)),
        key=lambda rule: (rule.specificity, rule.order),
    )
    for rule in matching:
        style.update(rule.declarations)
    inline = element.attrs.get("style")
    if inline:
        declarations = parse_declarations(inline)
        for name, value in declarations.items():
            if name in COLOR_PROPERTIES:
                sheet.colors.extend(colors_in(value))
        style.update(declarations)
    return style


def _children(
    element: Element,
    ancestors: list[Element],
    style: dict[str, str],
    sheet: StyleSheet,
    budget: list[int],
) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []
    lineage = [*ancestors, element]
    for child in element.children:
        if budget[0] <= 0:
            break
        if isinstance(child, str):
            text = collapse(child)
            if text:
                budget[0] -= 1
                nodes.append(_text_node(text, style))
            continue
        if child.tag in _SKIPPED:
            continue
        budget[0] -= 1
        child_style = _computed(child, lineage, style, sheet)
        if child.tag == "img":
            nodes.append(_image_node(child, child_style))
        elif child.tag in INLINE and not child.elements():
            text = child.text()
            if text:
                node = _text_node(text, child_style)
                node["name"] = child.tag
                nodes.append(node)
        else:
            nodes.append(_frame_node(child, lineage, child_style, sheet, budget))
    return nodes


def _frame_node(
    element: Element,
    ancestors: list[Element],
    style: dict[str, str],
    sheet: StyleSheet,
    budget: list[int],
) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "FRAME", "name": _name(element), "tag": element.tag}
    display = style.get("display", "")
    if display in ("flex", "inline-flex"):
        direction = style.get("flex-direction", "row")
        node["layout"] = "VERTICAL" if direction.startswith("column") else "HORIZONTAL"
        gap = _px(style.get("gap", ""))
        if gap is not None:
            node["gap"] = gap
    elif display == "grid":
        node["layout"] = "GRID"
    else:
        node["layout"] = "VERTICAL"
    background = style.get("background-color") or style.get("background") or ""
    fills = colors_in(background)
    if fills:
        node["fills"] = fills[:1]
    border = colors_in(style.get("border-color", "") or style.get("border", ""))
    if border:
        node["strokes"] = border[:1]
    for prop, key in (
        ("width", "width"),
        ("height", "height"),
        ("padding", "padding"),
        ("border-radius", "cornerRadius"),
    ):
        value = _px(style.get(prop, ""))
        if value is not None:
            node[key] = value
    if element.tag in ("input", "textarea") and element.attrs.get("placeholder"):
        node["children"] = [_text_node(element.attrs["placeholder"], style)]
        return node
    children = _children(element, ancestors, style, sheet, budget)
    if children:
        node["children"] = children
    return node


def _text_node(text: str, style: dict[str, str]) -> dict[str, Any]:
    text_style: dict[str, Any] = {}
    color = colors_in(style.get("color", ""))
    if color:
        text_style["color"] = color[0]
    size = _px(style.get("font-size", ""))
    if size is not None:
        text_style["fontSize"] = size
    weight = style.get("font-weight", "")
    if weight:
        text_style["fontWeight"] = (
            int(weight) if weight.isdigit() else _FONT_WEIGHTS.get(weight.lower(), 400)
        )
    family = style.get("font-family", "")
    if family:
        text_style["fontFamily"] = family.split(",")[0].strip().strip("\"'")
    return {"type": "TEXT", "characters": text, "style": text_style}


def _image_node(element: Element, style: dict[str, str]) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "IMAGE", "name": element.attrs.get("alt", "") or "image"}
    for prop in ("width", "height"):
        value = _px(style.get(prop, "") or element.attrs.get(prop, ""))
        if value is not None:
            node[prop] = value
    return node


def _name(element: Element) -> str:
    name = element.tag
    if element.attrs.get("id"):
        name += f"#{element.attrs['id']}"
    for css_class in element.classes():
        name += f".{css_class}"
    return name


def _px(value: str) -> float | int | None:
    value = value.strip().split(" ")[0] if value.strip() else ""
    match = _LENGTH.match(value)
    if match is None:
        return None
    number = float(match.group(1)) * (16 if match.group(2) in ("rem", "em") else 1)
    return int(number) if number.is_integer() else round(number, 2)
