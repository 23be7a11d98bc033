"""Reference SQS worker handlers: real parsing, deterministic output, loopback-only fetching."""

from __future__ import annotations

import json

import httpx
import pytest
from pydantic import ValidationError

from jobrelay.protocol import WorkerOutcome, parse_message
from jobrelay.settings import Settings
from jobrelay.sqs_workers import WorkerConfig
from jobrelay.sqs_workers.errors import HandlerFailed
from jobrelay.sqs_workers.fetch import PageFetcher, check_http_url
from jobrelay.sqs_workers.handlers import canonical_json
from jobrelay.sqs_workers.handlers.code2des import design_spec, normalize_color
from jobrelay.sqs_workers.handlers.code2wf import Code2WfHandler, manifest_key, wireframe
from jobrelay.sqs_workers.handlers.common import result_key, sha256_hex
from jobrelay.sqs_workers.handlers.html_tree import MAX_DEPTH, parse_html
from jobrelay.sqs_workers.handlers.page_import import build_manifest
from jobrelay.sqs_workers.runtime import child_ref, validation_summary
from jobrelay.sqs_workers.webhook import outcome_body, webhook_id

SHOP_PAGE = """<!doctype html>
<html lang="en">
<head>
  <title>  Corner   Shop </title>
  <meta name="description" content="Fresh bread, every  morning.">
  <script>document.write("<h1>not a heading</h1>")</script>
  <style>h1 { color: red }</style>
</head>
<body>
  <header>
    <a href="/"><img src="/logo.png" alt="Corner Shop" width="120" height="40"></a>
    <nav aria-label="Main">
      <ul><li><a href="bread.html">Bread<li><a href="cakes.html" rel="next">Cakes</a></ul>
    </nav>
  </header>
  <main id="content">
    <h1>Today's bake</h1>
    <p>Sourdough, rye <b>and</b> spelt.
    <p>Open from 7.
    <section aria-label="Offers">
      <h2 id="offers">Offers</h2>
      <img src="img/offer.jpg">
      <video src="tour.mp4"></video>
      <shop-map></shop-map>
    </section>
    <form name="newsletter"><label>Email <input type="email"></label><button>Join</button></form>
  </main>
  <aside><p>Allergens</aside>
  <footer><p>&copy; Corner Shop</p></footer>
</body>
</html>
"""
SOURCE = "http://127.0.0.1:8081/shop/index.html"


# -- Page Import -------------------------------------------------------------------------


def test_manifest_of_a_page_lists_its_structure() -> None:
    manifest = build_manifest(SHOP_PAGE, source_url=SOURCE)

    assert manifest["title"] == "Corner Shop"
    assert manifest["lang"] == "en"
    assert manifest["description"] == "Fresh bread, every morning."
    assert manifest["source"] == {"url": SOURCE}
    assert manifest["headings"] == [
        {"level": 1, "text": "Today's bake", "id": None},
        {"level": 2, "text": "Offers", "id": "offers"},
    ]
    assert [(lm["role"], lm["tag"], lm["label"]) for lm in manifest["landmarks"]] == [
        ("banner", "header", None),
        ("navigation", "nav", "Main"),
        ("main", "main", "content"),
        ("region", "section", "Offers"),
        ("form", "form", None),
        ("complementary", "aside", None),
        ("contentinfo", "footer", None),
    ]
    assert manifest["links"] == [
        {"href": "http://127.0.0.1:8081/", "text": "Corner Shop", "rel": None},
        {"href": "http://127.0.0.1:8081/shop/bread.html", "text": "Bread", "rel": None},
        {"href": "http://127.0.0.1:8081/shop/cakes.html", "text": "Cakes", "rel": "next"},
    ]
    assert manifest["images"] == [
        {"src": "http://127.0.0.1:8081/logo.png", "alt": "Corner Shop", "width": 120, "height": 40},
        {
            "src": "http://127.0.0.1:8081/shop/img/offer.jpg",
            "alt": None,
            "width": None,
            "height": None,
        },
    ]


def test_layout_tree_follows_the_html_rules_for_implied_end_tags() -> None:
    layout = build_manifest(SHOP_PAGE, source_url=SOURCE)["layout"]
    header, main, aside, footer = layout["children"]
    assert [header["tag"], main["tag"], aside["tag"], footer["tag"]] == [
        "header",
        "main",
        "aside",
        "footer",
    ]
    nav_list = header["children"][1]["children"][0]
    assert [li["text"] for li in nav_list["children"]] == ["Bread", "Cakes"]  # <li> closed <li>
    assert [(n["tag"], n.get("text")) for n in main["children"][:3]] == [
        ("h1", "Today's bake"),
        ("p", "Sourdough, rye and spelt."),  # inline <b> is transparent
        ("p", "Open from 7."),  # the second <p> closed the first
    ]
    section = main["children"][3]
    assert [n["tag"] for n in section["children"]] == ["h2", "img", "video", "shop-map"]


def test_script_and_style_content_never_reach_the_manifest() -> None:
    manifest = build_manifest(SHOP_PAGE, source_url=SOURCE)
    assert "not a heading" not in json.dumps(manifest)
    assert "color: red" not in json.dumps(manifest)


def test_manifest_bytes_are_canonical_and_deterministic() -> None:
    first = canonical_json(build_manifest(SHOP_PAGE, source_url=SOURCE))
    second = canonical_json(build_manifest(SHOP_PAGE, source_url=SOURCE))
    assert first == second
    assert sha256_hex(first) == sha256_hex(second)
    decoded = json.loads(first)
    assert list(decoded) == sorted(decoded), "keys are sorted"
    assert b"\n" not in first
    assert canonical_json(decoded) == first, "re-encoding is a fixed point"
    other = canonical_json(build_manifest(SHOP_PAGE.replace("Offers", "Deals"), source_url=SOURCE))
    assert sha256_hex(other) != sha256_hex(first)


def test_inline_html_keeps_relative_links_and_honours_base_href() -> None:
    inline = build_manifest('<a href="x.html">x</a>', source_url=None)
    assert inline["source"] == {"inline": True}
    assert inline["links"][0]["href"] == "x.html"
    based = build_manifest(
        '<head><base href="http://127.0.0.1/docs/"></head><a href="x.html">x</a>', source_url=None
    )
    assert based["links"][0]["href"] == "http://127.0.0.1/docs/x.html"


def test_the_tree_is_the_one_html5_builds() -> None:
    manifest = build_manifest(
        "<table><tr><td>a<td>b</table>"
        "<p>Open <noscript><h2>enable scripts</h2></noscript>daily"
        "<ul><li><b>one<i>two</b>three</i></ul>",
        source_url=None,
    )
    assert [n["tag"] for n in manifest["layout"]["children"]] == ["table", "p", "ul"]
    assert manifest["headings"] == [], "noscript content is not shown with scripting on"
    assert manifest["layout"]["children"][1]["text"] == "Open daily"
    assert manifest["layout"]["children"][2]["children"][0]["text"] == "one two three"
    # The adoption agency reopens <i> after </b>: "three" stays italic.
    (ul,) = design_spec("<ul><li><b>one<i>two</b>three</i></ul>", None)["root"]["children"]
    assert ul["children"][0]["children"][-1] == {
        "type": "TEXT",
        "characters": "three",
        "style": {},
        "name": "i",
    }
    cells = design_spec("<table><tr><td>a<td>b</table>", "tbody > tr > td { color: red }")
    (table,) = cells["root"]["children"]
    assert table["children"][0]["tag"] == "tbody", "the implied <tbody> exists, as in browsers"
    assert table["children"][0]["children"][0]["children"][1]["children"][0]["style"] == {
        "color": "#ff0000"
    }


def test_hostile_nesting_is_bounded() -> None:
    html = "<div>" * 20_000 + "deep" + "</div>" * 20_000
    document = parse_html(html)
    assert document.truncated
    manifest = build_manifest(html, source_url=None)
    depth, node = 0, manifest["layout"]
    while node.get("children"):
        node, depth = node["children"][0], depth + 1
    assert depth <= MAX_DEPTH


def test_result_keys_hold_kind_child_and_attempt_and_cannot_escape() -> None:
    assert result_key("page_import", "p1", 2, "manifest.json") == (
        "page_import/p1/attempt-2/manifest.json"
    )
    assert result_key("code2des", "../x/y", 1, "design.json") == (
        "code2des/..%2Fx%2Fy/attempt-1/design.json"
    )


# -- Code2WF -----------------------------------------------------------------------------


def test_wireframe_maps_the_layout_and_flags_what_it_cannot_map() -> None:
    manifest = build_manifest(SHOP_PAGE, source_url=SOURCE)
    spec = wireframe(manifest, screen_id="mobile", figma_file_key="FILE1")

    assert spec["screen"] == {
        "id": "mobile",
        "preset": "mobile",
        "width": 375,
        "height": spec["root"]["height"],
    }
    assert spec["root"]["type"] == "page"
    assert [b["type"] for b in spec["root"]["children"]] == ["header", "main", "sidebar", "footer"]
    assert spec["flagCount"] == 2
    assert [(f["tag"], f["path"]) for f in spec["flagged"]] == [
        ("video", "body/1/3/2"),
        ("shop-map", "body/1/3/3"),
    ]
    flagged_blocks = [b for b in _blocks(spec["root"]) if b["flagged"]]
    assert len(flagged_blocks) == spec["flagCount"]
    assert all(b["width"] <= 375 for b in _blocks(spec["root"]))


def test_wireframe_counts_unknown_roles_and_screens_default_to_desktop() -> None:
    manifest = {
        "title": "t",
        "layout": {
            "tag": "body",
            "children": [
                {"tag": "span", "role": "marquee"},
                {"tag": "div", "role": "tabpanel"},  # unknown role, known tag: mapped
                {"tag": "iframe"},
                {"tag": "canvas"},
            ],
        },
    }
    spec = wireframe(manifest, screen_id="kiosk-portrait", figma_file_key="F")
    assert spec["flagCount"] == 3
    assert spec["screen"]["width"] == 1440 and spec["screen"]["preset"] == "desktop"
    assert spec["screen"]["id"] == "kiosk-portrait"


def test_wireframe_is_deterministic_per_screen() -> None:
    manifest = build_manifest(SHOP_PAGE, source_url=SOURCE)
    one = canonical_json(wireframe(manifest, screen_id="desktop", figma_file_key="F"))
    two = canonical_json(wireframe(manifest, screen_id="desktop", figma_file_key="F"))
    tablet = canonical_json(wireframe(manifest, screen_id="tablet", figma_file_key="F"))
    assert one == two
    assert one != tablet


def test_wireframe_outcome_reads_its_flag_count_from_the_stored_bytes() -> None:
    message = parse_message(
        json.dumps(
            {
                "kind": "code2wf",
                "code2wf_id": "wf1",
                "page_import_id": "p1",
                "figma_file_key": "F",
                "screen_id": "desktop",
                "organization_id": 1,
                "project_id": 1,
                "attempt": 3,
                "page_import_result_url": "page_import/p1/attempt-1/manifest.json",
            }
        )
    )
    stored = canonical_json({"flagCount": 4})
    outcome = Code2WfHandler().completed(message, "code2wf/wf1/attempt-3/wireframe.json", stored)  # type: ignore[arg-type]
    assert (outcome.flag_count, outcome.attempt, outcome.kind) == (4, 3, "code2wf")


def test_a_manifest_without_layout_is_a_permanent_failure() -> None:
    with pytest.raises(HandlerFailed):
        wireframe({"title": "x"}, screen_id="desktop", figma_file_key="F")


@pytest.mark.parametrize(
    ("reference", "key"),
    [
        ("page_import/p1/attempt-1/manifest.json", "page_import/p1/attempt-1/manifest.json"),
        ("/page_import/p1/attempt-1/manifest.json", "page_import/p1/attempt-1/manifest.json"),
        (
            "s3://results/page_import/p1/attempt-1/manifest.json",
            "page_import/p1/attempt-1/manifest.json",
        ),
    ],
)
def test_manifest_reference_is_a_key_in_the_results_bucket(reference: str, key: str) -> None:
    assert manifest_key(reference, "results") == key


@pytest.mark.parametrize("reference", ["s3://other/x.json", "http://127.0.0.1/x.json", "/"])
def test_manifest_reference_outside_the_bucket_is_refused(reference: str) -> None:
    with pytest.raises(HandlerFailed):
        manifest_key(reference, "results")


# -- Code2Des ----------------------------------------------------------------------------

SNIPPET = """
<style>.card p { color: #336 }</style>
<div class="card" id="hero">
  <h2>Title</h2>
  <p>Body <span class="muted">note</span></p>
  <button class="btn primary" style="background-color: rgba(0, 128, 0, 0.5)">Go</button>
  <img src="x.png" alt="photo" width="64">
</div>
"""
SNIPPET_CSS = """
/* comment with a { brace */
.card { display: flex; flex-direction: column; gap: 12px; background: #FFF; border-radius: 8px; }
#hero { background-color: rgb(250, 250, 250); }
h2 { color: navy; font-size: 1.5rem; font-weight: bold; font-family: "Inter", sans-serif; }
.muted { color: #999999 }
button.primary { color: white; padding: 4px }
ul > li { color: red }
a:hover { color: blue }
@media (max-width: 600px) { .card { display: block } }
"""


def test_design_spec_builds_frames_text_and_the_palette() -> None:
    spec = design_spec(SNIPPET, SNIPPET_CSS)
    card = spec["root"]["children"][0]
    assert card["name"] == "div#hero.card"
    assert card["layout"] == "VERTICAL" and card["gap"] == 12 and card["cornerRadius"] == 8
    assert card["fills"] == ["#fafafa"], "#hero (1,0,0) beats .card (0,1,0)"
    title, paragraph, button, image = card["children"]
    assert title["children"][0] == {
        "type": "TEXT",
        "characters": "Title",
        "style": {"color": "#000080", "fontSize": 24, "fontWeight": 700, "fontFamily": "Inter"},
    }
    body, note = paragraph["children"]
    assert body["style"]["color"] == "#333366", "descendant selector from <style>"
    assert note["style"]["color"] == "#999999"
    assert button["fills"] == ["#00800080"], "inline style wins"
    assert button["children"][0]["style"]["color"] == "#ffffff"
    assert image == {"type": "IMAGE", "name": "photo", "width": 64}
    assert [c["value"] for c in spec["colors"]] == [
        "#000080",
        "#0000ff",
        "#00800080",
        "#333366",
        "#999999",
        "#fafafa",
        "#ff0000",
        "#ffffff",
    ]
    # `ul > li` is a selector cssselect2 matches; `:hover` never applies to a static design.
    assert spec["unsupportedSelectors"] == ["a:hover"]
    assert spec["unsupportedRules"] == ["@media"]


def test_design_spec_matches_combinators_and_structural_pseudo_classes() -> None:
    spec = design_spec(
        "<ul><li>one</li><li>two <b>bold</b></li></ul><p>after</p>",
        "ul > li { color: red } li:first-child { color: blue } ul + p { color: #0f0 }"
        " li > b { color: gray } p::before { color: teal } li:frobnicate { color: black }",
    )
    (ul, paragraph) = spec["root"]["children"]
    one, two = ul["children"]
    assert one["children"][0]["style"]["color"] == "#0000ff", "(0,1,1) beats (0,0,2)"
    assert two["children"][0]["style"]["color"] == "#ff0000"
    assert two["children"][1]["style"]["color"] == "#808080"
    assert paragraph["children"][0]["style"]["color"] == "#00ff00"
    assert spec["unsupportedSelectors"] == ["li:frobnicate", "p::before"]


def test_important_declarations_beat_specificity_and_inline_style() -> None:
    spec = design_spec(
        '<p id="x" class="c" style="color: blue">t</p>',
        "#x { color: red } .c { color: green !important }",
    )
    assert spec["root"]["children"][0]["children"][0]["style"]["color"] == "#008000"


def test_design_spec_is_deterministic() -> None:
    assert canonical_json(design_spec(SNIPPET, SNIPPET_CSS)) == canonical_json(
        design_spec(SNIPPET, SNIPPET_CSS)
    )


@pytest.mark.parametrize(
    ("token", "color"),
    [
        ("#ABC", "#aabbcc"),
        ("#aabbccff", "#aabbcc"),
        ("#aabbcc80", "#aabbcc80"),
        ("rgb(255, 0, 0)", "#ff0000"),
        ("rgb(100% 0% 0% / 50%)", "#ff000080"),
        ("Grey", "#808080"),
        ("#12", None),
        ("rgb(1,2)", None),
    ],
)
def test_colors_are_normalized(token: str, color: str | None) -> None:
    assert normalize_color(token) == color


# -- fetch policy ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000/a", "https://127.9.9.9/a", "http://[::1]:81/", "http://localhost/x"],
)
def test_loopback_urls_are_allowed(url: str) -> None:
    check_http_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/",
        "http://10.0.0.1/",
        "http://169.254.169.254/latest/meta-data",
        "http://0.0.0.0/",
        "http://2130706433/",
        "http://localhost.example.com/",
        "ftp://127.0.0.1/x",
        "gopher://127.0.0.1/",
    ],
)
def test_anything_beyond_loopback_is_refused(url: str) -> None:
    with pytest.raises(HandlerFailed):
        check_http_url(url)


async def test_fetcher_refuses_before_connecting_and_file_urls_need_a_root() -> None:
    async with httpx.AsyncClient(trust_env=False) as http:
        fetcher = PageFetcher(http, file_root=None, max_bytes=1024, timeout_s=1)
        with pytest.raises(HandlerFailed, match="loopback"):
            await fetcher.fetch("http://192.0.2.1/page.html")
        with pytest.raises(HandlerFailed, match="file:// URLs are disabled"):
            await fetcher.fetch("file:///etc/passwd")


# -- wire details ------------------------------------------------------------------------


def test_webhook_id_is_derived_from_the_body() -> None:
    outcome = WorkerOutcome(kind="code2des", id="c1", outcome="completed", result_url="k")
    body = outcome_body(outcome)
    assert json.loads(body) == {
        "kind": "code2des",
        "id": "c1",
        "outcome": "completed",
        "resultUrl": "k",
    }
    assert webhook_id(body) == webhook_id(outcome_body(outcome))
    other = WorkerOutcome(kind="code2des", id="c2", outcome="completed", result_url="k")
    assert webhook_id(outcome_body(other)) != webhook_id(body)


def test_invalid_messages_name_fields_but_never_echo_values() -> None:
    body = json.dumps(
        {
            "kind": "page_import",
            "page_import_id": "p9",
            "organization_id": 1,
            "project_id": 1,
            "attempt": 2,
            "request": {"url": "ftp://secret-host/token=abc"},
        }
    )
    with pytest.raises(ValidationError) as info:
        parse_message(body)
    summary = validation_summary(info.value)
    assert "request.url" in summary
    assert "secret-host" not in summary and "token=abc" not in summary
    ref = child_ref(body)
    assert ref is not None and (ref.kind, ref.id, ref.attempt) == ("page_import", "p9", 2)


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[1, 2]",
        '{"kind": "video", "id": "x"}',
        '{"kind": "code2des"}',
        '{"kind": "code2des", "code2des_id": ""}',
        '{"kind": "code2des", "code2des_id": 42}',
    ],
)
def test_messages_without_a_readable_child_id_have_no_ref(body: str) -> None:
    assert child_ref(body) is None


def _blocks(block: dict[str, object]) -> list[dict[str, object]]:
    out = [block]
    for child in block.get("children", []):  # type: ignore[attr-defined]
        out.extend(_blocks(child))
    return out


def test_worker_config_comes_from_settings_and_the_heartbeat_fits_the_timeout() -> None:
    config = WorkerConfig.from_settings(
        Settings(
            webhooks={"secrets": "whsec_Zmlyc3Q=,whsec_c2Vjb25k"}, sqs_worker={"concurrency": 3}
        )
    )
    assert config.webhook_url == "http://127.0.0.1:8000/v1/webhooks/worker"
    assert config.webhook_secret == "whsec_Zmlyc3Q=", "the first secret signs"
    assert config.concurrency == 3
    with pytest.raises(ValidationError, match="HEARTBEAT"):
        Settings(sqs_worker={"visibility_timeout_s": 5, "heartbeat_s": 5})
