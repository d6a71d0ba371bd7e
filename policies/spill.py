"""The spill policy: oversized text results go to a file; the model gets a
head/tail preview and the file's path.

``rt.use(policies.spill, directory=path, max_inline_bytes=16384)``

Config (keyword, validated when applied):

``directory``
    Where spill files go (``str`` or path-like; created on first use, mode
    0o700). Trusted: it is the one path this policy takes from outside.
``max_inline_bytes``
    The cap, in UTF-8 bytes, of the model-facing text of one result
    (default 16384). It must leave room for the locator line and at least
    :data:`MIN_PREVIEW_BYTES` of preview; ``apply`` says how much it needs.
``ptc_log``
    Also bound the durable ``tools/ptc-dispatch-log`` copy (default True).

Applied once per runtime: a second application, while the first is not
disposed, is refused (it would spill the first one's preview, whose file
the first one then removes as a file its call's result does not show).

**Post-execute.** A listener, prepended (outermost), that calls ``next()``
first and then looks at the decision the rest of the chain made. If the
effective content (the decision's replacement content, else the result's)
is all text and larger than the cap, the text is written to a fresh file and
the decision becomes ``Accept(content=[preview])``, keeping the decision's
``additional_contexts``. The preview is the head and the tail of the text
(cut on character boundaries) around a locator line naming the byte counts
and the file's path; its UTF-8 size never exceeds the cap.

Left alone: nested calls (``execution.parent`` is set: their content goes
to a program, not the model), value replacements (``Accept(value=...)``)
and ``Block`` decisions, content with any non-text block (images), and
anything at or under the cap. Outcomes that never reach post-execute (a
throwing wrapper, a pre-aborted call) are never seen, so never spilled;
failures that do pass through it (a tool error with a huge message) are
bounded like successes. If writing fails in any way, the inline result is
kept and a warning is logged (loguru).

**Replaced outcomes.** What the pipeline decides after post-execute can
replace the preview: the cancellation replacement (a success that settled
after the abort becomes ``ABORTED``), a ``finalize_content`` hook, an outer
post-execute listener that drops or retries what this one returned. A
``tools/result`` listener therefore looks at each call's final result, and
a file of the call whose path its content does not show is removed (the
model never learns of it). A call this policy did not spill costs that
listener one dictionary test.

**Files.** ``<directory>/<agent folder>/<call id>-<random>.txt``. The agent
folder is derived from the agent's path (and its session file, when it has
one), ``_no-agent`` without one. Ids come from the model and the host, so
they are never used as paths: each is reduced to ``[A-Za-z0-9_.-]``
(leading dots removed), truncated, and the agent folder carries a hash of
the raw id so distinct agents never share a folder by accident. The folder
is created 0o700 and opened with ``O_NOFOLLOW`` relative to the directory
(a symlink planted there fails the write; a folder owned by somebody else
or open to group/others is refused); the file is created with
``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0o600, relative to the folder's
descriptor, so nothing can redirect the write elsewhere.

**PTC dispatch log.** A ``tools/ptc-dispatch-log`` listener bounds the
durable copy of each ``run_code`` sub-call's content the same way (files
under the dispatching agent's folder, named after the sub-call id). The
program and the model are unaffected.

Threads: the post-execute listener runs on the thread that finalizes the
call (a batch's executor thread: the write holds up only that batch), the
ptc-dispatch-log listener on the executor actor that commits the sub-call. Each does
one small file write; the ``tools/result`` listener (the finalizing thread)
at most removes the files of its own call. No thread is started.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import stat
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final

from loguru import logger

from dsh_actors import (
    Accept,
    Agent,
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
    TextBlock,
    ToolExecution,
    ToolRuntime,
)

from ._common import (
    UNSET,
    ContentBlock,
    ToolExecutionResult,
    Undo,
    check_bool,
    check_no_unknown,
    check_runtime,
    listens,
)

__all__ = ["MIN_PREVIEW_BYTES", "SpillPolicy", "apply", "preview"]

_POLICY = "policies.spill"

#: The least preview (head plus tail) a cap must leave beside the locator.
MIN_PREVIEW_BYTES: Final = 64

_AGENT_CHARS: Final = 64
_CALL_CHARS: Final = 48
_SUFFIX_CHARS: Final = 8  # random hex
_HASH_CHARS: Final = 8
_NO_AGENT: Final = "_no-agent"
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_.-]")
_DIGITS: Final = 20  # bytes counts up to 2**64 - 1

_OPEN_DIR: Final = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_CREATE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _safe_name(raw: str, limit: int) -> str:
    name = _UNSAFE.sub("_", raw).lstrip(".")[:limit]
    return name or "_"


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]


def agent_folder(agent: Agent | None) -> str:
    """The folder name of ``agent``'s spill files (never a path: one safe
    component). The hash covers the exact chain of ids and the session's
    file, so agents whose ids merely look alike get distinct folders."""
    if agent is None:
        return _NO_AGENT
    session = agent.session
    where = getattr(session, "path", None) if session is not None else None
    ids = [a.id for a in agent.chain()]
    key = repr((ids, None if where is None else os.fspath(where)))
    return f"{_safe_name(agent.path, _AGENT_CHARS)}-{_digest(key)}"


def _locator(omitted: int, total: int, path: str) -> str:
    return f"\n[... {omitted} bytes omitted; the full output ({total} bytes) is in {path} ...]\n"


def preview(text: str, path: str, cap: int) -> str:
    """``text``'s head and tail around a locator naming ``path``, at most
    ``cap`` UTF-8 bytes (cut on character boundaries). Raises ValueError if
    the locator alone does not fit."""
    data = text.encode("utf-8")
    total = len(data)
    # The locator with ``omitted = total`` is the longest it can be.
    budget = cap - len(_locator(total, total, path).encode("utf-8"))
    if budget < 0:
        raise ValueError(f"a cap of {cap} bytes cannot hold the spill locator for {path}")
    head = data[: budget // 2 + budget % 2].decode("utf-8", "ignore")
    head_bytes = len(head.encode("utf-8"))
    tail_budget = min(budget - head_bytes, total - head_bytes)  # the tail never overlaps the head
    tail = data[total - tail_budget :].decode("utf-8", "ignore") if tail_budget > 0 else ""
    omitted = total - head_bytes - len(tail.encode("utf-8"))
    return head + _locator(omitted, total, path) + tail


def _text_of(content: object) -> str | None:
    """The text of content made only of text blocks, else ``None``."""
    if not isinstance(content, (list, tuple)) or not content:
        return None
    if not all(type(block) is TextBlock for block in content):
        return None
    return "\n".join(block.text for block in content)


def _utf8_size(content: Sequence[TextBlock]) -> int:
    # surrogatepass: a lone surrogate cannot be written; it fails the write below, not this count.
    return sum(len(block.text.encode("utf-8", "surrogatepass")) for block in content)


class SpillPolicy:
    """The listeners and the file store of one applied spill policy."""

    def __init__(self, directory: str, max_inline_bytes: int) -> None:
        self.directory = directory
        self.max_inline_bytes = max_inline_bytes
        # The files written for calls whose tools/result has not come yet:
        # (folder, file, path) by the call's token.
        self._lock = threading.Lock()
        self._written: dict[object, list[tuple[str, str, str]]] = {}

    # -- files ----------------------------------------------------------------

    def _open_folder(self, agent: Agent | None) -> tuple[int, str]:
        """A descriptor of ``agent``'s folder (created if needed) and its name."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        base = os.open(self.directory, _OPEN_DIR)
        try:
            name = agent_folder(agent)
            try:
                os.mkdir(name, 0o700, dir_fd=base)
            except FileExistsError:
                pass
            folder = os.open(name, _OPEN_DIR | _NOFOLLOW, dir_fd=base)
        finally:
            os.close(base)
        try:
            info = os.fstat(folder)
            if not stat.S_ISDIR(info.st_mode):
                raise OSError(f"{name} is not a directory")
            getuid = getattr(os, "getuid", None)
            if getuid is not None and info.st_uid != getuid():
                raise PermissionError(f"{name} is owned by another user")
            if info.st_mode & 0o077:
                raise PermissionError(f"{name} is open to group or others (mode {oct(info.st_mode & 0o777)})")
        except BaseException:
            os.close(folder)
            raise
        return folder, name

    def write(self, agent: Agent | None, call_id: str, text: str) -> tuple[str, str]:
        """Write ``text`` to a new file; return its folder's and its own
        name. Raises on any failure."""
        data = text.encode("utf-8")
        folder, folder_name = self._open_folder(agent)
        try:
            stem = _safe_name(call_id, _CALL_CHARS)
            for _ in range(8):
                file_name = f"{stem}-{secrets.token_hex(_SUFFIX_CHARS // 2)}.txt"
                try:
                    fd = os.open(file_name, _CREATE, 0o600, dir_fd=folder)
                except FileExistsError:
                    continue
                break
            else:
                raise FileExistsError(f"no free spill file name for {stem}")
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
            except BaseException:
                try:
                    os.unlink(file_name, dir_fd=folder)
                except OSError:
                    pass
                raise
            finally:
                os.close(fd)
        finally:
            os.close(folder)
        return folder_name, file_name

    def remove(self, folder_name: str, file_name: str) -> None:
        """Remove a file :meth:`write` wrote (through the folder's
        descriptor, as it was written). Raises on any failure."""
        base = os.open(self.directory, _OPEN_DIR)
        try:
            folder = os.open(folder_name, _OPEN_DIR | _NOFOLLOW, dir_fd=base)
        finally:
            os.close(base)
        try:
            os.unlink(file_name, dir_fd=folder)
        finally:
            os.close(folder)

    def bound(
        self, content: object, agent: Agent | None, call_id: str, what: str
    ) -> tuple[list[ContentBlock], tuple[str, str, str]] | None:
        """The preview content replacing ``content`` and the file it names
        (folder, file, path), or ``None`` to keep it (not all text, small
        enough, or the write failed)."""
        text = _text_of(content)
        if text is None:
            return None
        assert isinstance(content, (list, tuple))
        if _utf8_size(content) <= self.max_inline_bytes:
            return None
        written: tuple[str, str] | None = None
        try:
            written = self.write(agent, call_id, text)
            path = os.path.join(self.directory, *written)
            return [TextBlock(preview(text, path, self.max_inline_bytes))], (*written, path)
        except Exception as exc:  # noqa: BLE001 - any failure keeps the inline result
            logger.warning("{}: could not spill {} of call {!r}; keeping it inline: {}", _POLICY, what, call_id, exc)
            if written is not None:  # (no preview names it)
                self._discard(*written)
            return None

    def _discard(self, folder_name: str, file_name: str) -> None:
        try:
            self.remove(folder_name, file_name)
        except FileNotFoundError:
            pass
        except Exception as exc:  # noqa: BLE001 - an orphan is logged, never raised
            logger.warning("{}: could not remove the unused spill file {}: {}", _POLICY, file_name, exc)

    # -- listeners ----------------------------------------------------------------

    def post_execute(self, execution: ToolExecution, result: ToolExecutionResult, next_: Callable[[], Any]) -> Any:
        """The ``tools/post-execute`` listener (the finalizing thread)."""
        decision = next_()
        if execution.parent is not None or type(decision) is not Accept or decision.value is not UNSET:
            return decision
        content = result.content if decision.content is None else decision.content
        bounded = self.bound(content, execution.agent, execution.call_id, "the result")
        if bounded is None:
            return decision
        replacement, file = bounded
        with self._lock:
            self._written.setdefault(execution.token, []).append(file)
        return Accept(content=tuple(replacement), additional_contexts=decision.additional_contexts)

    def result(self, execution: ToolExecution, result: Any) -> None:
        """The ``tools/result`` listener (the finalizing thread): remove the
        files of this call that its final content does not show (the
        cancellation or a later hook replaced the preview)."""
        if not self._written:  # (the common case: nothing spilled is pending)
            return
        with self._lock:
            files = self._written.pop(execution.token, None)
        if files is None:
            return
        content = getattr(result, "content", ())
        shown = [block.text for block in content if type(block) is TextBlock]
        for folder_name, file_name, path in files:
            if not any(path in text for text in shown):
                self._discard(folder_name, file_name)

    def ptc_dispatch_log(self, dispatch: Any, next_: Callable[[], Any]) -> Any:
        """The ``tools/ptc-dispatch-log`` listener (the sub-call's executor actor):
        ``dispatch`` has ``.agent``, ``.sub_call_id``, ``.content``."""
        content = next_()
        call_id = getattr(dispatch, "sub_call_id", None)
        if type(call_id) is not str:
            return content
        agent = getattr(dispatch, "agent", None)
        bounded = self.bound(content, agent if isinstance(agent, Agent) else None, call_id, "the dispatch log copy")
        return content if bounded is None else bounded[0]


def _check_directory(directory: object) -> str:
    if isinstance(directory, bytes) or not isinstance(directory, (str, os.PathLike)):
        raise InvalidTypeError(f"{_POLICY}: directory must be a str or a path, got {directory!r}")
    path = os.fspath(directory)
    if not isinstance(path, str) or not path:
        raise InvalidTypeError(f"{_POLICY}: directory must be a non-empty str path, got {directory!r}")
    path = os.path.abspath(path)
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidValueError(
            f"{_POLICY}: directory {path!r} is not valid UTF-8 (it is shown to the model)"
        ) from None
    if os.path.exists(path) and not os.path.isdir(path):
        raise InvalidValueError(f"{_POLICY}: directory {path!r} exists and is not a directory")
    return path


def required_cap(directory: str) -> int:
    """The least ``max_inline_bytes`` that fits the longest possible
    locator for ``directory`` plus :data:`MIN_PREVIEW_BYTES`."""
    longest = os.path.join(
        directory,
        "x" * (_AGENT_CHARS + 1 + _HASH_CHARS),
        "x" * (_CALL_CHARS + 1 + _SUFFIX_CHARS) + ".txt",
    )
    biggest = 10**_DIGITS - 1
    return len(_locator(biggest, biggest, longest).encode("utf-8")) + MIN_PREVIEW_BYTES


def apply(
    rt: ToolRuntime,
    /,
    *,
    directory: str | os.PathLike[str] | None = None,
    max_inline_bytes: int = 16384,
    ptc_log: bool = True,
    **unknown: Any,
) -> Callable[[], None]:
    """Install the spill listeners on ``rt``; return their disposer."""
    check_runtime(_POLICY, rt)
    check_no_unknown(_POLICY, unknown, "directory", "max_inline_bytes", "ptc_log")
    if directory is None:
        raise InvalidTypeError(f"{_POLICY}: directory= is required (where spill files go)")
    path = _check_directory(directory)
    if type(max_inline_bytes) is not int or max_inline_bytes < 1:
        raise InvalidValueError(f"{_POLICY}: max_inline_bytes must be a positive integer, got {max_inline_bytes!r}")
    need = required_cap(path)
    if max_inline_bytes < need:
        raise InvalidValueError(
            f"{_POLICY}: max_inline_bytes={max_inline_bytes} cannot hold a preview and the spill locator "
            f"for directory {path!r}; it needs at least {need}"
        )
    check_bool(_POLICY, "ptc_log", ptc_log)
    if listens(rt, "tools/post-execute", SpillPolicy):
        raise InvalidStateError(
            f"{_POLICY}: it is applied to this runtime already (a second would spill the first one's preview "
            "and remove the file with the full output); dispose that one first to change its options"
        )
    policy = SpillPolicy(path, max_inline_bytes)
    undo = Undo()
    undo.add(rt.events.on("tools/post-execute", policy.post_execute, prepend=True))
    undo.add(rt.events.on("tools/result", policy.result))
    if ptc_log:
        undo.add(rt.events.on("tools/ptc-dispatch-log", policy.ptc_dispatch_log, prepend=True))
    return undo
