"""The generated references under docs/reference/ match the code they are rendered from."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobrelay import reference
from jobrelay.settings import setting_fields

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(reference.PAGES))
def test_the_committed_reference_is_what_the_code_renders(name: str) -> None:
    committed = ROOT / reference.REFERENCE_DIR / name
    assert committed.exists(), f"{committed.relative_to(ROOT)} is missing: run `make docs`"
    fresh = reference.PAGES[name]()
    assert committed.read_text(encoding="utf-8") == fresh, (
        f"docs/reference/{name} is stale: run `make docs` and commit the result"
    )


def test_every_setting_has_a_description_and_a_row_in_the_reference() -> None:
    page = reference.settings_reference()
    for setting in setting_fields():
        assert setting.field.description, (
            f"give settings.{setting.path} a description=…, then run `make docs`"
        )
        env = reference.setting_env_names(setting.name, setting.field)[0]
        assert f"| `{env}`" in page, f"{env} has no row in the settings reference"


def test_the_settings_reference_ignores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whoever runs `make docs` may have settings exported; the page must not change.
    before = reference.settings_reference()
    monkeypatch.setenv("JOBRELAY_API_PORT", "9999")
    monkeypatch.setenv("JOBRELAY_WORKER_SLOTS", "ai=1")
    assert reference.settings_reference() == before
    assert "| `8000` |" in before


def test_the_cli_reference_lists_nested_commands_and_their_options() -> None:
    page = reference.cli_reference()
    assert "## `jobrelay jobs enqueue`" in page
    assert "## `jobrelay ops set-logged`" in page
    assert "`--lock-timeout <str>`" in page
    assert "[default: 5s]" in page


def test_the_http_reference_lists_operations_with_their_status_codes() -> None:
    page = reference.http_reference()
    section = page.split("### `POST /v1/projects/{projectId}/batches`", 1)[1].split("###", 1)[0]
    for code in ("201", "401", "404", "422"):
        assert f"| `{code}` |" in section
    assert "Authentication: bearer token." in section
    assert "### `GET /healthz`" in page


def test_check_mode_names_stale_pages_and_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert reference.main(["--root", str(tmp_path)]) == 0
    assert reference.main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / reference.REFERENCE_DIR / "cli.md").write_text("hand edited\n")
    capsys.readouterr()
    assert reference.main(["--root", str(tmp_path), "--check"]) == 1
    assert "docs/reference/cli.md is stale: run `make docs`" in capsys.readouterr().err
