"""The import contracts in pyproject.toml ([tool.importlinter]): the core's
layers (docs/ARCHITECTURE.md, "Layers"), no cycles, the public __init__ on
top, and no import of policies, executors or an optional extra from the
core. ``lint-imports`` checks them; this test runs it, so a back edge fails
the test command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lint_imports() -> Path:
    # The console script installed next to this interpreter (the venv's bin/).
    for name in ("lint-imports", "lint-imports.exe"):
        path = Path(sys.executable).parent / name
        if path.exists():
            return path
    raise AssertionError(
        f"lint-imports is not installed next to {sys.executable}: install the test extras (pip install -e '.[test]')"
    )


def test_the_import_contracts_hold() -> None:
    done = subprocess.run(
        [str(lint_imports()), "--no-cache", "--no-logo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"lint-imports failed:\n{output}"
    assert "0 broken" in output, output
