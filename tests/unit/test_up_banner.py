"""What `jobrelay up` says before it starts: a data directory of an earlier release left in
the current folder is named with the setting that keeps using it."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobrelay.cli.commands import stack
from jobrelay.settings import load_settings


def test_an_earlier_folder_data_directory_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JOBRELAY_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "300")
    stack._mention_a_folder_data_dir(load_settings())
    assert capsys.readouterr().out == "", "no earlier cluster here: nothing to say"

    (tmp_path / ".jobrelay" / "pgdata").mkdir(parents=True)
    (tmp_path / ".jobrelay" / "pgdata" / "PG_VERSION").write_text("18\n")
    stack._mention_a_folder_data_dir(load_settings())
    said = " ".join(capsys.readouterr().out.split())
    assert f"{tmp_path / '.jobrelay'} holds the data of an earlier `jobrelay up`" in said
    assert f"the data directory is {tmp_path / 'state' / 'jobrelay'}" in said
    assert "JOBRELAY_DATA_DIR=.jobrelay keeps using the old one" in said

    # Asked for (the setting names it): nothing to say.
    stack._mention_a_folder_data_dir(load_settings(data_dir=".jobrelay"))
    assert capsys.readouterr().out == ""
