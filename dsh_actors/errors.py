"""One error root, its codes, and messages built from structured fields.

Every error the runtime raises on purpose is a :class:`DshError`. Each
subclass stands for one cause and builds its message in ``__init__`` from the
fields it keeps, so code that handles an error reads the fields, never parses
the message. ``code`` is a class attribute (an :class:`ErrorCode`); the only
class with two codes is :class:`AbortError`, whose instance code says whether
the tool body had been invoked.
"""

from __future__ import annotations

import errno
import os
import traceback
import unicodedata
from collections.abc import Sequence
from enum import Enum
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from loguru import logger

if TYPE_CHECKING:  # pragma: no cover
    from .model import ToolBatchResult, ToolCallResult

__all__ = [
    "AbortError",
    "CodeRunFailedError",
    "DshError",
    "ErrorCode",
    "JsonSchemaError",
    "LosslessJsonError",
    "RegistrationError",
    "ToolArgsError",
    "ToolBatchExecutionError",
    "ToolNotFoundError",
    "ToolOutputError",
    "ToolTimeoutError",
    "ToolFailedError",
    "ExecutorUnavailableError",
    "ToolPolicyError",
    "UsageError",
    "InvalidValueError",
    "InvalidTypeError",
    "InvalidStateError",
    "RuntimeStoppedError",
    "callable_name",
    "log_exception",
    "safe_repr",
    "safe_str",
    "traceback_text",
]


class ErrorCode(str, Enum):
    """The closed vocabulary of failure codes (``docs/reference.md``,
    section 9: the first eight come from the original design, the rest are
    the runtime's own). A ``str`` enum: ``ErrorCode.UNKNOWN_TOOL ==
    "UNKNOWN_TOOL"``."""

    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    INVALID_ARGS = "INVALID_ARGS"
    INVALID_TOOL_OUTPUT = "INVALID_TOOL_OUTPUT"
    ABORTED = "ABORTED"
    ABORTED_BEFORE_DISPATCH = "ABORTED_BEFORE_DISPATCH"
    TOOL_TIMEOUT = "TOOL_TIMEOUT"
    UNSUPPORTED_SCHEMA = "UNSUPPORTED_SCHEMA"
    CODE_RUN_FAILED = "CODE_RUN_FAILED"
    # Beyond the original design's eight: causes the runtime also has to name.
    INVALID_JSON = "INVALID_JSON"
    REGISTRATION_FAILED = "REGISTRATION_FAILED"
    BATCH_EXECUTION_FAILED = "BATCH_EXECUTION_FAILED"
    EXECUTOR_UNAVAILABLE = "EXECUTOR_UNAVAILABLE"
    TOOL_FAILED = "TOOL_FAILED"
    POLICY_FAILED = "POLICY_FAILED"
    INVALID_USE = "INVALID_USE"
    RUNTIME_STOPPED = "RUNTIME_STOPPED"
    # No exception class: the failure Session.repair (and crash recovery)
    # gives a call whose body started and whose result was never logged.
    INTERRUPTED = "INTERRUPTED"
    # dsh_actors.mcp (the optional "mcp" extra): what an MCP server answered.
    MCP_TOOL_ERROR = "MCP_TOOL_ERROR"
    MCP_PROTOCOL_ERROR = "MCP_PROTOCOL_ERROR"
    MCP_CONNECTION_CLOSED = "MCP_CONNECTION_CLOSED"

    def __str__(self) -> str:
        return self.value


def safe_str(value: object) -> str:
    """``str(value)``, or ``<unprintable thrown value>`` when that raises
    (or returns something that is not a ``str``)."""
    try:
        text = str(value)
    except BaseException:  # noqa: BLE001 - a hostile __str__ may raise anything
        return "<unprintable thrown value>"
    if type(text) is not str:
        return "<unprintable thrown value>"
    return text


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` safe to show on a terminal: control and format characters
    (escape sequences, bidi overrides, line separators) become visible
    ``\\x..``/``\\u....`` escapes, so what a model or a tool wrote cannot
    drive the terminal (retitle it, clear it, move the cursor, reorder what
    is read); a tab stays. ``keep_newlines``: ``\\n`` stays too."""
    if text.isprintable():  # (the common case; a space that is not " " is kept below)
        return text
    out: list[str] = []
    for char in text:
        if char == "\t" or (keep_newlines and char == "\n"):
            out.append(char)
        elif unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            out.append(escaped(char))
        else:
            out.append(char)
    return "".join(out)


def escaped(char: str) -> str:
    """One character in the visible form :func:`printable` shows it in:
    ``\\x..`` below 256, else ``\\u....``."""
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def utf8_text(text: str) -> str:
    """``text`` with each lone surrogate (what ``os.fsdecode`` makes of a
    file name's byte that is not UTF-8) as its ``\\udcff`` escape, the form
    ``repr`` shows it in (as a ``FileNotFoundError``'s message quotes its
    file name), so the text can be encoded as UTF-8: kept in a result, the
    log, JSON. Any other text is returned as it is."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def exception_text(exc: BaseException) -> str:
    """``Type: message`` for an exception named in a message (``Type``
    alone when its message is empty)."""
    text = safe_str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def safe_repr(value: object, fallback: str = "<unprintable>") -> str:
    """``repr(value)``, or ``fallback`` when that raises (or is not a ``str``)."""
    try:
        text = repr(value)
    except BaseException:  # noqa: BLE001 - a hostile __repr__ must not break ours
        return fallback
    return text if type(text) is str else fallback


def shown_value(value: object, fallback: str = "<unprintable value>") -> str:
    """A configuration value as an error shows it: :func:`safe_repr`, but an
    int beyond 64 bits by its size (``an int of 70 bits``), as no option
    takes one and its digits would swamp the message (past 4,300 digits
    ``repr`` raises)."""
    if type(value) is int and value.bit_length() > 64:
        return f"an int of {value.bit_length()} bits"
    return safe_repr(value, fallback)


def disk_full(err: OSError) -> bool:
    """Whether a failed write's ``err`` says the disk (or the quota) is full."""
    return err.errno in (errno.ENOSPC, errno.EDQUOT)


def callable_name(fn: object) -> str:
    """A name for a user callback in messages and logs: its ``__qualname__``,
    else its type's (a callable object); never raises."""
    name = getattr(fn, "__qualname__", None)
    if type(name) is not str:
        name = getattr(type(fn), "__qualname__", None)
    return name if type(name) is str else "<callable>"


#: How much of a traceback a log line or a logged event keeps (its end, where the raise is).
TRACEBACK_LIMIT: Final = 16_000


def traceback_text(exc: BaseException) -> str:
    """``exc``'s formatted traceback (its causes included), at most
    :data:`TRACEBACK_LIMIT` characters (the end kept), lone surrogates
    escaped (:func:`utf8_text`: an exception's text may quote a file name
    ``os.fsdecode`` gave) so the session log can keep it."""
    try:
        text = "".join(traceback.format_exception(exc))
    except BaseException:  # noqa: BLE001 - a hostile exception
        text = f"{type(exc).__name__}: <unprintable thrown value>\n"
    if len(text) > TRACEBACK_LIMIT:
        text = "...\n" + text[-TRACEBACK_LIMIT:]
    return utf8_text(text)


def is_fault(exc: BaseException) -> bool:
    """Whether ``exc``, which a hook or body raised for a call, is a fault
    (logged with its traceback, ``policies.otel``'s span ``exception``
    event) rather than an outcome the runtime only describes: a
    cancellation (``AbortError``) and the model's bad arguments (a
    ``ToolArgsError`` the validation the library wraps around a body
    raised: its traceback has no frame outside ``dsh_actors`` and Python's
    standard library, such as the ``concurrent.futures`` frames an async
    body's exception comes back to a waiting thread through) are
    outcomes; a ``ToolArgsError`` the tool's own code raises is a fault.
    The one rule of the logging, the session log's tracebacks and the
    otel policy."""
    if isinstance(exc, AbortError):
        return False
    return not isinstance(exc, ToolArgsError) or _through_user_code(exc.__traceback__)


#: The folder of the ``dsh_actors`` package: a frame of a file under it is the library's.
_LIBRARY: Final = os.path.dirname(__file__) + os.sep

#: The folder of Python's standard library (where ``os`` was loaded from):
#: a frame of a file under it, but for its ``site-packages`` (installed
#: packages, the application's among them), is Python's; so is a frozen
#: module's (``<frozen os>``).
_STDLIB: Final = os.path.dirname(os.__file__) + os.sep
_INSTALLED: Final = ("site-packages", "dist-packages")


def _through_user_code(tb: TracebackType | None) -> bool:
    """Whether traceback ``tb`` has a frame outside the ``dsh_actors``
    package and Python's standard library (a body, a hook: code the
    application wrote)."""
    while tb is not None:
        if _is_users(tb.tb_frame.f_code.co_filename):
            return True
        tb = tb.tb_next
    return False


def _is_users(filename: str) -> bool:
    """Whether a frame of ``filename`` is neither the library's nor
    Python's own (see :data:`_STDLIB`)."""
    if filename.startswith(_LIBRARY) or filename.startswith("<frozen "):
        return False
    if filename.startswith(_STDLIB):
        return filename[len(_STDLIB) :].split(os.sep, 1)[0] in _INSTALLED
    return True


def log_exception(exc: BaseException, message: str, *args: object, level: str = "ERROR") -> None:
    """Log ``message`` (loguru's ``{}`` formatting of ``args``) at ``level``,
    as the caller's record, followed on the next lines by ``exc``'s own
    traceback (:func:`traceback_text`: the frames from where it was caught
    to where it was raised), which the record's ``extra["traceback"]``
    holds too (a one-line sink cuts it off the message with it); formatted
    only for a record some sink takes. How the library logs an exception:
    never as ``logger.opt(exception=exc)``, which loguru's default sink
    shows with every frame of the catching thread and the values of their
    variables (``backtrace``, ``diagnose``), the runtime's objects among
    them."""

    def add_traceback(record: Any) -> None:
        text = traceback_text(exc).rstrip("\n")
        record["extra"]["traceback"] = text
        record["message"] += "\n" + text

    logger.opt(depth=1).patch(add_traceback).log(level, message, *args)


#: How many violations an error's message lists at most (the rest are
#: counted): the message goes to the model, and arguments of 40,000 wrong
#: items would otherwise make it megabytes long. ``violations`` keeps them all.
SHOWN_VIOLATIONS: Final = 20


def _join(violations: Sequence[str]) -> str:
    if len(violations) <= SHOWN_VIOLATIONS:
        return "; ".join(violations)
    rest = len(violations) - SHOWN_VIOLATIONS
    return "; ".join(violations[:SHOWN_VIOLATIONS]) + f"; and {rest:,} more"


class DshError(Exception):
    """The root of every error dsh-actors raises on purpose.

    ``code`` is the error's :class:`ErrorCode`; ``message`` the text without
    any ``Error:`` envelope (also ``str(err)``).
    """

    code: ErrorCode = ErrorCode.TOOL_FAILED

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take structured fields; pickling keeps the built message.
        return (_rebuild, (type(self), self.message, dict(self.__dict__)))


def _rebuild(cls: type[DshError], message: str, state: dict[str, Any]) -> DshError:
    err = DshError.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


class ToolFailedError(DshError):
    """A tool failed with a message of its own choosing. Tools may raise it
    to fail a call with exactly ``message`` (no class name, no traceback)."""

    code = ErrorCode.TOOL_FAILED


class ToolNotFoundError(DshError):
    """``unknown tool "<name>"``; ``hint`` (optional) is appended after a
    period, e.g. to route a model-direct call to ``run_code``."""

    code = ErrorCode.UNKNOWN_TOOL

    def __init__(self, name: str, hint: str | None = None) -> None:
        self.name = name
        self.hint = hint
        # (A model may send a name of any length: the message shows its start.)
        if len(name) <= 128:
            message = f'unknown tool "{name}"'
        else:
            message = f'unknown tool "{name[:64]}..." (a name of {len(name):,} characters)'
        if hint:
            message = f"{message}. {hint}"
        super().__init__(message)


class ToolArgsError(DshError):
    """``invalid arguments: <v1>; <v2>``: each violation names its path."""

    code = ErrorCode.INVALID_ARGS

    def __init__(self, violations: Sequence[str]) -> None:
        self.violations = tuple(violations)
        super().__init__(f"invalid arguments: {_join(self.violations)}")


class ToolOutputError(DshError):
    """``tool "<name>" returned invalid output: <violations>``."""

    code = ErrorCode.INVALID_TOOL_OUTPUT

    def __init__(self, name: str, violations: Sequence[str]) -> None:
        self.name = name
        self.violations = tuple(violations)
        super().__init__(f'tool "{name}" returned invalid output: {_join(self.violations)}')


class AbortError(DshError):
    """``tool call aborted`` (code ``ABORTED``: the body had been invoked) or
    ``tool call aborted before dispatch`` (``ABORTED_BEFORE_DISPATCH``)."""

    code = ErrorCode.ABORTED

    def __init__(self, *, before_dispatch: bool = False, reason: object = None) -> None:
        self.before_dispatch = before_dispatch
        self.reason = reason
        if before_dispatch:
            self.code = ErrorCode.ABORTED_BEFORE_DISPATCH
            super().__init__("tool call aborted before dispatch")
        else:
            self.code = ErrorCode.ABORTED
            super().__init__("tool call aborted")


class ToolTimeoutError(DshError):
    """``tool call timed out after <ms>ms``."""

    code = ErrorCode.TOOL_TIMEOUT

    def __init__(self, timeout_ms: float) -> None:
        self.timeout_ms = timeout_ms
        shown = int(timeout_ms) if float(timeout_ms).is_integer() else timeout_ms
        super().__init__(f"tool call timed out after {shown}ms")


class JsonSchemaError(DshError):
    """``unsupported JSON schema: <v1>; <v2>``: every violation, each with
    its path from ``schema`` (``schema.properties.a.type: ...``)."""

    code = ErrorCode.UNSUPPORTED_SCHEMA

    def __init__(self, violations: Sequence[str]) -> None:
        self.violations = tuple(violations)
        super().__init__(f"unsupported JSON schema: {_join(self.violations)}")


class CodeRunFailedError(DshError):
    """``code run failed (<kind>): <msg>``; ``kind`` names how the run ended
    (``timeout``, ``memory``, ``output``, ``error``, ``aborted``, ...)."""

    code = ErrorCode.CODE_RUN_FAILED

    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind
        self.detail = detail
        super().__init__(f"code run failed ({kind}): {detail}")


class LosslessJsonError(DshError):
    """A value is not lossless JSON: ``<path>: <problem>`` (``value.a[3]:
    float nan is not lossless JSON``)."""

    code = ErrorCode.INVALID_JSON

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class RegistrationError(DshError):
    """``cannot register tool "<name>": <problem>`` (or, for a restriction
    or another registry effect, ``<problem>`` alone when no tool is named).
    ``errors``: when ``register_all`` refused definitions, one error per
    refused definition (the message joins theirs); else empty."""

    code = ErrorCode.REGISTRATION_FAILED

    def __init__(self, problem: str, *, tool: str | None = None, errors: tuple[RegistrationError, ...] = ()) -> None:
        self.tool = tool
        self.problem = problem
        self.errors = errors
        if tool is None:
            super().__init__(problem)
        else:
            super().__init__(f'cannot register tool "{tool}": {problem}')


class ExecutorUnavailableError(DshError):
    """No executor is available for the batch's scope."""

    code = ErrorCode.EXECUTOR_UNAVAILABLE

    def __init__(self, scope: str) -> None:
        self.scope = scope
        super().__init__(f"no tool executor is available for {scope}")


class ToolPolicyError(DshError):
    """A policy (a listener, the approval service, an output callback such
    as ``render``) failed or broke its contract: ``<where>: <detail>``. (A
    guard that raises denies the call instead.)"""

    code = ErrorCode.POLICY_FAILED

    def __init__(self, where: str, detail: str) -> None:
        self.where = where
        self.detail = detail
        super().__init__(f"{where}: {detail}")


class UsageError(DshError):
    """The application called dsh-actors wrongly: a value or a type it
    passed, or a call the object's state does not allow. Raised as one of
    the subclasses below, each also the builtin error Python code expects
    there, so ``except ValueError`` (``TypeError``, ``RuntimeError``) keeps
    working."""

    code = ErrorCode.INVALID_USE


class InvalidValueError(UsageError, ValueError):
    """A value the application passed is wrong (two calls of a batch with
    the same id, a limit that is not a positive integer, ...)."""


class InvalidTypeError(UsageError, TypeError):
    """An argument of the wrong type (a dict given as a ``ToolCall``, ...)."""


class InvalidStateError(UsageError, RuntimeError):
    """A call the object's state does not allow (a runtime not started yet,
    an executor installed in another runtime, a blocking call on the event
    loop it would block, ...)."""


STOPPED: Final = "the ToolRuntime is stopped"
"""The state, as a stopped runtime's errors say it (a wait the stop cut
short adds what it waited for)."""

NEW_RUNTIME: Final = "create a new ToolRuntime() and register the tools on it"
"""The fix for anything asked of a stopped runtime: it never starts again."""

STOPPED_REFUSAL: Final = f"{STOPPED}: a stopped runtime does not start again; {NEW_RUNTIME}"
"""What a stopped runtime says to new work (``rt.tools``, a batch, a
listener, a plugin, an approval service; a ``ToolsService`` held from
before the stop)."""


class RuntimeStoppedError(DshError, RuntimeError):
    """The runtime is stopped (or stopping): it refuses new work, and a wait
    for work it no longer does ends with this error."""

    code = ErrorCode.RUNTIME_STOPPED


class ToolBatchExecutionError(DshError):
    """The batch could not complete (a bug, a session write failure). Raised
    only after every started call settled; ``results`` holds the outcomes
    committed so far, ``partial`` the whole partial :class:`ToolBatchResult`."""

    code = ErrorCode.BATCH_EXECUTION_FAILED

    def __init__(
        self,
        detail: str,
        *,
        results: Sequence[ToolCallResult] = (),
        partial: ToolBatchResult | None = None,
    ) -> None:
        self.detail = detail
        self.results = tuple(results)
        self.partial = partial
        super().__init__(f"tool batch failed: {detail}")
