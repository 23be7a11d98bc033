"""jobrelay's pytest plugin from a package outside the repository: the example package,
copied to a folder of its own, runs its own tests with nothing but jobrelay installed (the
plugin arrives through the `pytest11` entry point; its fixtures start an embedded
PostgreSQL, migrate a template once and give each test a copy)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# The plugin starts its own embedded server: the version under test never reaches it.
pytestmark = pytest.mark.own_server

REPO = Path(__file__).resolve().parents[2]


def test_the_example_package_tests_itself_with_the_plugin(tmp_path: Path) -> None:
    package = tmp_path / "greetings"
    shutil.copytree(REPO / "examples" / "greetings", package)
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "PYTHONPATH"}}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=package,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 passed" in result.stdout, result.stdout


def test_without_job_types_the_plugin_says_what_to_set(tmp_path: Path) -> None:
    (tmp_path / "test_nothing.py").write_text(
        "async def test_it(jobrelay_registry):\n    pass\n", encoding="utf-8"
    )
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nasyncio_mode = "auto"\n', encoding="utf-8"
    )
    env = {k: v for k, v in os.environ.items() if k not in {"JOBRELAY_APP", "PYTHONPATH"}}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_nothing.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "jobrelay_app" in result.stdout + result.stderr
