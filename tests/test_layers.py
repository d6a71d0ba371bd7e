"""The import contracts in pyproject.toml ([tool.importlinter]): the core's
layers (docs/ARCHITECTURE.md, "Layers"), no cycles, the public __init__ on
top, and no import of policies, executors or an optional extra from the
core. ``lint-imports`` checks them; this test runs it, so a back edge fails
the test command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tool(command: str) -> Path:
    """A console script installed next to this interpreter (the venv's bin/)."""
    for name in (command, f"{command}.exe"):
        path = Path(sys.executable).parent / name
        if path.exists():
            return path
    raise AssertionError(
        f"{command} is not installed next to {sys.executable}: install the test extras (pip install -e '.[test]')"
    )


def run_tool(command: str, *args: str) -> tuple[int, str]:
    done = subprocess.run([str(tool(command)), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def test_the_import_contracts_hold() -> None:
    # (and importlinter-annotations.toml's: the graph with the imports under
    # TYPE_CHECKING, which pyproject.toml's contracts exclude, is acyclic too)
    code, output = run_tool(
        "lint-imports", "--no-cache", "--no-logo", "pyproject.toml", "importlinter-annotations.toml"
    )
    assert code == 0, f"lint-imports failed:\n{output}"
    assert "0 broken" in output, output


def test_ruff_finds_nothing() -> None:
    """``ruff check`` with the rules in pyproject.toml ([tool.ruff.lint])."""
    code, output = run_tool("ruff", "check", "--no-cache", ".")
    assert code == 0, f"ruff check failed (ruff check --fix fixes some):\n{output}"


def test_the_code_is_formatted() -> None:
    """``ruff format --check``: the formatter's output is the code."""
    code, output = run_tool("ruff", "format", "--check", "--no-cache", ".")
    assert code == 0, f"ruff format --check failed (run: .venv/bin/ruff format .):\n{output}"


def contract_layers() -> list[set[str]]:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"] if c["id"] == "layers"]
    return [set(re.split(r"\s*[|:]\s*", layer.strip())) for layer in layers["layers"]]


def pictured_layers() -> list[set[str]]:
    """The layers of ARCHITECTURE.md's picture, top first: each row is a
    label (a number, "on top", or blank for a continued layer), the layer's
    modules, and a description, separated by runs of spaces."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("\n## Layers\n", 1)[1]
    picture = section.split("```\n", 2)[1]
    layers: list[set[str]] = []
    for line in picture.splitlines():
        label, rest = line[:10].strip(), line[10:]
        modules = re.split(r" {3,}", rest.strip())[0]
        if modules == "dsh_actors/__init__.py":
            continue  # not a layer of the contract: the "init-on-top" contract says it
        names = set(re.split(r"[\s|]+", modules.strip()))
        if label:
            layers.append(names)
        else:
            layers[-1] |= names
    return layers


def test_the_architecture_picture_is_the_layers_contract() -> None:
    assert pictured_layers() == contract_layers()


#: Function-level imports allowed in the core (module → the top-level names
#: it may import lazily): the optional extras, which load only when used;
#: and the CLI's entry module, which imports its commands (its siblings in
#: the top layer, so no edge is hidden) once its Ctrl-C handler is in place.
_LAZY_EXTRAS = {"dsh_actors/cli/mcp_servers.py": {"mcp", "dsh_actors"}}
_LAZY_SIBLINGS = {"dsh_actors/cli/main.py"}  # (``from .x import``: its own package's modules only)


def test_no_function_level_import_of_a_project_module() -> None:
    """A project module is imported at module level (or under
    ``TYPE_CHECKING``); a lazy import would hide a back edge from
    ``lint-imports``. Only the optional extras load lazily."""
    import ast

    offenders = []
    for path in sorted((ROOT / "dsh_actors").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(), rel)
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom):
                    if node.level == 1 and rel in _LAZY_SIBLINGS:
                        continue
                    top = "." if node.level else (node.module or "").split(".")[0]
                elif isinstance(node, ast.Import):
                    top = node.names[0].name.split(".")[0]
                else:
                    continue
                project = top in (".", "dsh_actors", "policies", "executors")
                allowed = _LAZY_EXTRAS.get(rel, set())
                if (project or top in ("mcp", "ray", "openai", "anthropic")) and not (
                    top in allowed or (top == "." and "dsh_actors" in allowed)
                ):
                    offenders.append(f"{rel}:{node.lineno} (in {fn.name})")
    assert offenders == [], "function-level imports of project modules or extras:\n" + "\n".join(offenders)


def test_no_merge_conflict_marker_is_left() -> None:
    """A marker inside a docstring or a Markdown file passes every other check."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    marker = re.compile(r"^(<{7}|={7}|>{7})( |$)")
    offenders = []
    for name in files:
        if not name.endswith((".py", ".md", ".toml", ".cfg", ".txt")):
            continue
        for n, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1):
            if marker.match(line):
                offenders.append(f"{name}:{n}")
    assert offenders == []
