"""What runs inside the Ray cluster: the wrapper every remote call goes
through (:func:`run_call`), the context a body gets there
(:class:`RemoteContext`), the :class:`SignalBoard` actor (one per driver process) and
the :class:`ToolHost` actor that keeps a stateful tool's instance.

Protocol (one call, key ``k``):

* the worker, before it enters the body, asks ``board.start(k)`` and
  waits for the answer: ``False`` means the driver aborted ``k`` first,
  and the body is not entered; after the body it sends ``board.finish(k)``;
* the body's signal, when first read, sends ``board.watch(k)``, whose
  ObjectRef resolves when the driver aborts ``k`` (or ``k`` finishes);
* the driver, on abort, asks ``board.abort(k)``, which answers whether
  ``k`` had started (the board runs one message at a time, so start and
  abort are ordered: exactly one of "started" and "aborted first" holds),
  then cancels the Ray task (at once if it had not started, after a grace
  period if it had);
* the worker returns an *envelope*, a tuple whose first item is its kind
  (see :func:`run_call`); values and deferred contexts cross as lossless
  JSON text (:func:`dsh_actors.dumps` / :func:`dsh_actors.loads`).

This module is imported on the workers: it needs ``ray`` and ``dsh_actors``
(the project installed on every node), never the driver's runtime.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import threading
import traceback
from collections.abc import Callable
from typing import Any

from ray import cloudpickle
from ray.exceptions import TaskCancelledError

from dsh_actors import (
    AbortError,
    DshError,
    ImageBlock,
    InvalidTypeError,
    ReasoningBlock,
    TextBlock,
    UserMessage,
    dumps,
    loads,
)

__all__ = [
    "OK",
    "ERROR",
    "BAD_OUTPUT",
    "CANCELLED",
    "CallInfo",
    "RemoteContext",
    "RemoteSignal",
    "SignalBoard",
    "ToolHost",
    "contexts_from_json",
    "contexts_to_json",
    "run_call",
    "task_entry",
]

# Envelope kinds (the first item of what run_call returns).
OK = "ok"  # ("ok", value_json, contexts_json, concludes)
ERROR = "error"  # ("error", pickled_exc | None, class_name, message, traceback, contexts_json, concludes)
BAD_OUTPUT = "bad-output"  # ("bad-output", problem, contexts_json, concludes)
CANCELLED = "cancelled"  # ("cancelled", body_started, contexts_json, concludes)

#: ``(key, call_id, root_call_id, name, agent_id, agent_path)``
CallInfo = tuple[str, str, "str | None", str, "str | None", "str | None"]


# --------------------------------------------------------------------------
# Deferred contexts as JSON
# --------------------------------------------------------------------------


def _block_to_json(block: Any) -> dict[str, Any]:
    t = type(block)
    if t is TextBlock:
        return {"type": "text", "text": block.text}
    if t is ImageBlock:
        return {"type": "image", "data": block.data, "mime_type": block.mime_type}
    if t is ReasoningBlock:
        return {"type": "reasoning", "text": block.text, "signature": block.signature}
    raise TypeError(f"a UserMessage's content holds TextBlock, ImageBlock or ReasoningBlock, not {t.__qualname__}")


def _context_to_json(context: UserMessage | str) -> Any:
    if isinstance(context, str):
        return str(context)  # (the driver's defer_context makes its message)
    return {"content": [_block_to_json(b) for b in context.content], "source": context.source, "meta": context.meta}


def contexts_to_json(contexts: list[UserMessage | str]) -> bytes | None:
    """Deferred contexts as lossless JSON text (None when there are none):
    a message as an object, a ``str`` as it is."""
    if not contexts:
        return None
    return dumps([_context_to_json(c) for c in contexts])


def _block_from_json(item: Any) -> Any:
    kind = item["type"]
    if kind == "text":
        return TextBlock(item["text"])
    if kind == "image":
        return ImageBlock(item["data"], item["mime_type"])
    if kind == "reasoning":
        return ReasoningBlock(item["text"], item["signature"])
    raise ValueError(f"unknown content block type {kind!r}")


def contexts_from_json(data: bytes | None) -> list[UserMessage | str]:
    """The inverse of :func:`contexts_to_json`: messages, and the ``str``
    contexts as they are, for the driver's ``ctx.defer_context``."""
    if data is None:
        return []
    return [
        item
        if type(item) is str
        else UserMessage(
            content=tuple(_block_from_json(b) for b in item["content"]),
            source=item["source"],
            meta=item["meta"],
        )
        for item in loads(data, frozen=False)
    ]


# --------------------------------------------------------------------------
# The body's context on the worker
# --------------------------------------------------------------------------


class RemoteSignal:
    """The body's abort signal on a worker: turns true when the driver
    aborts the call (the caller's signal, a timeout policy's deadline, the
    runtime stopping).

    The first read subscribes to the :class:`SignalBoard` (one message);
    the board's answer sets a local event from Ray's callback thread, so
    reading :attr:`aborted` is a flag read and :meth:`wait` sleeps on a
    ``threading.Event``. Neither is a Ray call: the task keeps its CPUs
    while it waits (a blocking ``ray.get``/``ray.wait`` would lend them to
    other tasks), and no thread polls. :meth:`wait` blocks its thread: an
    ``async def`` body does not call it (the abort cancels its task, see
    :func:`run_call`).
    """

    __slots__ = ("_board", "_key", "_lock", "_event", "_aborted", "_reason_text", "_done", "_on_abort")

    def __init__(self, board: Any, key: str | None) -> None:
        self._board = board
        self._key = key
        self._lock = threading.Lock()
        self._event = threading.Event()  # set once the board answered
        self._aborted = False
        self._reason_text: str | None = None
        self._done = board is None  # no board: can never abort
        self._on_abort: list[Callable[[], None]] = []

    def _subscribe(self) -> None:
        with self._lock:
            board = self._board
            if board is None:
                return
            self._board = None
        try:
            watch = board.watch.remote(self._key)
            watch.future().add_done_callback(self._answered)
        except Exception:  # noqa: BLE001 - the board is gone: nobody can abort us any more
            self._done = True

    def _answered(self, future: Any) -> None:
        try:
            answer = future.result()
        except BaseException:  # noqa: BLE001 - the board is gone: nobody can abort us any more
            answer = None
        if isinstance(answer, tuple) and answer and answer[0] is True:
            self._reason_text = answer[1]
            self._aborted = True
        else:
            self._done = True
        self._event.set()
        with self._lock:
            callbacks, self._on_abort = self._on_abort, []
        if self._aborted:
            for callback in callbacks:
                callback()

    def _call_on_abort(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from Ray's callback thread, or now) once the
        driver aborts the call; never if it finishes first."""
        with self._lock:
            if not self._event.is_set():
                self._on_abort.append(callback)
                callback = _nothing
        if self._board is not None:
            self._subscribe()
        if self._aborted:
            callback()

    def _settle(self, timeout: float | None) -> bool:
        if self._aborted:
            return True
        if self._board is not None:
            self._subscribe()
        if self._done or timeout == 0:
            return self._aborted
        self._event.wait(timeout)
        return self._aborted

    @property
    def aborted(self) -> bool:
        """Whether the driver has aborted this call."""
        return self._settle(0)

    @property
    def reason(self) -> str | None:
        """The abort's reason, as text (``None`` while not aborted)."""
        return self._reason_text if self._settle(0) else None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the call is aborted or ``timeout`` seconds pass;
        return :attr:`aborted`."""
        if timeout is None:
            self._settle(None)
            if not self._aborted:
                threading.Event().wait()  # finished without an abort: it never will
            return True
        return self._settle(max(0.0, timeout))

    def throw_if_aborted(self) -> None:
        """Raise :class:`~dsh_actors.AbortError` if the call was aborted."""
        if self._settle(0):
            raise AbortError(reason=self._reason_text)

    def __repr__(self) -> str:
        return f"<RemoteSignal aborted={self._aborted}>"


class RemoteContext:
    """What a body running on Ray receives as ``ctx``: the call's identity
    (``call_id``, ``root_call_id``, ``name``, ``arguments``, ``agent_id``,
    ``agent_path``), its :class:`RemoteSignal`, and :meth:`defer_context` /
    :meth:`conclude_turn`, which travel back with the result and are applied
    to the driver's context. ``ray_key`` is the call's key on the board."""

    __slots__ = (
        "ray_key",
        "call_id",
        "root_call_id",
        "name",
        "arguments",
        "agent_id",
        "agent_path",
        "signal",
        "_contexts",
        "_concludes",
        "_lock",
    )

    def __init__(self, info: CallInfo, arguments: Any, signal: RemoteSignal) -> None:
        self.ray_key, self.call_id, self.root_call_id, self.name, self.agent_id, self.agent_path = info
        self.arguments = arguments
        self.signal = signal
        self._contexts: list[UserMessage | str] = []
        self._concludes = False
        self._lock = threading.Lock()

    def defer_context(self, context: UserMessage | str) -> None:
        """Attach ``context`` to this call's own result (as on the driver,
        whose ``ctx.defer_context`` gets it: a ``str`` is the text of the
        message it makes there)."""
        if not isinstance(context, (UserMessage, str)):
            raise InvalidTypeError(
                f"defer_context takes a UserMessage or a str (its text), not {type(context).__qualname__}: "
                'ctx.defer_context("...") or ctx.defer_context(UserMessage([text("...")], source=...))'
            )
        with self._lock:
            self._contexts.append(context)

    def conclude_turn(self) -> None:
        """Mark a successful final result as terminal for the agent's turn."""
        self._concludes = True

    def _take(self, *, strict: bool = False) -> tuple[bytes | None, bool]:
        """The deferred contexts as JSON, and ``conclude_turn``. A context
        that is not lossless JSON raises when ``strict`` (a success then
        fails), else is dropped with the others (a failure stays itself)."""
        with self._lock:
            contexts = list(self._contexts)
        try:
            return contexts_to_json(contexts), self._concludes
        except Exception:  # noqa: BLE001 - e.g. a meta that is not lossless JSON
            if strict:
                raise
            return None, self._concludes

    def __getattr__(self, name: str) -> Any:
        # (Only for what the slots do not have.) What a driver-side
        # ToolRunContext offers and a remote body does not get: say why.
        if name in _NOT_REMOTE:
            raise AttributeError(
                f'ctx.{name} is not available to a body that runs on Ray ({_NOT_REMOTE[name]}; see "What the '
                'context offers remotely" in executors/ray/README.md)',
                name=name,
                obj=self,
            )
        raise AttributeError(f"'RemoteContext' object has no attribute {name!r}", name=name, obj=self)

    def __repr__(self) -> str:
        return f"<RemoteContext {self.name} call_id={self.call_id!r}>"


_NOT_REMOTE = {
    "report_progress": "progress is not sent back from the cluster",
    "deps": "deps are never sent to the cluster: pass what the body needs in its arguments or build it there",
    "execution": "the ToolExecution stays in the driver",
    "tool_set": "the tool set stays in the driver",
    "schema": "the binding-time schema stays in the driver",
    "parent": "the call's parent stays in the driver",
    "token": "the call's token stays in the driver",
    "agent": "use ctx.agent_id and ctx.agent_path",
}


# --------------------------------------------------------------------------
# The wrapper
# --------------------------------------------------------------------------


def _pickled(exc: BaseException) -> bytes | None:
    """The exception itself, if it is one of ours (a DshError keeps its
    class, message and code across the boundary). An attribute that does
    not pickle (a lock, a client, a response object) is left out: the
    class, message and code still cross."""
    if not isinstance(exc, DshError):
        return None
    try:
        return bytes(cloudpickle.dumps(exc))  # type: ignore[no-untyped-call]  # (ray ships no types for it)
    except Exception:  # noqa: BLE001
        pass
    clone = copy.copy(exc)  # (DshError.__reduce__: the same class and message, its attributes shared)
    for attribute, value in list(vars(clone).items()):
        try:
            cloudpickle.dumps(value)  # type: ignore[no-untyped-call]
        except Exception:  # noqa: BLE001 - left out
            delattr(clone, attribute)
    try:
        return bytes(cloudpickle.dumps(clone))  # type: ignore[no-untyped-call]
    except Exception:  # noqa: BLE001 - its class itself does not pickle
        return None


def _error(exc: BaseException, ctx: RemoteContext) -> tuple[Any, ...]:
    contexts, concludes = ctx._take()
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001
        message = "<unprintable thrown value>"
    try:
        tb = "".join(traceback.format_exception(exc))
    except Exception:  # noqa: BLE001
        tb = ""
    return (ERROR, _pickled(exc), type(exc).__qualname__, message, tb, contexts, concludes)


def run_call(body: Callable[[Any, Any], Any], arguments_json: bytes, info: CallInfo, board: Any) -> tuple[Any, ...]:
    """Run one call's body on this worker and return its envelope.

    The body gets the frozen arguments (parsed from lossless JSON) and a
    :class:`RemoteContext`; an ``async def`` body runs as a task on a
    fresh event loop, which the driver's abort cancels at once (see
    :func:`_run_async`). Whatever the body raises (or returns that is not
    lossless JSON) is returned as an envelope, never raised, so the
    driver keeps the deferred contexts. ``ray.cancel`` interrupts the body
    with ``KeyboardInterrupt``: caught here, it gives ``CANCELLED`` and
    whether the body had been entered; so does the ``CancelledError`` of
    an aborted async body.
    """
    key = info[0]
    entered = False
    ctx: RemoteContext | None = None
    try:
        arguments = loads(arguments_json)
        # The start report, before the body: the board answers False if the
        # driver aborted the call first (then the body never runs).
        # (A future, not ray.get: a blocked ray.get lends the task's CPUs
        # to other tasks meanwhile.)
        if not board.start.remote(key).future().result():
            return (CANCELLED, False, None, False)
        entered = True
        ctx = RemoteContext(info, arguments, RemoteSignal(board, key))
        value = body(arguments, ctx)
        if inspect.iscoroutine(value):
            value = _run_async(value, ctx.signal)
        try:
            value_json = dumps(value)
        except DshError as exc:  # not lossless JSON (dumps raises nothing else)
            contexts, concludes = ctx._take()
            return (BAD_OUTPUT, exc.message, contexts, concludes)
        try:
            contexts, concludes = ctx._take(strict=True)
        except Exception as exc:  # noqa: BLE001
            detail = exc.message if isinstance(exc, DshError) else str(exc)
            return (BAD_OUTPUT, f"a deferred context cannot cross to the driver: {detail}", None, False)
        return (OK, value_json, contexts, concludes)
    except (KeyboardInterrupt, TaskCancelledError):
        # ray.cancel's interrupt, or Ray's own cancellation error escaping
        # the body (a ray.get inside a cancelled task raises it).
        if ctx is None:
            return (CANCELLED, entered, None, False)
        contexts, concludes = ctx._take()
        return (CANCELLED, entered, contexts, concludes)
    except asyncio.CancelledError as exc:
        if ctx is not None and ctx.signal._aborted:  # our cancel of an aborted async body
            contexts, concludes = ctx._take()
            return (CANCELLED, True, contexts, concludes)
        return _error(exc, ctx or RemoteContext(info, None, RemoteSignal(None, None)))
    except BaseException as exc:  # noqa: BLE001 - everything a body does is its outcome
        if ctx is None:
            ctx = RemoteContext(info, None, RemoteSignal(None, None))
        return _error(exc, ctx)
    finally:
        if entered:
            try:
                board.finish.remote(key)
            except BaseException:  # noqa: BLE001 - the board is gone; the driver copes
                pass


def _run_async(coroutine: Any, signal: RemoteSignal) -> Any:
    """Run an ``async def`` body's coroutine to completion on a fresh event
    loop, as a task that the driver's abort cancels at once (the board's
    answer, on Ray's callback thread, schedules the cancel on the loop):
    the body gets ``CancelledError`` at the ``await`` it is at, as an async
    body does on the driver. (``ray.cancel``'s ``KeyboardInterrupt`` cannot
    reach a loop waiting for I/O or a timer: it is raised only when Python
    code next runs.)"""

    async def main() -> Any:
        task = asyncio.ensure_future(coroutine)
        loop = asyncio.get_running_loop()

        def cancel() -> None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop is closed: the body has ended
                pass

        signal._call_on_abort(cancel)
        return await task

    return asyncio.run(main())


def _nothing() -> None:
    pass


# --------------------------------------------------------------------------
# Actors
# --------------------------------------------------------------------------


class _Entry:
    __slots__ = ("started", "aborted", "reason", "event")

    def __init__(self) -> None:
        self.started = False
        self.aborted = False
        self.reason: str | None = None
        self.event = asyncio.Event()


class SignalBoard:
    """One per driver process (an async Ray actor, no CPU): which calls
    have started, which the driver has aborted.

    An async actor does not run one caller's messages in the order they
    were sent, so a call's ``finish`` may run before its ``watch``, or the
    driver's ``forget`` before a late ``abort``. A call that finished or
    was forgotten is therefore remembered as done (the last
    ``_DONE_KEPT`` keys): a later message about it answers at once and
    creates nothing, so no entry outlives its call.
    """

    _DONE_KEPT = 65536

    def __init__(self) -> None:
        self._calls: dict[str, _Entry] = {}
        self._done: dict[str, None] = {}

    def _entry(self, key: str) -> _Entry | None:
        entry = self._calls.get(key)
        if entry is None:
            if key in self._done:
                return None
            entry = self._calls[key] = _Entry()
        return entry

    def start(self, key: str) -> bool:
        """A worker is about to enter ``key``'s body: False if the driver
        aborted it first (the body then never runs)."""
        entry = self._entry(key)
        if entry is None or entry.aborted:
            return False
        entry.started = True
        return True

    async def watch(self, key: str) -> tuple[bool, str | None]:
        """A worker entered ``key``: resolves ``(True, reason)`` once it is
        aborted, ``(False, None)`` once it finished."""
        entry = self._calls.get(key)
        if entry is None:
            return (False, None)  # it finished
        if not entry.aborted:
            await entry.event.wait()
        return (entry.aborted, entry.reason)

    def abort(self, key: str, reason: str | None = None) -> bool:
        """The driver aborts ``key``; whether its start had been reported."""
        entry = self._entry(key)
        if entry is None:
            return True  # it already finished: it had started
        if not entry.aborted:
            entry.aborted = True
            entry.reason = reason
            entry.event.set()
        return entry.started

    def finish(self, key: str) -> None:
        """The worker's body returned (or the driver is done with ``key``)."""
        entry = self._calls.pop(key, None)
        if entry is not None:
            entry.event.set()
        done = self._done
        done[key] = None
        if len(done) > self._DONE_KEPT:
            del done[next(iter(done))]

    forget = finish

    def size(self) -> int:
        """How many calls it tracks (tests: nothing is left behind)."""
        return len(self._calls)


class ToolHost:
    """The Ray actor that keeps one instance of a stateful tool class:
    ``cls(*args, **kwargs)`` once, then each call runs
    ``getattr(instance, method)(args, ctx)`` through :func:`run_call`."""

    def __init__(self, factory: bytes) -> None:
        cls, args, kwargs = cloudpickle.loads(factory)
        self._instance = cls(*args, **kwargs)

    def call(self, method: str, arguments_json: bytes, info: CallInfo, board: Any) -> tuple[Any, ...]:
        try:
            fn = getattr(self._instance, method)
        except AttributeError:
            exc = AttributeError(f"{type(self._instance).__qualname__} has no method {method!r}")
            return _error(exc, RemoteContext(info, None, RemoteSignal(None, None)))
        return run_call(fn, arguments_json, info, board)

    def ping(self) -> bool:
        return True


def task_entry(body: Callable[[Any, Any], Any], name: str) -> Callable[[bytes, CallInfo, Any], tuple[Any, ...]]:
    """The function a Ray task of tool ``name`` runs: ``body`` bound once
    (exported to the cluster with the remote function, not per call)."""

    def entry(arguments_json: bytes, info: CallInfo, board: Any) -> tuple[Any, ...]:
        return run_call(body, arguments_json, info, board)

    entry.__name__ = f"dsh_tool[{name}]"
    entry.__qualname__ = entry.__name__
    return entry
