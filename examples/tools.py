"""A small, realistic tool module: the tools a coding agent needs.

``read_file``, ``search_text``, ``write_file`` and ``run_shell``, all
confined to one root folder (``$DSH_EXAMPLES_ROOT``, else the current
directory; a path that escapes it is refused), and guarded by two policies:

* a **guard** refuses ``run_shell`` commands that match a deny list
  (:data:`DENIED_COMMANDS`: ``rm -rf``, ``sudo``, piping a download into a
  shell, ...); nothing a listener does can turn that denial into permission;
* a **pre-execute listener** answers ``Ask`` for a ``write_file`` outside
  the ``scratch/`` subfolder, so the write runs only if the approval service
  (``rt.approvals.set(fn)``, or ``dsh-actors run --approve``) allows it.

Each tool is a typed function made a tool by ``@tool``: its docstring is
the description, its hints the parameters' and the value's JSON Schema,
and pydantic-core validates both. Each tool presents itself with a card
(SPEC "Tool-presentation UI vocabulary"): ``read`` for a read, ``search`` for a search, ``diff`` for a
write, ``terminal`` for a shell command. The cards are built from the
result's logged ``meta`` (``presentation_meta``), so ``dsh-actors replay``
draws them again from the session log alone.

Use it from code::

    with ToolRuntime() as rt:
        examples.tools.register(rt, root="/path/to/project")

or from the command line::

    dsh-actors run examples/batch.json --tools examples.tools
"""

from __future__ import annotations

import os
import re
import signal as signals
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from typing_extensions import TypedDict  # pydantic reads a TypedDict from here before Python 3.12

from dsh_actors import (
    Agent,
    Ask,
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    ReadFileLine,
    ReadResultView,
    SearchResultView,
    TerminalCallView,
    TerminalResultView,
    ToolDefinition,
    ToolExecution,
    ToolRunContext,
    ToolRuntime,
    text,
    tool,
)
from dsh_actors.presentation import SearchFileMatches, SearchMatchLine

__all__ = [
    "DENIED_COMMANDS",
    "ROOT_ENV",
    "SCRATCH",
    "build_tools",
    "install_policies",
    "register",
    "resolve_root",
]

ROOT_ENV: Final = "DSH_EXAMPLES_ROOT"
"""The environment variable naming the root folder (default: the current
directory)."""

SCRATCH: Final = "scratch"
"""Writes under ``<root>/scratch/`` need no approval."""

DENIED_COMMANDS: Final[tuple[tuple[str, str], ...]] = (
    (r"\brm\s+-[a-zA-Z]*[rf]", "rm -r/-f"),
    (r"\bsudo\b", "sudo"),
    (r"\b(curl|wget)\b[^|]*\|\s*(ba|z)?sh\b", "piping a download into a shell"),
    (r"\bmkfs(\.\w+)?\b", "mkfs"),
    (r"\bdd\b[^|]*\bof=", "dd of="),
    (r":\(\)\s*\{", "a fork bomb"),
    (r"\b(shutdown|reboot|halt|poweroff)\b", "shutting the machine down"),
    (r"\bchmod\s+(-R\s+)?777\b", "chmod 777"),
    (r"\bgit\s+push\b[^;&|]*--force\b", "git push --force"),
)
"""``(regular expression, what it is)``: a ``run_shell`` command matching
any of them is refused by the guard."""

MAX_READ_LINES: Final = 2000
MAX_FILE_BYTES: Final = 4 * 1024 * 1024
MAX_SEARCH_RESULTS: Final = 1000
MAX_OUTPUT_BYTES: Final = 64 * 1024
MAX_DIFF_TEXT: Final = 256 * 1024
DEFAULT_SHELL_TIMEOUT_MS: Final = 10_000
MAX_SHELL_TIMEOUT_MS: Final = 120_000
_SKIPPED_DIRS: Final = frozenset(
    {".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache", ".pytest_cache"}
)
_LANGS: Final = {
    ".py": "python", ".md": "markdown", ".json": "json", ".toml": "toml", ".js": "javascript",
    ".ts": "typescript", ".sh": "bash", ".rs": "rust", ".go": "go", ".c": "c", ".h": "c",
    ".yml": "yaml", ".yaml": "yaml", ".html": "html", ".css": "css", ".txt": "text",
}  # fmt: skip


# --------------------------------------------------------------------------
# The root folder
# --------------------------------------------------------------------------


def resolve_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The root folder: ``root``, else ``$DSH_EXAMPLES_ROOT``, else the
    current directory; resolved, and required to be a directory."""
    chosen = Path(root if root is not None else os.environ.get(ROOT_ENV) or os.getcwd()).resolve()
    if not chosen.is_dir():
        raise NotADirectoryError(f"the examples root {str(chosen)!r} is not a directory")
    return chosen


def _confine(root: Path, path: str) -> Path:
    """``path`` (relative to ``root``, or absolute inside it) resolved, with
    symlinks followed; refuses anything outside ``root``."""
    if "\0" in path:
        raise ValueError("a path cannot contain a NUL character")
    candidate = Path(path)
    resolved = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if resolved != root and root not in resolved.parents:
        raise PermissionError(f"path {path!r} is outside the root folder")
    return resolved


def _shown_path(root: Path, resolved: Path) -> str:
    relative = resolved.relative_to(root).as_posix()
    return relative or "."


def _in_scratch(root: Path, path: str) -> bool:
    try:
        resolved = _confine(root, path)
    except (PermissionError, ValueError, OSError):
        return True  # the body refuses it anyway; nothing to approve
    scratch = root / SCRATCH
    return resolved == scratch or scratch in resolved.parents


def _read_text(path: Path) -> str:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        raise ValueError("binary file (contains NUL bytes)")
    return data.decode("utf-8", errors="replace")


# --------------------------------------------------------------------------
# What the four tools share: the values' shapes, the logged meta
# --------------------------------------------------------------------------


class NumberedLine(TypedDict):
    number: int
    text: str


class ReadResult(TypedDict):
    path: str
    offset: int
    total_lines: int
    lines: list[NumberedLine]


class MatchLine(TypedDict):
    line: int
    text: str


class FileMatches(TypedDict):
    path: str
    lines: list[MatchLine]


class SearchResult(TypedDict):
    pattern: str
    total: int
    truncated: bool
    matches: list[FileMatches]


class WriteResult(TypedDict):
    path: str
    created: bool
    bytes: int
    old_text: str | None
    new_text: str | None


class ShellResult(TypedDict):
    command: str
    output: str
    exit_code: int | None
    signal: str | None
    timed_out: bool


def _whole_value(args: Any, value: Any) -> Any:
    return value


def _keys(*keys: str) -> Callable[[Any, Any], Any]:
    """A ``presentation_meta`` that logs only ``keys`` of the value."""

    def presentation_meta(args: Any, value: Any) -> Any:
        return {key: value[key] for key in keys}

    return presentation_meta


def _meta(result: Any) -> Mapping[str, Any] | None:
    """The logged ``meta`` of a successful result; ``None`` for an error
    (or a result logged without one): the generic card shows it."""
    meta = result.meta
    return None if result.is_error or not isinstance(meta, Mapping) else meta


# --------------------------------------------------------------------------
# read_file
# --------------------------------------------------------------------------


def _read_tool(root: Path) -> ToolDefinition:
    def render(args: Any, value: Any) -> list[Any]:
        lines = value["lines"]
        if not lines:
            return [text(f"{value['path']}: no lines at offset {value['offset']} ({value['total_lines']} lines)")]
        last = lines[-1]["number"]
        body = "\n".join(f"{line['number']:>6}\t{line['text']}" for line in lines)
        return [text(f"{value['path']} (lines {value['offset']}-{last} of {value['total_lines']})\n{body}")]

    def present_call(args: Any) -> GenericCallView:
        return GenericCallView(
            title=f"read {args['path']}", kind="read", locations=(FileLocation(args["path"], args.get("offset")),)
        )

    def present_result(args: Any, result: Any) -> ReadResultView | None:
        meta = _meta(result)
        if meta is None:
            return None
        lines = tuple(ReadFileLine(line["number"], line["text"]) for line in meta["lines"])
        return ReadResultView(
            title=f"read {meta['path']}",
            path=meta["path"],
            offset=meta["offset"],
            lines=lines,
            total_lines=meta["total_lines"],
            lang=_LANGS.get(Path(meta["path"]).suffix.lower()),
            content="\n".join(line.text for line in lines),
        )

    @tool(
        concurrency_safe=True,
        render=render,
        presentation_meta=_whole_value,
        present_call=present_call,
        present_result=present_result,
    )
    def read_file(path: str, offset: int = 1, limit: int = 200) -> ReadResult:
        """Read a text file under the project root. Returns numbered lines; use offset
        (1-based) and limit to page through long files.

        Args:
            path: File path, relative to the project root.
            offset: First line to return (1-based).
            limit: Maximum lines to return (at most 2000).
        """
        resolved = _confine(root, path)
        if not resolved.is_file():
            raise FileNotFoundError(f"no such file: {path}")
        if offset < 1 or not 1 <= limit <= MAX_READ_LINES:
            raise ValueError(f"offset must be at least 1 and limit between 1 and {MAX_READ_LINES}")
        lines = _read_text(resolved).splitlines()
        window = lines[offset - 1 : offset - 1 + limit]
        return {
            "path": _shown_path(root, resolved),
            "offset": offset,
            "total_lines": len(lines),
            "lines": [{"number": offset + i, "text": line} for i, line in enumerate(window)],
        }

    return read_file


# --------------------------------------------------------------------------
# search_text
# --------------------------------------------------------------------------


def _walk(start: Path) -> Iterator[Path]:
    if start.is_file():
        yield start
        return
    for folder, dirs, files in os.walk(start):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
        for name in sorted(files):
            yield Path(folder) / name


def _search_tool(root: Path) -> ToolDefinition:
    def render(args: Any, value: Any) -> list[Any]:
        if not value["total"]:
            return [text(f"no matches for {value['pattern']!r}")]
        rows = [f"{m['path']}:{line['line']}:{line['text']}" for m in value["matches"] for line in m["lines"]]
        if value["truncated"]:
            rows.append(f"[{value['total'] - len(rows)} more matches not shown]")
        return [text("\n".join(rows))]

    def present_call(args: Any) -> GenericCallView:
        return GenericCallView(title=f"search {args['pattern']!r} in {args.get('path', '.')}", kind="search")

    def present_result(args: Any, result: Any) -> SearchResultView | None:
        meta = _meta(result)
        if meta is None:
            return None
        return SearchResultView(
            shape="matches",
            title=f"search {meta['pattern']!r}",
            truncated=meta["truncated"],
            total=meta["total"],
            matches=tuple(
                SearchFileMatches(m["path"], tuple(SearchMatchLine(x["line"], x["text"]) for x in m["lines"]))
                for m in meta["matches"]
            ),
        )

    @tool(
        concurrency_safe=True,
        render=render,
        presentation_meta=_whole_value,
        present_call=present_call,
        present_result=present_result,
    )
    def search_text(pattern: str, ctx: ToolRunContext, path: str = ".", max_results: int = 100) -> SearchResult:
        """Search the text files under a folder of the project for a regular expression
        (Python syntax). Returns matching lines grouped by file.

        Args:
            pattern: A regular expression.
            path: Folder or file to search, relative to the project root.
            max_results: Maximum matching lines to return.
        """
        try:
            compiled = re.compile(pattern)
        except re.error as err:
            raise ValueError(f"invalid regular expression: {err}") from None
        start = _confine(root, path)
        if not start.exists():
            raise FileNotFoundError(f"no such file or folder: {path}")
        if not 1 <= max_results <= MAX_SEARCH_RESULTS:
            raise ValueError(f"max_results must be between 1 and {MAX_SEARCH_RESULTS}")
        matches: list[FileMatches] = []
        total = 0
        for file in _walk(start):
            if ctx.signal.aborted:
                break  # the pipeline reports the abort; stop walking
            resolved = file.resolve()
            if root not in resolved.parents:
                continue  # a symlink out of the root folder
            try:
                lines = _read_text(resolved).splitlines()
            except (OSError, ValueError):
                continue  # unreadable, binary or huge: not text to search
            found: list[MatchLine] = [
                {"line": i, "text": line} for i, line in enumerate(lines, 1) if compiled.search(line)
            ]
            if not found:
                continue
            room = max_results - min(total, max_results)
            total += len(found)
            if room:
                matches.append({"path": _shown_path(root, resolved), "lines": found[:room]})
        return {"pattern": pattern, "matches": matches, "total": total, "truncated": total > max_results}

    return search_text


# --------------------------------------------------------------------------
# write_file
# --------------------------------------------------------------------------


def _write_tool(root: Path) -> ToolDefinition:
    def render(args: Any, value: Any) -> list[Any]:
        verb = "created" if value["created"] else "updated"
        return [text(f"{verb} {value['path']} ({value['bytes']} bytes)")]

    def present_call(args: Any) -> GenericCallView:
        # The before-image is unknown until the body reads it: a pure
        # presenter cannot look at the disk, so the pending card is generic.
        return GenericCallView(title=f"write {args['path']}", kind="edit", locations=(FileLocation(args["path"]),))

    def present_result(args: Any, result: Any) -> DiffResultView | None:
        meta = _meta(result)
        if meta is None or meta["new_text"] is None:
            return None  # too large to diff inline: the generic card shows the summary
        return DiffResultView(
            diffs=(FileDiff(meta["path"], None if meta["created"] else meta["old_text"], meta["new_text"]),),
        )

    @tool(
        render=render,
        presentation_meta=_keys("path", "created", "old_text", "new_text"),
        present_call=present_call,
        present_result=present_result,
    )
    def write_file(path: str, content: str) -> WriteResult:
        """Write a text file under the project root (created with its folders if missing,
        replaced otherwise). Writes outside scratch/ need the user's approval.

        Args:
            path: File path, relative to the project root.
            content: The complete new text of the file.
        """
        resolved = _confine(root, path)
        if resolved.is_dir():
            raise IsADirectoryError(f"{path} is a folder")
        old = _read_text(resolved) if resolved.exists() else None
        resolved.parent.mkdir(parents=True, exist_ok=True)
        resolved.write_text(content, encoding="utf-8")
        small = max(len(old or ""), len(content)) <= MAX_DIFF_TEXT
        return {
            "path": _shown_path(root, resolved),
            "created": old is None,
            "bytes": len(content.encode("utf-8")),
            "old_text": old if small else None,
            "new_text": content if small else None,
        }

    return write_file


# --------------------------------------------------------------------------
# run_shell
# --------------------------------------------------------------------------


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the shell and everything it started (its own process group)."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signals.SIGKILL)
        else:  # pragma: no cover - not POSIX
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def _clip(output: str) -> str:
    data = output.encode("utf-8")
    if len(data) <= MAX_OUTPUT_BYTES:
        return output
    half = MAX_OUTPUT_BYTES // 2
    head = data[:half].decode("utf-8", errors="ignore")
    tail = data[-half:].decode("utf-8", errors="ignore")
    return f"{head}\n[... {len(data) - 2 * half} bytes omitted ...]\n{tail}"


def _signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _shell_tool(root: Path) -> ToolDefinition:
    def render(args: Any, value: Any) -> list[Any]:
        status = f"exit code {value['exit_code']}" if value["signal"] is None else f"killed by {value['signal']}"
        output = value["output"].rstrip("\n")
        return [text(f"{output}\n[{status}]" if output else f"[{status}]")]

    def present_call(args: Any) -> TerminalCallView:
        return TerminalCallView(title=args["command"])

    def present_result(args: Any, result: Any) -> TerminalResultView | None:
        meta = _meta(result)
        if meta is None:
            return None
        return TerminalResultView(output=meta["output"], exit_code=meta["exit_code"], signal=meta["signal"])

    @tool(
        timeout_ms=MAX_SHELL_TIMEOUT_MS + 5_000,
        render=render,
        presentation_meta=_keys("output", "exit_code", "signal"),
        present_call=present_call,
        present_result=present_result,
    )
    def run_shell(command: str, ctx: ToolRunContext, timeout_ms: int = DEFAULT_SHELL_TIMEOUT_MS) -> ShellResult:
        """Run a shell command (/bin/sh) in the project root and return its combined
        stdout and stderr and its exit code. Destructive commands are refused.

        Args:
            command: The shell command line.
            timeout_ms: Kill the command after this many milliseconds (at most 120000).
        """
        if not 1 <= timeout_ms <= MAX_SHELL_TIMEOUT_MS:
            raise ValueError(f"timeout_ms must be between 1 and {MAX_SHELL_TIMEOUT_MS}")
        proc = subprocess.Popen(  # noqa: S602 - a shell tool runs shell commands; the guard screens them
            command,
            shell=True,
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        # Cooperative cancellation: an abort (or the timeout policy's
        # deadline) kills the process group, and communicate() returns.
        unsubscribe = ctx.signal.add_callback(lambda _signal: _kill(proc))
        timed_out = False
        try:
            try:
                data, _ = proc.communicate(timeout=timeout_ms / 1000)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill(proc)
                data, _ = proc.communicate()
        finally:
            unsubscribe()
        code = proc.returncode
        output = _clip(data.decode("utf-8", errors="replace"))
        if timed_out:
            output += f"\n[timed out after {timeout_ms} ms]"
        return {
            "command": command,
            "output": output,
            "exit_code": code if code >= 0 else None,
            "signal": _signal_name(-code) if code < 0 else None,
            "timed_out": timed_out,
        }

    return run_shell


# --------------------------------------------------------------------------
# Registration and policies
# --------------------------------------------------------------------------


def build_tools(root: str | os.PathLike[str] | None = None) -> list[ToolDefinition]:
    """The four tool definitions, confined to ``root`` (see :func:`resolve_root`)."""
    folder = resolve_root(root)
    return [_read_tool(folder), _search_tool(folder), _write_tool(folder), _shell_tool(folder)]


def install_policies(
    rt: ToolRuntime,
    root: str | os.PathLike[str] | None = None,
    denied: Sequence[tuple[str, str]] = DENIED_COMMANDS,
    *,
    agent: Agent | None = None,
) -> Callable[[], None]:
    """Install the shell deny-list guard and the write-approval listener
    (for every agent, or only for ``agent``'s scope); returns the function
    that removes both. The guard and the listener run on the executor
    thread that prepares a call; both are pure and quick."""
    folder = resolve_root(root)
    compiled = [(re.compile(pattern), label) for pattern, label in denied]

    def shell_guard(execution: ToolExecution) -> str | None:
        args = execution.arguments
        if execution.name != "run_shell" or not isinstance(args, Mapping):
            return None
        command = args.get("command")
        if not isinstance(command, str):
            return None
        for pattern, label in compiled:
            if pattern.search(command):
                return f"command refused by the shell deny list ({label}): {command}"
        return None

    def ask_before_writes_outside_scratch(execution: ToolExecution, next: Callable[[], Any]) -> Any:
        args = execution.arguments
        if execution.name == "write_file" and isinstance(args, Mapping):
            path = args.get("path")
            if isinstance(path, str) and not _in_scratch(folder, path):
                return Ask(
                    reason=f"write outside {SCRATCH}/: {path}",
                    display_reason={"en": f"Allow writing {path} (outside {SCRATCH}/)?"},
                )
        return next()

    undo_guard = rt.tools.scope(agent).guard(shell_guard)
    undo_listener = rt.events.on("tools/pre-execute", ask_before_writes_outside_scratch, scope=agent)
    lock = threading.Lock()

    def remove() -> None:
        with lock:
            undo_listener()
            undo_guard()

    return remove


def register(
    rt: ToolRuntime, *, root: str | os.PathLike[str] | None = None, agent: Agent | None = None
) -> Callable[[], None]:
    """Register the four tools and their policies in ``rt`` (globally, or
    in ``agent``'s scope only); returns the function that removes them all.
    ``root`` defaults to ``$DSH_EXAMPLES_ROOT``, else the current directory."""
    folder = resolve_root(root)
    tools = rt.tools.scope(agent)
    undo: list[Callable[[], None]] = []
    try:
        for definition in build_tools(folder):
            undo.append(tools.register(definition))
        undo.append(install_policies(rt, folder, agent=agent))
    except BaseException:
        for fn in reversed(undo):
            fn()
        raise

    def remove() -> None:
        for fn in reversed(undo):
            fn()

    return remove
