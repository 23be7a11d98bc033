"""The README's configuration table lists every setting."""

from __future__ import annotations

from pathlib import Path

from jobrelay.settings import Settings

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_setting_is_in_the_readme_table() -> None:
    text = README.read_text()
    for name in Settings.model_fields:
        env = "DATABASE_URL" if name == "database_url" else f"JOBRELAY_{name.upper()}"
        assert f"| `{env}` |" in text, f"{env} is missing from the README configuration table"
