"""The public surface: every name of `jobrelay.__all__` resolves, importing a part does not
load the engine, the version comes from the package metadata, the package is typed."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import jobrelay


def test_every_public_name_resolves() -> None:
    for name in jobrelay.__all__:
        assert getattr(jobrelay, name) is not None, name
    assert jobrelay.__version__ == version("jobrelay")


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        jobrelay.nope  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "nope" in str(exc)
    else:
        raise AssertionError("jobrelay.nope resolved")


def test_importing_the_sqs_workers_loads_no_database_driver() -> None:
    probe = "import sys, jobrelay.sqs_workers; print('psycopg' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_package_ships_its_type_information() -> None:
    assert (Path(jobrelay.__file__).parent / "py.typed").is_file()
