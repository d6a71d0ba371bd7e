"""The PTC worker: the child process that runs one ``run_code`` program.

Run as a file (``python -I executors/ptc/worker.py``, the default command)
or as ``python -m executors.ptc.worker``. It uses only the standard library
and :mod:`protocol` and :mod:`audit` next to it (orjson if installed), so
it also runs in a bare Python inside a container: copy ``worker.py``,
``protocol.py`` and ``audit.py``.

Life of a worker (see :mod:`protocol` for the messages):

1. Start-up, ahead of any run: ask the kernel to kill the worker when its
   parent dies (Linux ``PR_SET_PDEATHSIG``), and start a lifeline thread
   that exits the process when the parent's end of the protocol pipe
   closes or the parent pid changes (the fallback, also for a worker whose
   parent is a sandbox launcher); take the protocol pipes off fds 0 and 1
   (which then point at ``/dev/null``, so a stray C-level write cannot
   corrupt the protocol; fd 2 stays the parent's stderr pipe, counted as
   output), import what programs commonly use, create the event loop (its
   self-pipe is a socket pair, made before sockets are refused), write
   ``ready``, and block until the ``run`` message.
2. The run: apply the resource limits, compile the program as the body of
   an ``async def``, install the capture streams and the audit hook, then
   run it on the loop. Tool calls are ``call`` messages; their results come
   back on stdin (read by the loop, no thread).
3. Write ``done`` and exit. The parent kills the process group anyway.

The audit hook is :mod:`audit`'s (what it refuses is listed there).
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import errno
import inspect
import io
import linecache
import math
import os
import select
import signal
import sys
import threading
import traceback
import types
from collections.abc import Callable
from typing import Any, NoReturn

resource: Any
try:
    import resource
except ImportError:  # pragma: no cover - not POSIX
    resource = None

if __package__:
    from . import audit, protocol
else:  # run as a file, e.g. inside a container
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import audit  # type: ignore[no-redef, import-not-found]
    import protocol  # type: ignore[no-redef, import-not-found]

    del sys.path[0]

PROGRAM = audit.PROGRAM

_PRELOAD = (
    "json",
    "re",
    "math",
    "itertools",
    "collections",
    "functools",
    "datetime",
    "textwrap",
    "dataclasses",
    "typing",
    "string",
    "random",
    "base64",
    "hashlib",
    "shutil",
)

_PR_SET_PDEATHSIG = 1
MAX_HEADLINE = 2000
"""Most characters of a failed run's message (the exception's last line)."""
MAX_TRACEBACK = 8000
"""Most characters of a failed run's traceback (its end is kept)."""
_LIFELINE_POLL_MS = 1000

# --------------------------------------------------------------------------
# The channel to the parent
# --------------------------------------------------------------------------


def pipe_lost(exc: OSError) -> NoReturn:
    """Exit: a protocol pipe failed. ``EBADF``: the program closed its file
    descriptor (:data:`protocol.EXIT_PIPE_CLOSED`, which the parent names);
    else the parent is gone."""
    os._exit(protocol.EXIT_PIPE_CLOSED if exc.errno == errno.EBADF else 0)


class Channel:
    """The protocol pipes: blocking writes, reads driven by the loop.
    A message is written whole under a lock: a program's threads print
    too, and a pipe keeps only writes of up to ``PIPE_BUF`` bytes apart."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd = read_fd
        self.write_fd = write_fd
        self._send_lock = threading.RLock()
        self.framer = protocol.LineFramer(1 << 30)
        self.lines: list[bytes] = []
        self.on_message: Callable[[Any], None] | None = None

    def send(self, message: dict[str, Any]) -> None:
        data = memoryview(protocol.encode(message))
        with self._send_lock:
            try:
                while data:
                    written = os.write(self.write_fd, data)
                    data = data[written:]
            except OSError as exc:
                pipe_lost(exc)

    def read_blocking(self) -> Any:
        """The next message, waiting for it (before the loop runs)."""
        while not self.lines:
            try:
                chunk = os.read(self.read_fd, 1 << 16)
            except OSError as exc:
                pipe_lost(exc)
            if not chunk:
                os._exit(0)  # the parent closed the pipe: nothing to run
            self.lines.extend(self.framer.feed(chunk))
        return protocol.decode(self.lines.pop(0))

    def on_readable(self) -> None:
        """Loop callback: read what is there and hand over each message."""
        while True:
            try:
                chunk = os.read(self.read_fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError as exc:
                pipe_lost(exc)
            if not chunk:
                os._exit(0)  # the parent is gone
            self.lines.extend(self.framer.feed(chunk))
        lines, self.lines = self.lines, []
        for line in lines:
            if self.on_message is not None:
                self.on_message(protocol.decode(line))


class Capture(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` of the program: text goes to the
    parent as ``out`` messages, a line (or a chunk) at a time (under a
    lock: the program's threads may print at once)."""

    def __init__(self, channel: Channel) -> None:
        super().__init__()
        self._channel = channel
        self._buffer: list[str] = []
        self._size = 0
        self._lock = threading.RLock()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if not text:
            return 0
        with self._lock:
            self._buffer.append(text)
            self._size += len(text)
            if self._size >= 4096 or "\n" in text:
                self.flush()
        return len(text)

    def flush(self) -> None:
        with self._lock:
            if not self._buffer:
                return
            text = "".join(self._buffer)
            self._buffer = []
            self._size = 0
            chunk = protocol.OUT_CHUNK
            for start in range(0, len(text), chunk):
                self._channel.send({"t": protocol.OUT, "data": _wire_text(text[start : start + chunk])})


# --------------------------------------------------------------------------
# Tools inside the program
# --------------------------------------------------------------------------


class ToolError(Exception):
    """A tool call failed: ``str(err)`` is the failure message; ``tool`` the
    tool's name, ``code`` its failure code (``INVALID_ARGS``, ``TOOL_FAILED``,
    ...) or None (a denial: a policy or the approval refused the call, or
    its approval was deferred, which a program cannot wait for), ``error_name`` the error's class name
    (``FileNotFoundError``, ``ToolArgsError``, ...) or None, ``call_id`` the
    sub-call's id."""

    def __init__(
        self,
        message: str,
        *,
        tool: str,
        code: str | None = None,
        call_id: str | None = None,
        error_name: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.tool = tool
        self.code = code
        self.call_id = call_id
        self.error_name = error_name

    def __str__(self) -> str:
        return self.message


ToolError.__module__ = "builtins"  # ``ToolError: ...`` in tracebacks, however the worker runs


class Client:
    """Sends calls and matches results to the program's awaiting calls."""

    def __init__(self, channel: Channel, loop: asyncio.AbstractEventLoop, capture: Capture) -> None:
        self._channel = channel
        self._loop = loop
        self._capture = capture
        self._next = 1
        self._pending: dict[int, asyncio.Future[Any]] = {}
        channel.on_message = self._on_message

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        n = self._next
        self._next += 1
        future: asyncio.Future[Any] = self._loop.create_future()
        self._pending[n] = future
        self._capture.flush()  # output printed before the call stays before it
        self._channel.send({"t": protocol.CALL, "id": n, "name": name, "args": arguments})
        try:
            return await future
        except asyncio.CancelledError:
            if not future.done() or future.cancelled():  # no result yet: the program gave up on it
                self._channel.send({"t": protocol.CANCEL, "id": n})
            raise
        finally:
            self._pending.pop(n, None)

    def _on_message(self, message: Any) -> None:
        if type(message) is not dict or message.get("t") != protocol.RESULT:
            return
        future = self._pending.get(message.get("id"))  # type: ignore[arg-type]
        if future is None or future.done():
            return  # the program stopped waiting (cancelled)
        if message.get("ok") is True:
            future.set_result(message.get("value"))
        else:
            future.set_exception(
                ToolError(
                    str(message.get("error")),
                    tool=str(message.get("name", "")),
                    code=message.get("code"),
                    call_id=message.get("sub_call_id"),
                    error_name=message.get("error_name"),
                )
            )


class _Shown(str):
    """Text a signature shows as it is (a type hint, a default): its repr
    is the text, not a quoted string."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str.__str__(self)


def _signature(wire: Any) -> inspect.Signature | None:
    """The ``inspect`` signature of a binding's ``signature`` (the prompt's
    hints and defaults, as text); None without one."""
    if not isinstance(wire, dict):
        return None
    try:
        parameters = [
            inspect.Parameter(py[2:], inspect.Parameter.VAR_KEYWORD, annotation=_Shown(hint))
            if py.startswith("**")
            else inspect.Parameter(
                py,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=inspect.Parameter.empty if default is None else _Shown(default),
                annotation=_Shown(hint),
            )
            for py, hint, default in wire["params"]
        ]
        return inspect.Signature(parameters, return_annotation=_Shown(wire["returns"]))
    except (KeyError, TypeError, ValueError):  # (malformed: the tool is shown without one)
        return None


class Tool:
    """``tools.NAME``: calling it gives the coroutine of one tool call.

    Arguments: keywords (``path="a"``), positionals in signature order, or
    one positional dict that is the whole argument object.

    A program sees it as the function it stands for: ``repr`` and
    ``help`` show its signature (``inspect.signature`` gives it) and the
    first line of its description, not this class."""

    def __init__(self, client: Client, binding: dict[str, Any]) -> None:
        self._client = client
        self._name: str = binding["name"]
        self.__name__ = binding["py"]
        self._params: list[tuple[str, str]] = [(p, r) for p, r in binding["params"]]
        self._to_real = dict(self._params)
        self._omit_none: list[str] = list(binding["omit_none"])
        self._summary = str(binding.get("summary") or "")
        self.__signature__ = _signature(binding.get("signature"))
        summary = f"{self._summary}\n\n" if self._summary else ""
        self.__doc__ = (
            f"{summary}A coroutine function: await tools.{self.__name__}(...) (keywords, positionals in "
            "signature order, or one dict of arguments); a failed call raises ToolError."
        )

    def __repr__(self) -> str:
        shown = f"tools.{self.__name__}{'' if self.__signature__ is None else self.__signature__}"
        return f"{shown}: {self._summary}" if self._summary else shown

    def __get__(self, instance: Any, owner: Any = None) -> Tool:
        """Read off a class, a tool is itself (as a static function is);
        being a descriptor, it is a routine to ``help``, which then shows
        its signature and description, not this class."""
        return self

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:  # (a tool may have a parameter "self")
        py = self.__name__
        if len(args) == 1 and not kwargs and type(args[0]) is dict:
            arguments = dict(args[0])
        else:
            if len(args) > len(self._params):
                raise TypeError(
                    f"tools.{py}() takes at most {len(self._params)} positional arguments ({len(args)} given)"
                )
            arguments = {real: value for (_, real), value in zip(self._params, args, strict=False)}
            for key, value in kwargs.items():
                real = self._to_real.get(key, key)
                if real in arguments:
                    raise TypeError(f"tools.{py}() got multiple values for argument {key!r}")
                arguments[real] = value
            for real in self._omit_none:
                if real in arguments and arguments[real] is None:
                    del arguments[real]
        problem = protocol.json_problem(arguments, "arguments")
        if problem is not None:
            raise TypeError(f"tools.{py}(): {problem}")
        call: Any = self._client.call(self._name, arguments)
        # Named after the tool, not Client.call: Python's "coroutine ... was
        # never awaited" and json_problem say which call lacks its await.
        call.__name__ = py
        call.__qualname__ = f"tools.{py}"
        return call


class Tools(types.ModuleType):
    """The ``tools`` namespace of a program: one attribute per tool.
    ``getattr(tools, "registered-name")`` works too. ``own``: the
    executor's own tools (``run_code``), which a program cannot call.
    ``repr(tools)`` (``print``) lists the tools, each with the first line
    of its description. A module to ``help``: ``help(tools)`` documents
    them as a module's functions (``__all__``: the tools), each whole, its
    signature and description (an instance's ``repr`` pydoc would cut at
    100 characters), not this class."""

    def __init__(self, functions: dict[str, Tool], by_name: dict[str, Tool], own: frozenset[str] = frozenset()) -> None:
        super().__init__(
            "tools",
            "The tools this program can call.\n\n"
            "Each is a coroutine function: await tools.NAME(...) (keywords, positionals in signature order, "
            "or one dict of arguments); a failed call raises ToolError.",
        )
        # Python names never start with "_" (signatures.py prefixes them).
        self.__dict__.update(functions)
        self.__dict__["_by_name"] = by_name
        self.__dict__["_own"] = own

    @property
    def __all__(self) -> list[str]:  # (pydoc documents these; dir() leaves the module's own names out)
        return self.__dir__()

    def __getattr__(self, name: str) -> Tool:
        tool: Tool | None = self.__dict__.get("_by_name", {}).get(name)
        if tool is not None:
            return tool
        names = sorted(k for k in self.__dict__ if not k.startswith("_"))
        available = f"available: {', '.join(names) or 'none'}"
        if name in self.__dict__.get("_own", ()):
            raise AttributeError(
                f"there is no tool {name!r}: a program cannot run code itself; call the tools directly ({available})"
            )
        raise AttributeError(f"there is no tool {name!r} ({available})")

    def __dir__(self) -> list[str]:
        return sorted(k for k in self.__dict__ if not k.startswith("_"))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"tools is read-only: it holds the tools bound to this program (cannot set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"tools is read-only: it holds the tools bound to this program (cannot delete {name!r})")

    def __repr__(self) -> str:
        listed = [(name, self.__dict__[name]) for name in self.__dir__()]
        lines = [f"tools.{name}: {tool._summary}" if tool._summary else f"tools.{name}" for name, tool in listed]
        return "\n".join(["tools:", *(f"  {line}" for line in lines)]) if lines else "tools: none"


Tools.__module__ = Tool.__module__ = "builtins"  # ``help(tools)``, ``help(tools.NAME)`` name no worker module


# --------------------------------------------------------------------------
# Limits, compilation, the audit hook
# --------------------------------------------------------------------------


def apply_limits(limits: dict[str, Any]) -> None:
    """Best effort: a limit the platform refuses is skipped."""
    if resource is None:  # pragma: no cover - not POSIX
        return

    def cap(which: int, value: int) -> None:
        try:
            _, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, value))
        except (OSError, ValueError):  # pragma: no cover - platform dependent
            pass

    cap(resource.RLIMIT_CORE, 0)
    memory = limits.get("memory_bytes")
    if type(memory) is int and memory > 0:
        cap(resource.RLIMIT_AS, memory)
    cpu = limits.get("cpu_seconds")
    if type(cpu) is int and cpu > 0:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cap(resource.RLIMIT_CPU, int(usage.ru_utime + usage.ru_stime) + cpu)
    files = limits.get("file_bytes")
    if type(files) is int and files > 0:
        cap(resource.RLIMIT_FSIZE, files)
    # No RLIMIT_NPROC: Linux counts threads against it (every task of the
    # user), so it would keep a program from starting a thread; the audit
    # hook is what refuses fork, exec and subprocesses.


def compile_program(code: str) -> Any:
    """``code`` as the body of ``async def __run_code__()``, line numbers
    unchanged (the AST is wrapped, the text is not re-indented)."""
    tree = ast.parse(code, PROGRAM, "exec")
    fields: dict[str, Any] = {
        "name": "__run_code__",
        "args": ast.arguments(
            posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]
        ),
        "body": tree.body or [ast.Pass()],
        "decorator_list": [],
        "returns": None,
        "type_comment": None,
    }
    if "type_params" in ast.AsyncFunctionDef._fields:  # pragma: no cover - Python 3.12+
        fields["type_params"] = []
    function = ast.AsyncFunctionDef(**fields)
    function.lineno, function.col_offset = 1, 0
    module = ast.Module(body=[function], type_ignores=[])
    ast.fix_missing_locations(module)
    return compile(module, PROGRAM, "exec", dont_inherit=True)


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------


_OWN_FILES = frozenset(os.path.realpath(f) for f in (__file__, protocol.__file__, audit.__file__))


def _traceback_text(exc: BaseException, limit: int = 20) -> str:
    """The traceback without the worker's own frames, its last lines; an
    exception that cannot be formatted (its type's name, ``__str__`` or
    notes raise) gives its frames and :func:`_headline`'s line."""
    try:
        return _formatted_traceback(exc, limit)
    except BaseException:  # noqa: BLE001 - a hostile exception
        try:
            stack = traceback.StackSummary.extract(traceback.walk_tb(_EXCEPTION_TRACEBACK.__get__(exc)))
            text = "".join(traceback.StackSummary.from_list(_program_frames(list(stack))).format())
            return f"Traceback (most recent call last):\n{text}{_headline(exc)}"[-MAX_TRACEBACK:]
        except BaseException:  # noqa: BLE001 - nothing to show
            return ""


def _thread_excepthook(args: Any) -> None:
    """``threading.excepthook`` while a program runs: a thread it started
    raised. Printed (to the captured ``sys.stderr``) as threading's own hook
    prints it, its traceback cut as a failed run's is
    (:func:`_traceback_text`: the program's frames, not the worker's audit
    hook)."""
    if args.exc_type is SystemExit:
        return
    if args.exc_value is None:  # (nothing to cut)
        threading.__excepthook__(args)
        return
    name = args.thread.name if args.thread is not None else threading.get_ident()
    print(f"Exception in thread {name}:\n{_traceback_text(args.exc_value)}", file=sys.stderr, flush=True)


def _formatted_traceback(exc: BaseException, limit: int) -> str:
    report = traceback.TracebackException(type(exc), exc, exc.__traceback__, capture_locals=False)
    seen: set[int] = set()
    todo = [report]
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        item.stack = traceback.StackSummary.from_list(_program_frames(list(item.stack)))
        todo.extend(x for x in (item.__cause__, item.__context__) if x is not None)
        todo.extend(item.exceptions or ())  # an exception group's (a TaskGroup's)
    text = "".join(report.format()).rstrip("\n").splitlines()
    if len(text) > limit:
        text = ["  ..."] + text[-limit:]
    return "\n".join(text)[-MAX_TRACEBACK:]


def _program_frames(frames: list[traceback.FrameSummary]) -> list[traceback.FrameSummary]:
    """From the program's first frame on, without the worker's own."""
    first = next((i for i, f in enumerate(frames) if f.filename == PROGRAM), 0)
    return [f for f in frames[first:] if os.path.realpath(f.filename) not in _OWN_FILES]


def _headline(exc: BaseException) -> str:
    """``ValueError: message``: the exception's own line, not a note added
    to it (the traceback shows those); an exception that cannot be
    formatted (its class's names raise when read) is named by its type's
    ``__name__`` alone (never a crash of the worker that shows its own
    traceback)."""
    try:
        report = traceback.TracebackException(type(exc), exc, None, compact=True)
        report.__notes__ = None  # (format_exception_only ends with the notes)
        lines = list(report.format_exception_only())
        return lines[-1].strip() if lines else _type_name(exc)
    except BaseException:  # noqa: BLE001 - a hostile exception
        return f"{_type_name(exc)}: <exception that cannot be printed>"


#: ``BaseException.__traceback__`` and ``type.__name__`` as the interpreter
#: reads them: a program's class may override ``__getattribute__``.
_EXCEPTION_TRACEBACK: Any = BaseException.__dict__["__traceback__"]
_TYPE_NAME: Any = type.__dict__["__name__"]


def _type_name(exc: BaseException) -> str:
    try:
        name = _TYPE_NAME.__get__(type(exc))
    except BaseException:  # noqa: BLE001 - a hostile metaclass
        return "exception"
    return name if type(name) is str else "exception"


def _wire_text(text: str) -> str:
    """``text`` with any lone surrogate replaced: it must encode as UTF-8
    (an exception's message may hold one)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _failure(kind: str, message: str, tb: str = "") -> dict[str, Any]:
    """A failed ``done``: the message (one line) cut at
    :data:`MAX_HEADLINE` characters and the traceback at its last
    :data:`MAX_TRACEBACK` (they go to the model; a 9 MB exception message
    would not even fit in a protocol line)."""
    if len(message) > MAX_HEADLINE:
        message = f"{message[:MAX_HEADLINE]}... ({len(message):,} characters)"
    return {
        "t": protocol.DONE,
        "ok": False,
        "kind": kind,
        "message": _wire_text(message),
        "traceback": _wire_text(tb[-MAX_TRACEBACK:]),
    }


def run(
    channel: Channel, loop: asyncio.AbstractEventLoop, guard: audit.Guard, message: dict[str, Any]
) -> dict[str, Any]:
    """Run the program of ``message``; the ``done`` message to send."""
    apply_limits(message.get("limits") or {})
    code = message.get("code")
    if not isinstance(code, str):
        return _failure("error", "the run message has no code")
    try:
        compiled = compile_program(code)
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes
        detail = "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
        return _failure("syntax", _headline(exc), detail)
    linecache.cache[PROGRAM] = (len(code), None, code.splitlines(True), PROGRAM)

    capture = Capture(channel)
    client = Client(channel, loop, capture)
    functions: dict[str, Tool] = {}
    by_name: dict[str, Tool] = {}
    for binding in message.get("tools") or ():
        tool = Tool(client, binding)
        functions[binding["py"]] = tool
        by_name[binding["name"]] = tool
    own = message.get("own") or ()
    tools = Tools(functions, by_name, frozenset(name for name in own if type(name) is str))

    def report_progress(progress: Any, total: Any = None, message: Any = None) -> None:
        """Tell the user how far the program is (``progress`` out of ``total``)."""
        for name, value, optional in (("progress", progress, False), ("total", total, True)):
            if value is None and optional:
                continue
            if type(value) not in (int, float) or (type(value) is float and not math.isfinite(value)):
                raise TypeError(f"report_progress({name}=...) must be a finite number, not {value!r}")
            problem = protocol.json_problem(value, f"report_progress({name}=...)")
            if problem is not None:  # an int past 64 bits, -0.0: the parent would refuse the message
                raise ValueError(problem)
        if message is not None:
            if type(message) is not str:
                raise TypeError(f"report_progress(message=...) must be a str, not {type(message).__name__}")
            problem = protocol.json_problem(message, "report_progress(message=...)")
            if problem is not None:
                raise ValueError(problem)
        capture.flush()  # output printed before the report stays before it
        channel.send({"t": protocol.PROGRESS, "progress": progress, "total": total, "message": message})

    namespace: dict[str, Any] = {
        "__name__": "__run_code__",
        "__builtins__": builtins,
        "tools": tools,
        "ToolError": ToolError,
        "asyncio": asyncio,
        "report_progress": report_progress,
    }
    exec(compiled, namespace)  # defines __run_code__; runs nothing of the program
    program = namespace.pop("__run_code__")

    sys.stdout = sys.stderr = capture
    sys.stdin = io.StringIO("")
    threading.excepthook = _thread_excepthook
    guard.install()
    del guard  # the audit hook holds the only reference
    os.set_blocking(channel.read_fd, False)
    loop.add_reader(channel.read_fd, channel.on_readable)

    try:
        coroutine = program()
        value = loop.run_until_complete(coroutine)
    except MemoryError as exc:
        capture.flush()
        return _failure("memory", _headline(exc), _traceback_text(exc))
    except BaseException as exc:  # noqa: BLE001 - whatever the program raised
        capture.flush()
        return _failure("error", _headline(exc), _traceback_text(exc))
    capture.flush()
    problem = protocol.json_problem(value, "result")
    if problem is not None:
        return _failure("result", f"the returned value is not JSON: {problem}")
    return {"t": protocol.DONE, "ok": True, "result": value}


def die_with_parent() -> None:
    """Linux: SIGKILL this process when the thread that started it exits
    (the PTC pool starts workers from one thread that lives as long as the
    pool). ``ctypes`` is imported for this and forgotten again, so that a
    program's ``import ctypes`` still raises the audit event it refuses."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort; the lifeline still works  # pragma: no cover
        pass
    finally:
        for name in [n for n in sys.modules if n in ("ctypes", "_ctypes") or n.startswith("ctypes.")]:
            del sys.modules[name]


def watch_parent(read_fd: int) -> None:
    """The lifeline: exit as soon as the parent's end of the protocol pipe
    closes (its process died), or the parent pid changes, even while the
    program sleeps or computes; also once the program has closed the
    pipe's descriptor (:func:`pipe_lost`'s status)."""
    parent = os.getppid()
    poller = select.poll()
    poller.register(read_fd, 0)  # only POLLHUP/POLLERR/POLLNVAL are reported

    def watch() -> None:
        while True:
            events = poller.poll(_LIFELINE_POLL_MS)
            if any(mask & select.POLLNVAL for _fd, mask in events):  # closed by the program
                os._exit(protocol.EXIT_PIPE_CLOSED)
            if events or os.getppid() != parent:
                os._exit(protocol.EXIT_ORPHANED)

    threading.Thread(target=watch, name="dsh-ptc-lifeline", daemon=True).start()


def main() -> None:
    die_with_parent()
    read_fd, write_fd = os.dup(0), os.dup(1)
    watch_parent(read_fd)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    channel = Channel(read_fd, write_fd)
    for name in _PRELOAD:
        try:
            __import__(name)
        except ImportError:  # pragma: no cover - a trimmed Python
            pass
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    guards = [audit.Guard(os.getcwd())]  # handed over (not kept in this frame) to run()
    channel.send({"t": protocol.READY, "v": protocol.VERSION, "pid": os.getpid()})
    try:
        message = channel.read_blocking()
        if type(message) is not dict or message.get("t") != protocol.RUN:
            done = _failure("error", "the worker expected a run message")
        elif message.get("v") != protocol.VERSION:
            done = _failure("error", f"protocol version {message.get('v')!r}, the worker speaks {protocol.VERSION}")
        else:
            done = run(channel, loop, guards.pop(), message)
        channel.send(done)
    except MemoryError:
        os._exit(protocol.EXIT_MEMORY)
    os._exit(0)


if __name__ == "__main__":
    main()
