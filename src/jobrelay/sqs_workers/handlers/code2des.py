"""Code2Des: an HTML/CSS snippet to a design spec (frames, text, colors).

CSS comes from the request's `css` and the snippet's `<style>` elements, then inline
`style` attributes. tinycss2 parses it; cssselect2 compiles and matches the selectors
(CSS Selectors level 4: combinators, attributes, structural pseudo-classes such as
`:first-child` and `:not()`). Selectors that cannot apply to a static snapshot
(user-action pseudo-classes such as `:hover`, pseudo-elements) or that cssselect2 does
not know are listed as unsupported, never guessed; so are at-rules (`@media`, …).
Cascade: specificity, then source order; the `style` attribute after the rules;
`!important` declarations after every normal one; color and font properties inherit.
Colors are normalized to lowercase `#rrggbb` (or `#rrggbbaa`).

Spec: a tree of `FRAME` (block elements, with layout direction from `display: flex`,
fills, corner radius, size in px), `TEXT` (text runs with color and font) and `IMAGE`
nodes, plus the palette of every color the CSS uses. Stored canonical at
`code2des/<id>/attempt-<n>/design.json`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import cssselect2
import tinycss2

from jobrelay.protocol import Code2DesMessage, WorkerOutcome
from jobrelay.sqs_workers.handlers.common import (
    SPEC_VERSION,
    HandlerContext,
    canonical_json,
    result_key,
)
from jobrelay.sqs_workers.handlers.html_tree import (
    INLINE,
    Element,
    classes,
    collapse,
    content,
    parse_html,
    text_of,
)

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
_COLOR_TOKEN = re.compile(
    r"#[0-9a-fA-F]{3,8}\b|rgba?\([^)]*\)|\b(?:" + "|".join(NAMED_COLORS) + r")\b", re.I
)
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
class Declarations:
    """One rule's declarations: the normal ones and the `!important` ones, by property."""

    normal: dict[str, str]
    important: dict[str, str]


@dataclass
class StyleSheet:
    matcher: cssselect2.Matcher  # payloads are `Declarations`
    unsupported_selectors: list[str]
    unsupported_rules: list[str]
    colors: list[str]


def design_spec(html: str, css: str | None) -> dict[str, Any]:
    """The design spec of an HTML snippet and its CSS (pure, deterministic)."""
    document = parse_html(html)
    sheet = parse_css("\n".join([css or "", *document.styles]))
    root = cssselect2.ElementWrapper.from_html_root(document.root)
    body = next((el for el in root.iter_children() if el.local_name == "body"), root)
    budget = [MAX_NODES]
    children = _children(body, {}, sheet, budget)
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
    """Style rules (tinycss2) with compiled selectors (cssselect2); at-rules and selectors
    that cannot apply to a static snapshot are listed instead of guessed."""
    sheet = StyleSheet(
        matcher=cssselect2.Matcher(), unsupported_selectors=[], unsupported_rules=[], colors=[]
    )
    for rule in tinycss2.parse_stylesheet(text, skip_comments=True, skip_whitespace=True):
        if rule.type == "at-rule":
            sheet.unsupported_rules.append("@" + rule.lower_at_keyword)
            continue
        if rule.type != "qualified-rule":
            continue  # a parse error: the browser drops it too
        declarations = parse_declarations(rule.content)
        for name, value in (declarations.normal | declarations.important).items():
            if name in COLOR_PROPERTIES:
                sheet.colors.extend(colors_in(value))
        for tokens in _split_selector_list(rule.prelude):
            selector = collapse(tinycss2.serialize(tokens))
            compiled = _compile_selector(tokens)
            if compiled is None:
                if selector:
                    sheet.unsupported_selectors.append(selector)
                continue
            sheet.matcher.add_selector(compiled, declarations)
    return sheet


def parse_declarations(source: str | list[Any]) -> Declarations:
    """The declarations of a rule body or a `style` attribute; the last one of a name wins."""
    normal: dict[str, str] = {}
    important: dict[str, str] = {}
    for item in tinycss2.parse_blocks_contents(source, skip_comments=True, skip_whitespace=True):
        if item.type != "declaration":
            continue  # nested rules and parse errors
        value = collapse(tinycss2.serialize(item.value))
        if value:
            (important if item.important else normal)[item.lower_name] = value
    return Declarations(normal=normal, important=important)


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


def _split_selector_list(prelude: list[Any]) -> list[list[Any]]:
    """A rule's prelude cut at its top-level commas: one token list per selector, so one
    selector that cannot be used does not drop the others."""
    selectors: list[list[Any]] = [[]]
    for token in prelude:
        if token.type == "literal" and token.value == ",":
            selectors.append([])
        else:
            selectors[-1].append(token)
    return selectors


def _compile_selector(tokens: list[Any]) -> Any | None:
    """The compiled selector, or None when it is invalid, unknown to cssselect2, or cannot
    match a static snapshot (user-action pseudo-classes such as `:hover`, pseudo-elements)."""
    try:
        (compiled,) = cssselect2.compile_selector_list(tokens)
    except (cssselect2.SelectorError, ValueError):
        return None
    if compiled.never_matches or compiled.pseudo_element is not None:
        return None
    return compiled


def _computed(
    wrapper: cssselect2.ElementWrapper, inherited: dict[str, str], sheet: StyleSheet
) -> dict[str, str]:
    """The cascade: inherited values, then matching rules by specificity and source order,
    then the `style` attribute; `!important` declarations after all normal ones."""
    style = {name: value for name, value in inherited.items() if name in INHERITED}
    matched: list[Declarations] = [payload for *_, payload in sheet.matcher.match(wrapper)]
    inline_style = wrapper.etree_element.get("style")
    if inline_style:
        inline = parse_declarations(inline_style)
        for name, value in (inline.normal | inline.important).items():
            if name in COLOR_PROPERTIES:
                sheet.colors.extend(colors_in(value))
        matched.append(inline)
    for declarations in matched:
        style.update(declarations.normal)
    for declarations in matched:
        style.update(declarations.important)
    return style


def _children(
    wrapper: cssselect2.ElementWrapper,
    style: dict[str, str],
    sheet: StyleSheet,
    budget: list[int],
) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []
    # The wrappers come in the order of the element children that `content` yields.
    child_wrappers = iter(wrapper.iter_children())
    for child in content(wrapper.etree_element):
        if budget[0] <= 0:
            break
        if isinstance(child, str):
            text = collapse(child)
            if text:
                budget[0] -= 1
                nodes.append(_text_node(text, style))
            continue
        child_wrapper = next(child_wrappers)
        if child.tag in _SKIPPED:
            continue
        budget[0] -= 1
        child_style = _computed(child_wrapper, style, sheet)
        if child.tag == "img":
            nodes.append(_image_node(child, child_style))
        elif child.tag in INLINE and not len(child):
            text = text_of(child)
            if text:
                node = _text_node(text, child_style)
                node["name"] = child.tag
                nodes.append(node)
        else:
            nodes.append(_frame_node(child_wrapper, child_style, sheet, budget))
    return nodes


def _frame_node(
    wrapper: cssselect2.ElementWrapper,
    style: dict[str, str],
    sheet: StyleSheet,
    budget: list[int],
) -> dict[str, Any]:
    element: Element = wrapper.etree_element
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
    if element.tag in ("input", "textarea") and element.get("placeholder"):
        node["children"] = [_text_node(element.attrib["placeholder"], style)]
        return node
    children = _children(wrapper, style, sheet, budget)
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
    node: dict[str, Any] = {"type": "IMAGE", "name": element.get("alt", "") or "image"}
    for prop in ("width", "height"):
        value = _px(style.get(prop, "") or element.get(prop, ""))
        if value is not None:
            node[prop] = value
    return node


def _name(element: Element) -> str:
    name = element.tag
    if element.get("id"):
        name += f"#{element.attrib['id']}"
    for css_class in classes(element):
        name += f".{css_class}"
    return name


def _px(value: str) -> float | int | None:
    value = value.strip().split(" ")[0] if value.strip() else ""
    match = _LENGTH.match(value)
    if match is None:
        return None
    number = float(match.group(1)) * (16 if match.group(2) in ("rem", "em") else 1)
    return int(number) if number.is_integer() else round(number, 2)
