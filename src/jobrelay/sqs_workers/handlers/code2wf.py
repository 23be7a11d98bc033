"""Code2WF: a wireframe spec for one screen from a Page Import manifest.

Reads the manifest from the results bucket (`page_import_result_url` is its key, or an
`s3://<results bucket>/<key>` URL), maps every layout node to a wireframe block placed on
the requested screen, and marks nodes it has no block for (video, iframe, canvas, custom
elements, unknown roles, ...) with `flagged: true`; `flagCount` counts them. Stored at
`code2wf/<id>/attempt-<n>/wireframe.json`; the outcome carries the message's attempt.

Screens: `desktop` (1440 wide), `tablet` (768), `mobile` (375); any other screen id gets
the desktop width and keeps its id as the frame name.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from jobrelay.protocol import Code2WfMessage, WorkerOutcome
from jobrelay.sqs_workers.errors import HandlerFailed
from jobrelay.sqs_workers.handlers.common import (
    SPEC_VERSION,
    HandlerContext,
    canonical_json,
    result_key,
    sha256_hex,
)

SCREENS = {"desktop": 1440, "tablet": 768, "mobile": 375}
BLOCKS_BY_ROLE = {
    "banner": "header",
    "navigation": "navigation",
    "main": "main",
    "complementary": "sidebar",
    "contentinfo": "footer",
    "search": "search",
    "form": "form",
    "region": "section",
    "button": "button",
    "link": "link",
    "img": "image",
    "list": "list",
    "listitem": "listItem",
    "heading": "heading",
}
BLOCKS_BY_TAG = {
    "body": "page",
    "header": "header",
    "nav": "navigation",
    "main": "main",
    "footer": "footer",
    "aside": "sidebar",
    "search": "search",
    "section": "section",
    "article": "section",
    "div": "group",
    "figure": "group",
    "fieldset": "group",
    "details": "group",
    "dialog": "group",
    "form": "form",
    "h1": "heading",
    "h2": "heading",
    "h3": "heading",
    "h4": "heading",
    "h5": "heading",
    "h6": "heading",
    "p": "text",
    "blockquote": "text",
    "pre": "text",
    "label": "text",
    "figcaption": "text",
    "summary": "text",
    "a": "link",
    "button": "button",
    "input": "input",
    "select": "input",
    "textarea": "input",
    "img": "image",
    "picture": "image",
    "ul": "list",
    "ol": "list",
    "dl": "list",
    "li": "listItem",
    "table": "table",
}
_FIXED_HEIGHTS = {"image": 160, "button": 40, "input": 40, "link": 24, "table": 160}
_HEADING_HEIGHTS = {"h1": 48, "h2": 40}
PAD = 16
GAP = 8
CHAR_WIDTH = 8
LINE_HEIGHT = 20
FLAGGED_HEIGHT = 120


class Code2WfHandler:
    def result_key(self, message: Code2WfMessage) -> str:
        return result_key("code2wf", message.code2wf_id, message.attempt, "wireframe.json")

    async def produce(self, message: Code2WfMessage, context: HandlerContext) -> bytes:
        key = manifest_key(message.page_import_result_url, context.store.bucket)
        stored = await context.store.get(key)
        if stored is None:
            raise HandlerFailed(f"the Page Import manifest was not found at {key}")
        try:
            manifest = json.loads(stored)
        except ValueError:
            raise HandlerFailed(f"the object at {key} is not a Page Import manifest") from None
        spec = wireframe(
            manifest,
            screen_id=message.screen_id,
            figma_file_key=message.figma_file_key,
            placement_target=message.placement_target,
        )
        spec["source"] = {
            "pageImportId": message.page_import_id,
            "manifestKey": key,
            "manifestSha256": sha256_hex(stored),
        }
        return canonical_json(spec)

    def completed(self, message: Code2WfMessage, key: str, stored: bytes) -> WorkerOutcome:
        try:
            flag_count = json.loads(stored)["flagCount"]
        except (ValueError, KeyError, TypeError):
            raise HandlerFailed(f"the stored wireframe at {key} is unreadable") from None
        return WorkerOutcome(
            kind="code2wf",
            id=message.code2wf_id,
            outcome="completed",
            attempt=message.attempt,
            result_url=key,
            flag_count=int(flag_count),
        )


def manifest_key(reference: str, bucket: str) -> str:
    """The key of the manifest in the results bucket: a plain key or `s3://<bucket>/<key>`."""
    if reference.startswith("s3://"):
        parts = urlsplit(reference)
        if parts.netloc != bucket:
            raise HandlerFailed("the Page Import manifest is not in the results bucket")
        reference = parts.path
    key = reference.lstrip("/")
    if not key or "://" in key:
        raise HandlerFailed("page_import_result_url is not a key in the results bucket")
    return key


def wireframe(
    manifest: Any,
    *,
    screen_id: str,
    figma_file_key: str,
    placement_target: str | None = None,
) -> dict[str, Any]:
    """The wireframe spec of `manifest` on screen `screen_id` (pure, deterministic)."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("layout"), dict):
        raise HandlerFailed("the Page Import manifest has no layout tree")
    width = SCREENS.get(screen_id, SCREENS["desktop"])
    flagged: list[dict[str, Any]] = []
    root = _block(manifest["layout"], x=0, y=0, width=width, path="body", flagged=flagged)
    return {
        "version": SPEC_VERSION,
        "kind": "code2wf",
        "screen": {
            "id": screen_id,
            "preset": screen_id if screen_id in SCREENS else "desktop",
            "width": width,
            "height": root["height"],
        },
        "figmaFileKey": figma_file_key,
        "placementTarget": placement_target,
        "title": str(manifest.get("title", "")),
        "root": root,
        "flagged": flagged,
        "flagCount": len(flagged),
    }


def block_type(node: dict[str, Any]) -> str | None:
    """The wireframe block for a layout node, or None when the node cannot be mapped."""
    role = str(node.get("role", "")).lower()
    return BLOCKS_BY_ROLE.get(role) or BLOCKS_BY_TAG.get(str(node.get("tag", "")))


def _block(
    node: Any, *, x: int, y: int, width: int, path: str, flagged: list[dict[str, Any]]
) -> dict[str, Any]:
    if not isinstance(node, dict):
        node = {"tag": "?"}
    tag = str(node.get("tag", "?"))
    kind = block_type(node)
    block: dict[str, Any] = {"name": node.get("id") or tag, "x": x, "y": y, "width": width}
    text = node.get("text")
    if kind is None:
        reason = f"no wireframe block for <{tag}>" + (
            f" with role {node['role']!r}" if node.get("role") else ""
        )
        flagged.append({"path": path, "tag": tag, "reason": reason})
        block.update(type="placeholder", flagged=True, reason=reason, height=FLAGGED_HEIGHT)
        return block
    block.update(type=kind, flagged=False)
    if isinstance(text, str) and text:
        block["text"] = text
    children = [child for child in node.get("children", []) if isinstance(child, dict)]
    if not children:
        block["height"] = _leaf_height(kind, tag, text, width)
        return block
    inner = max(width - 2 * PAD, 1)
    placed: list[dict[str, Any]] = []
    if kind == "navigation":
        count = len(children)
        cell = max((inner - GAP * (count - 1)) // count, 1)
        for index, child in enumerate(children):
            placed.append(
                _block(
                    child,
                    x=x + PAD + index * (cell + GAP),
                    y=y + PAD,
                    width=cell,
                    path=f"{path}/{index}",
                    flagged=flagged,
                )
            )
        block["height"] = 2 * PAD + max(child["height"] for child in placed)
    else:
        cursor = y + PAD
        for index, child in enumerate(children):
            placed_child = _block(
                child, x=x + PAD, y=cursor, width=inner, path=f"{path}/{index}", flagged=flagged
            )
            placed.append(placed_child)
            cursor += placed_child["height"] + GAP
        block["height"] = cursor - GAP + PAD - y
    block["children"] = placed
    return block


def _leaf_height(kind: str, tag: str, text: Any, width: int) -> int:
    if kind in _FIXED_HEIGHTS:
        return _FIXED_HEIGHTS[kind]
    if kind == "heading":
        return _HEADING_HEIGHTS.get(tag, 32)
    if kind in ("text", "listItem") and isinstance(text, str) and text:
        per_line = max(width // CHAR_WIDTH, 1)
        lines = -(-len(text) // per_line)
        return lines * LINE_HEIGHT + 4
    return 48
