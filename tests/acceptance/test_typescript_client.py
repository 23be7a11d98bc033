"""Clients generated from the committed OpenAPI document compile: openapi-typescript (from
the npm registry, pinned by tests/typescript/package-lock.json) generates the types of
docs/reference/openapi.json, and `tsc --strict` checks tests/typescript/client.ts, a small
client written from the docs whose bodies leave out every field with a server default."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "tests" / "typescript"
DOCUMENT = REPO / "docs" / "reference" / "openapi.json"


def _run(*command: str, cwd: Path) -> str:
    result = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.own_server
def test_a_client_written_from_the_docs_type_checks_on_the_generated_types(
    tmp_path: Path,
) -> None:
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the TypeScript client check needs Node.js and npm")
    for name in ("package.json", "package-lock.json", "tsconfig.json", "client.ts"):
        shutil.copy(CHECK / name, tmp_path / name)
    _run(npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", cwd=tmp_path)
    bin_dir = tmp_path / "node_modules" / ".bin"
    generated = tmp_path / "generated" / "jobrelay.d.ts"
    _run(str(bin_dir / "openapi-typescript"), str(DOCUMENT), "-o", str(generated), cwd=tmp_path)
    types = generated.read_text(encoding="utf-8")
    # Method names of generated clients are the operation ids, not route strings.
    assert "createBatch: {" in types and "materializeCode2wf: {" in types
    assert "_v1_" not in types
    _run(str(bin_dir / "tsc"), "--strict", "--noEmit", "-p", "tsconfig.json", cwd=tmp_path)
