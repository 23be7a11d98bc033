"""`make install` (run by `make up` on a fresh machine) says what it does while it works."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _install_commands(venv: Path) -> list[str]:
    """The commands `make` would run for a fresh install into `venv` (dry run, -B forces it)."""
    result = subprocess.run(
        # --no-print-directory: under `make test` this make is a sub-make, which would add
        # "Entering/Leaving directory" lines around the commands.
        ["make", "--no-print-directory", "-n", "-B", "install", f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.splitlines()


def test_the_lock_install_shows_progress_and_keeps_hash_checking(tmp_path: Path) -> None:
    commands = _install_commands(tmp_path / "venv")
    (lock_step,) = [c for c in commands if "-r requirements.lock" in c]
    assert "--require-hashes" in lock_step
    assert " -q" not in lock_step, "pip must list what it installs during the long first step"
    announced = commands[commands.index(lock_step) - 1]
    assert announced.startswith("echo") and "requirements.lock" in announced
    phases = [c for c in commands if c.startswith('echo "==> [')]
    assert len(phases) == 3, commands
    assert commands[-1].startswith("echo") and "is ready" in commands[-1]
