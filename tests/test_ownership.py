"""Who may touch what, read from the code (docs/ARCHITECTURE.md, "Call
states and who owns what" and "Layers").

* No object writes another's private fields or calls its private methods:
  ``other._name`` appears only where ``_name`` belongs to the code at hand
  (a method of the class that defines it, on another instance of that
  class; or a module-level function of the module that defines it).
  Everything else goes through a public method of the owner, or a message.
  Private functions of a *module* (``os._exit``, a sibling module's helper)
  are not an object's state and are not checked here.
* No module below the runtime names ``dsh_actors.runtime``, not even in an
  annotation: the layers below are given a ``Kernel``
  (``dsh_actors/kernel.py``), never the ``ToolRuntime``. (import-linter's
  layers contract checks the imports that run; this checks the ones under
  ``TYPE_CHECKING`` too.)
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dsh_actors"

# Accesses that are not to an object of this project, or that belong to a
# pair of classes written as one unit.
_ALLOWED = {
    # The MCP SDK offers no public hook for these: mount() chains the
    # session's message handler and wraps the dispatcher's cancel writer
    # (and marks its wrapper so it wraps once).
    "dsh_actors/mcp/_mount.py": {
        "self.session._message_handler",
        "dispatcher._cancel_outbound",
        "cancel_outbound._dsh_forwards_reasons",
    },
    # AbortController is the one writer of its AbortSignal (the DOM's pair):
    # a signal offers no way to abort itself to those who hold it.
    "dsh_actors/signals.py": {"signal._reason", "signal._abort"},
    # Records and cards are one codec: a list codec decodes its items, and
    # a card family its cards, with the record classes' shared decoder
    # (Record._decode, inherited).
    "dsh_actors/presentation/_codec.py": {"self.cls._decode", "target._decode"},
    # The card families' tables (Card._cards), filled once at import by the
    # module that defines the cards.
    "dsh_actors/presentation/_cards.py": {"ToolCallView._cards", "ToolResultView._cards"},
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _members(cls: ast.ClassDef) -> set[str]:
    """The names a class defines: methods, class attributes, slots, and
    attributes its methods assign on ``self``/``cls``."""
    names: set[str] = set()
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            names.add(stmt.target.id)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    names.add(target.id)
                    if target.id == "__slots__" and isinstance(stmt.value, (ast.Tuple, ast.List)):
                        names.update(e.value for e in stmt.value.elts if isinstance(e, ast.Constant))
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
    return names


def _module_names(tree: ast.Module, path: Path) -> set[str]:
    """Names this module binds to modules (``import x``, ``from . import mod``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = path.parent
            for _ in range(max(node.level - 1, 0)):
                base = base.parent
            if node.level == 0:
                base = ROOT
            for part in (node.module or "").split("."):
                if part:
                    base = base / part
            for alias in node.names:
                if (base / f"{alias.name}.py").exists() or (base / alias.name / "__init__.py").exists():
                    names.add(alias.asname or alias.name)
    return names


class _Scan(ast.NodeVisitor):
    def __init__(self, tree: ast.Module, path: Path) -> None:
        self.modules = _module_names(tree, path)
        self.module_members: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                self.module_members |= _members(node)
        self.classes: list[set[str]] = []
        self.found: list[tuple[int, str]] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.append(_members(node))
        self.generic_visit(node)
        self.classes.pop()

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if _private(node.attr) and not self._allowed(node):
            self.found.append((node.lineno, ast.unparse(node)))
        self.generic_visit(node)

    def _allowed(self, node: ast.Attribute) -> bool:
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            return True
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            return True
        if isinstance(owner, ast.Name) and owner.id in self.modules:
            return True  # a module's private function: not an object's state
        if self.classes:  # in a class: another instance of this very class
            return isinstance(owner, ast.Name) and node.attr in self.classes[-1]
        return node.attr in self.module_members  # a module-level function of the owning module


@functools.cache  # parsed once for every test here (the visitors only read the trees)
def _parsed() -> tuple[tuple[str, ast.Module, Path], ...]:
    return tuple(
        (path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path)), path)
        for path in sorted(PACKAGE.rglob("*.py"))
    )


def _modules() -> Iterator[tuple[str, ast.Module, Path]]:
    yield from _parsed()


@functools.cache  # (two tests read it; neither changes it)
def private_accesses() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for name, tree, path in _modules():
        scan = _Scan(tree, path)
        scan.visit(tree)
        if scan.found:
            found[name] = {expr for _, expr in scan.found}
    return found


def test_no_object_touches_another_s_private_members() -> None:
    allowed = _ALLOWED
    unexpected = {
        name: sorted(exprs - allowed.get(name, set()))
        for name, exprs in private_accesses().items()
        if exprs - allowed.get(name, set())
    }
    assert unexpected == {}, (
        f"another object's private member is used (give its owner a public method, or send it a message): {unexpected}"
    )


def test_the_allow_lists_name_only_accesses_that_still_exist() -> None:
    found = private_accesses()
    stale = {
        name: sorted(exprs - found.get(name, set()))
        for name, exprs in _ALLOWED.items()
        if exprs - found.get(name, set())
    }
    assert stale == {}, f"remove these allow-list entries, the accesses are gone: {stale}"


# The runtime and the modules above it (they may name the ToolRuntime).
_ABOVE_THE_RUNTIME = ("dsh_actors/runtime.py", "dsh_actors/__init__.py", "dsh_actors/demo.py")
_ABOVE_THE_RUNTIME_PACKAGES = ("dsh_actors/cli/", "dsh_actors/mcp/", "dsh_actors/providers/", "dsh_actors/acp/")


def _names_the_runtime(tree: ast.Module, path: Path) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module == "dsh_actors.runtime":
                return True
            if node.level > 0:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                target = base / (node.module or "").replace(".", "/")
                if target == PACKAGE / "runtime":
                    return True
                if node.module is None and any(a.name == "runtime" for a in node.names) and base == PACKAGE:
                    return True
        elif isinstance(node, ast.Import) and any(a.name == "dsh_actors.runtime" for a in node.names):
            return True
    return False


def test_no_module_below_the_runtime_names_it() -> None:
    offenders = [
        name
        for name, tree, path in _modules()
        if name not in _ABOVE_THE_RUNTIME
        and not name.startswith(_ABOVE_THE_RUNTIME_PACKAGES)
        and _names_the_runtime(tree, path)
    ]
    assert offenders == [], (
        f"these modules below the runtime import dsh_actors.runtime (give them the Kernel): {offenders}"
    )


# A call's outcome, with whether post-execute sees it and whether it came
# from the dispatch, is settled by one function, Call.settle (docs/
# ARCHITECTURE.md, "Call states and who owns what"): __init__ starts a call
# unsettled and unprepare() clears a call to prepare again, nothing else
# writes them.
_OUTCOME_FIELDS = frozenset({"outcome", "run_post", "dispatched"})
_OUTCOME_WRITERS = {
    ("dsh_actors/pipeline/call.py", "Call.__init__"),
    ("dsh_actors/pipeline/call.py", "Call.settle"),
    ("dsh_actors/pipeline/call.py", "Call.unprepare"),
}


class _Scoped(ast.NodeVisitor):
    """Collects, in ``found``, the qualified name of the function (or
    class) around each node a subclass :meth:`mark` s."""

    def __init__(self) -> None:
        self.scope: list[str] = []
        self.found: set[str] = set()

    def _enter(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _enter

    def mark(self) -> None:
        self.found.add(".".join(self.scope) or "<module>")


class _Writers(_Scoped):
    """Where each of ``fields`` is assigned."""

    def __init__(self, fields: frozenset[str]) -> None:
        super().__init__()
        self.fields = fields

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)) and node.attr in self.fields:
            self.mark()
        self.generic_visit(node)


def test_a_calls_outcome_is_written_only_by_call_settle() -> None:
    writers = set()
    for name, tree, _ in _modules():
        scan = _Writers(_OUTCOME_FIELDS)
        scan.visit(tree)
        writers |= {(name, where) for where in scan.found}
    assert writers - _OUTCOME_WRITERS == set(), (
        f"a call's outcome is written outside Call.settle (settle it there): {sorted(writers - _OUTCOME_WRITERS)}"
    )
    assert _OUTCOME_WRITERS <= writers, f"the writers listed here moved: {sorted(_OUTCOME_WRITERS - writers)}"


# A call cancelled before its body started is settled by one method,
# Call.abort_unstarted, which decides whether post-execute sees it (its
# pre-execute phases ran: ``phases_ran``). Settling one by hand elsewhere
# would write that rule a second time.
class _AbortSettles(_Scoped):
    """Where ``<x>.settle(aborted(...), ...)`` is written."""

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "settle" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Call) and isinstance(first.func, ast.Name) and first.func.id == "aborted":
                self.mark()
        self.generic_visit(node)


def test_a_call_cancelled_before_its_body_is_settled_by_abort_unstarted_only() -> None:
    settles = set()
    phases = set()
    for name, tree, _ in _modules():
        scan = _AbortSettles()
        scan.visit(tree)
        settles |= {(name, where) for where in scan.found}
        writers = _Writers(frozenset({"phases_ran"}))
        writers.visit(tree)
        phases |= {(name, where) for where in writers.found}
    assert settles == {("dsh_actors/pipeline/call.py", "Call.abort_unstarted")}, (
        f"a cancelled call is settled by hand (call Call.abort_unstarted()): {sorted(settles)}"
    )
    assert phases == {
        ("dsh_actors/pipeline/call.py", "Call.__init__"),
        ("dsh_actors/pipeline/prepare.py", "prepare"),
    }, f"phases_ran is written outside Call.__init__ and prepare(): {sorted(phases)}"
