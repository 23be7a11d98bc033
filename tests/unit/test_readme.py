"""README.md and docs/ stand alone: no file outside the repository, no broken link.

The full settings table is generated (docs/reference/settings.md, checked by
test_reference_docs.py); the README keeps a short table whose names must be real settings.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobrelay import reference
from jobrelay.settings import setting_fields

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").rglob("*.md"))]

# Pages another slice of issue 15 adds; linked from the index before they land.
PENDING: set[str] = set()

# Paths of one machine (`/work/...`, `/tmp/...`) and the team's shared directory.
MACHINE_PATH = re.compile(r"(?<![\w.:/-])/(?:work|tmp|home|opt|srv|Users)/|shared/")
UPWARD = re.compile(r"(?:\.\./)+[^\s)`'\"<>]*")
LINK = re.compile(r"\]\(([^)\s]+)\)")
DOCS_PATH = re.compile(r"\bdocs/[\w./-]+\.md\b")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _inside(path: Path) -> bool:
    return path.resolve().is_relative_to(ROOT)


@pytest.mark.parametrize("page", DOCS, ids=_rel)
def test_the_page_names_no_file_outside_the_repository(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), 1):
        machine = MACHINE_PATH.search(line)
        assert not machine, f"{_rel(page)}:{number} names a path of one machine: {line.strip()}"
        for upward in UPWARD.findall(line):
            target = page.parent / upward
            assert _inside(target), f"{_rel(page)}:{number} points outside the repository: {upward}"


@pytest.mark.parametrize("page", DOCS, ids=_rel)
def test_every_relative_link_reaches_a_file(page: Path) -> None:
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor of the same page
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert _inside(path), f"{_rel(page)} links outside the repository: {target}"
        assert path.exists() or _rel(path) in PENDING, f"{_rel(page)}: broken link {target}"


def test_every_docs_path_named_in_the_code_exists() -> None:
    sources = [ROOT / "AGENTS.md", *DOCS]
    for folder in ("src", "tests", "bench"):
        sources += sorted((ROOT / folder).rglob("*.py"))
        sources += sorted((ROOT / folder).rglob("*.md"))
    for source in sources:
        for named in DOCS_PATH.findall(source.read_text(encoding="utf-8")):
            if named in PENDING:
                continue
            assert (ROOT / named).exists(), f"{_rel(source)} names {named}, which does not exist"


def test_the_docs_index_lists_every_page() -> None:
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    for page in (ROOT / "docs").rglob("*.md"):
        if page.name != "README.md":
            target = str(page.relative_to(ROOT / "docs"))
            assert f"]({target})" in index, f"docs/README.md does not link {target}"


def test_the_readme_table_names_real_settings_and_points_at_the_reference() -> None:
    text = README.read_text(encoding="utf-8")
    known = {reference.setting_env_names(s.name, s.field)[0] for s in setting_fields()}
    listed = re.findall(r"^\| `([A-Z_]+)` \|", text, flags=re.MULTILINE)
    assert listed, "the README lost its table of essential settings"
    unknown = sorted(set(listed) - known)
    assert not unknown, f"the README lists settings that do not exist: {unknown}"
    assert "](docs/reference/settings.md)" in text
