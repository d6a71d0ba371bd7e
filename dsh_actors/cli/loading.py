"""What the commands load: a tool module (``--tools MODULE[:ATTR]``), an
executor (``--executor native|ptc``), ``run``'s timeout policy
(``policies.timeout``, unless ``--no-timeout``) and its approval prompt
(``policies.approval.TerminalPrompt``), with every failure turned into a
one-line :class:`CliError`. ``executors`` and ``policies`` are
imported by name, when used: the core never imports them statically.

``MODULE`` is a module name imported with the current directory on
``sys.path`` (``examples.tools``), or the path of a ``.py`` file, imported
with its folder first on ``sys.path`` (as ``python FILE`` has it: it imports
the modules beside it); a folder (``.``, ``./my_pkg``) is refused, naming
the module to give instead. Then the modules of that folder stay importable
until the command ends, as ``python FILE`` keeps its folder for the life of
the process, so a tool that imports one when it runs finds it; but only
when nothing else provides that name (the folder is searched after every
other place, editable installs included), so that none of them stands in
for a module the command imports later (``policies``, ``executors``). What
the loader adds (the current directory, a file's folder) is taken off when
the command ends (:func:`loader_path_scope`). ``ATTR``
(dotted for a nested attribute; default ``register``, else ``TOOLS``) is one
of:

* ``register(rt)``: a function of one required argument, called with the
  started ``ToolRuntime`` (or with ``rt.tools`` when that parameter is
  annotated ``ToolsService`` or named ``tools``/``service``/``tools_service``);
  it registers tools, guards, listeners and approval services itself;
* a ``ToolDefinition`` or a sequence of them, registered globally;
* a function of no required argument returning one of those.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from ..definition import ToolDefinition
from ..errors import DshError, safe_str
from ..runtime import ToolRuntime

__all__ = [
    "CliError",
    "ToolSource",
    "install_executor",
    "install_timeout",
    "install_tools",
    "load_tool_source",
    "one_line",
    "loader_path_scope",
    "terminal_prompt",
]

_DEFAULT_ATTRS: Final = ("register", "TOOLS")
_SERVICE_NAMES: Final = frozenset({"tools", "service", "tools_service", "registry"})
EXECUTORS: Final = ("native", "ptc")

#: What the loader added, oldest first, as (the list, the entry): the
#: current directory on ``sys.path``, a tools file's :class:`_FolderFinder`
#: on ``sys.meta_path``. :func:`loader_path_scope` takes off what its
#: command added.
_ADDED: list[tuple[list[Any], object]] = []


class CliError(Exception):
    """The command cannot run; the message is one line, shown as it is
    (exit status 1)."""


def one_line(err: DshError) -> str:
    """``err``'s message on one line (line breaks and runs of spaces as
    single spaces), as the CLI shows every error."""
    return " ".join(err.message.split())


def _describe(err: BaseException) -> str:
    """``Type: message`` for an unexpected exception, on one line."""
    if isinstance(err, DshError):
        return one_line(err)
    message = safe_str(err)
    if isinstance(err, SyntaxError) and err.filename:
        message = f"{err.msg} ({err.filename}, line {err.lineno})"
    text = f"{type(err).__name__}: {message}" if message else type(err).__name__
    return " ".join(text.split())


@dataclass(frozen=True, slots=True)
class ToolSource:
    """A resolved ``--tools`` value: what to call or register."""

    spec: str
    """The value as given."""
    label: str
    """The attribute's name (``register``), for messages."""
    target: object
    """The attribute it names."""


def _names_a_path(module_name: str) -> bool:
    """Whether ``--tools`` names a file or a folder rather than a module:
    a ``.py`` name, a name with a path separator, or an existing path that
    is no dotted module name (``.``, ``..``, ``my-tools``)."""
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        return True
    return not all(part.isidentifier() for part in module_name.split(".")) and os.path.lexists(module_name)


def _import(module_name: str, spec: str) -> ModuleType:
    try:
        if _names_a_path(module_name):
            return _import_file(Path(module_name), spec)
        cwd = os.getcwd()
        if cwd not in sys.path:
            sys.path.insert(0, cwd)
            _ADDED.append((sys.path, cwd))
        return importlib.import_module(module_name)
    except CliError:
        raise
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            if os.path.isfile(module_name):  # (--tools batch.json)
                raise CliError(
                    f"--tools {spec}: {module_name!r} is a file, not a Python module; "
                    "name a module (my_tools) or a .py file (./my_tools.py)"
                ) from None
            raise CliError(
                f"--tools {spec}: no module named {module_name!r} (looked in the current directory and sys.path); "
                "run from the folder that holds it, add that folder to PYTHONPATH, "
                f"or name its file (--tools path/to/{module_name.rpartition('.')[2]}.py)"
            ) from None
        raise CliError(f"--tools {spec}: importing {module_name} failed: {_describe(err)}") from None
    except DshError as err:
        raise CliError(f"--tools {spec}: a tool in {module_name} is invalid: {_describe(err)}") from None
    except KeyboardInterrupt:
        raise  # Ctrl-C while importing interrupts the command
    except BaseException as err:  # noqa: BLE001 - any other import-time failure (SystemExit too) is a clear message
        raise CliError(f"--tools {spec}: importing {module_name} failed: {_describe(err)}") from None


def _import_file(path: Path, spec: str) -> ModuleType:
    if path.is_dir():
        package = path.resolve()
        fix = (
            f"it is the package {package.name}: run from {str(package.parent)!r} with --tools {package.name}, "
            "or name a .py file in it"
            if (package / "__init__.py").is_file() and package.name.isidentifier()
            else "name a .py file in it, or a module"
        )
        raise CliError(f"--tools {spec}: {str(path)!r} is a folder; {fix}")
    if not path.is_file():
        raise CliError(f"--tools {spec}: no such file {str(path)!r}")
    name = f"_dsh_tools_{path.stem}_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise CliError(f"--tools {spec}: cannot import {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    # Its folder first on sys.path while it runs, as `python FILE` has it,
    # so it imports the modules beside it; only then, so that none of them
    # stands in for one the command imports later (policies, executors).
    # Afterwards the folder is searched last (see _FolderFinder).
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        loader_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    if not any(type(finder) is _FolderFinder and finder.folder == folder for finder in sys.meta_path):
        finder = _FolderFinder(folder)
        sys.meta_path.append(finder)
        _ADDED.append((sys.meta_path, finder))
    return module


class _FolderFinder:
    """Finds a top-level module in a tools file's folder, last of all
    finders (at the end of ``sys.meta_path``, after an editable install's,
    which comes after ``sys.path``'s): a module of the folder a tool imports
    when it runs, unless something else provides that name."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if path is not None:  # a submodule: its package's own __path__ finds it
            return None
        return PathFinder.find_spec(fullname, [self.folder], target)


@contextlib.contextmanager
def loader_path_scope() -> Iterator[None]:
    """The life of one command for what the loader adds (see the module
    docstring): what it added while the block ran is taken off when the
    block ends, so that commands run one after another in one process
    (tests calling ``main()``) each start with the ``sys.path`` and
    ``sys.meta_path`` the process had, which never grow from one to the
    next. Without it (a caller of :func:`load_tool_source` of its own),
    what the loader adds stays, each folder once."""
    start = len(_ADDED)
    try:
        yield
    finally:
        while len(_ADDED) > start:
            where, entry = _ADDED.pop()
            with contextlib.suppress(ValueError):  # (the program took it off itself)
                where.remove(entry)


def load_tool_source(spec: str) -> ToolSource:
    """Import ``MODULE`` and find ``ATTR`` (see the module docstring)."""
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise CliError(f"--tools {spec!r}: name a module (MODULE or MODULE:ATTR)")
    module = _import(module_name, spec)
    if attr:
        target: object = module
        for part in attr.split("."):
            if not hasattr(target, part):
                raise CliError(f"--tools {spec}: {module_name} has no attribute {attr!r}")
            target = getattr(target, part)
        return ToolSource(spec, attr, target)
    for candidate in _DEFAULT_ATTRS:
        if hasattr(module, candidate):
            return ToolSource(spec, candidate, getattr(module, candidate))
    raise CliError(
        f"--tools {spec}: {module_name} has neither register(rt) nor TOOLS; name one with --tools {module_name}:ATTR"
    )


def _a(value: object) -> str:
    name = type(value).__qualname__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _definitions(value: object, spec: str, label: str, *, returned: bool = False) -> list[ToolDefinition]:
    """``value``, the attribute ``label`` (or, ``returned``, what the
    function ``label`` returned), as the definitions to register."""
    if isinstance(value, ToolDefinition):
        return [value]
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        items = list(value)
        for index, item in enumerate(items):
            if not isinstance(item, ToolDefinition):
                where = f"item {index} of what {label}() returned" if returned else f"{label}[{index}]"
                raise CliError(f"--tools {spec}: {where} is {_a(item)}, not a ToolDefinition")
        return items
    if returned:
        raise CliError(
            f"--tools {spec}: {label}() returned {_a(value)}; expected a ToolDefinition or a sequence of them"
        )
    raise CliError(
        f"--tools {spec}: {label} is {_a(value)}; expected register(rt), "
        "a ToolDefinition, a sequence of them, or a function returning one"
    )


def _call_style(fn: Callable[..., Any]) -> str:
    """``"factory"`` (no required argument), ``"tools"`` (wants
    ``rt.tools``) or ``"runtime"`` (wants the runtime)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return "runtime"
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    if (
        not positional
        or positional[0].kind is inspect.Parameter.VAR_POSITIONAL
        or positional[0].default is not inspect.Parameter.empty
    ):
        return "factory"
    first = positional[0]
    annotation = first.annotation
    shown = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    if "ToolsService" in shown:
        return "tools"
    if "ToolRuntime" in shown:
        return "runtime"
    return "tools" if first.name in _SERVICE_NAMES else "runtime"


def install_tools(source: ToolSource, rt: ToolRuntime) -> None:
    """Register ``source``'s tools into ``rt``; any failure (a
    ``SystemExit`` or another ``BaseException`` included, as at import) is
    a :class:`CliError` naming the source. ``KeyboardInterrupt`` propagates:
    Ctrl-C interrupts the command."""
    target = source.target
    label = source.label
    try:
        if callable(target) and not isinstance(target, ToolDefinition):
            style = _call_style(target)
            if style == "factory":
                definitions = _definitions(target(), source.spec, label, returned=True)
            else:
                target(rt.tools if style == "tools" else rt)
                return
        else:
            definitions = _definitions(target, source.spec, label)
        for definition in definitions:
            rt.tools.register(definition)
    except CliError:
        raise
    except DshError as err:
        raise CliError(f"--tools {source.spec}: cannot register the tools: {_describe(err)}") from None
    except AttributeError as err:
        hint = ""
        if "'ToolRuntime' object" in safe_str(err):
            hint = " (register(rt) gets the ToolRuntime; name its parameter `tools` to get rt.tools instead)"
        raise CliError(f"--tools {source.spec}: {label}(...) failed: {_describe(err)}{hint}") from None
    except KeyboardInterrupt:
        raise  # Ctrl-C while registering interrupts the command, as while importing
    except BaseException as err:  # noqa: BLE001 - a user module's failure (SystemExit too) is a clear message
        raise CliError(f"--tools {source.spec}: {label}(...) failed: {_describe(err)}") from None


def install_executor(name: str, rt: ToolRuntime) -> Any:
    """Install the executor ``name`` (``native`` keeps the runtime's own)
    and return it."""
    if name == "native":
        return rt.native_executor
    if name != "ptc":  # pragma: no cover - argparse restricts the choice
        raise CliError(f"--executor {name}: unknown executor (choose {', '.join(EXECUTORS)})")
    module = _import_by_name("executors.ptc", "--executor ptc", "the PTC executor is not installed")
    executor_class = getattr(module, "PtcExecutor", None)
    if executor_class is None:
        raise CliError("--executor ptc: the PTC executor is not available (executors.ptc has no PtcExecutor)")
    try:
        executor = executor_class()
        rt.tools.set_executor(executor)
    except Exception as err:  # noqa: BLE001
        raise CliError(f"--executor ptc: cannot start the PTC executor: {_describe(err)}") from None
    return executor


def install_timeout(rt: ToolRuntime) -> None:
    """Apply ``policies.timeout`` to ``rt``, after the tools and their
    policies (so it is the innermost ``tools/execute`` wrapper so far: under
    a retry policy, each attempt gets the tool's ``timeout_ms``), unless a
    ``--tools`` module applied it itself: one deadline per call, not two.
    Stopped with the runtime."""
    module = _import_by_name(
        "policies.timeout",
        "the timeout policy",
        "not installed",
        fix="; reinstall dsh-actors, or run with --no-timeout",
    )
    if not module.applied(rt):
        rt.use(module)


def terminal_prompt() -> Any:
    """``policies.approval``'s ``TerminalPrompt``, asking on stderr and
    reading the answer from stdin: the approval service of ``--approve
    prompt``. It stops waiting for an answer, and answers ``"cancelled"``,
    when the request's signal fires (the batch's abort: Ctrl-C)."""
    module = _import_by_name(
        "policies.approval",
        "the approval prompt",
        "not installed",
        fix="; reinstall dsh-actors, or run with --approve yes or --approve no",
    )
    return module.TerminalPrompt(output=sys.stderr)


def _import_by_name(module_name: str, label: str, missing: str, *, fix: str = "") -> ModuleType:
    """Import ``module_name`` (of ``executors/`` or ``policies/``: by name,
    when used, as the core never imports them statically), or fail with a
    one-line :class:`CliError` starting ``label: `` and ending ``fix``."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name in (module_name.partition(".")[0], module_name):
            raise CliError(f"{label}: {missing} (no module {module_name}){fix}") from None
        raise CliError(f"{label}: importing {module_name} failed: {_describe(err)}{fix}") from None
    except Exception as err:  # noqa: BLE001
        raise CliError(f"{label}: importing {module_name} failed: {_describe(err)}{fix}") from None
