"""One ``run_code`` run: the worker's messages, the sub-call schedule, the
durable log, and how the run ends.

A :class:`Run` lives on the thread that runs the ``run_code`` body (the
batch's executor actor: ``run_code`` is exclusive, so it runs inline). It
is one small state machine driven by :meth:`Run._loop`: a ``select`` over
the worker's stdout, its stderr, its stdin (while output is queued) and a
wake-up pipe that the sub-batch and the abort callback write to, woken at
least every :data:`FOLDER_CHECK_SECONDS` to measure the working folder.

Deadline: ``timeout_ms`` from the run's start, standing still while a
sub-call waits for the approval service (a person deciding: see
:meth:`Run.approval_asked`), as a tool's own ``timeout_ms`` does not count
its approval.

Output limits: the captured text (``out`` messages), the bytes the worker
writes to its fd 2 and the returned value together stay within
``max_output_bytes``; the working folder within ``max_folder_mb`` and
:data:`~.workers.MAX_FOLDER_ENTRIES` entries (measured while the program
runs and once more when it returns; each file is also capped by
``RLIMIT_FSIZE``).

Sub-calls are a **sub-batch** of the executor (``open_sub_batch``, opened
with the program's first call): the runtime's one batch state machine
(``dsh_actors/scheduling/batch.py``) schedules them, on the runtime's
executor and call actors, with a batch's rules. They start in the order
the program made them, at most ``max_parallel_sub_calls`` at once; an
exclusive one starts once every call before it has committed, and nothing
starts until it has committed (its post-execute included); each is
prepared (pre-execute, approval, guards) as it is about to start. Unlike a
model's batch, a sub-call commits as soon as it has settled (a program may
wait for one result before it makes the call that lets an earlier one
finish). The run feeds each call to the sub-batch (``Fed``) and seals it
when the run ends; the sub-batch's :class:`_Sink` logs a sub-call's start
and settle events and hands its result back. Each call is fed with a
signal of its own (``SubCall.cancel``): when the program cancels its await
(a ``cancel`` message) that call alone is aborted, as the run's signal
aborts them all.

A :class:`SubCall` is PENDING (made, no result yet), SETTLED (committed:
its result is back), or SKIPPED (an unknown tool: never fed). Invariants:

* Once the run has ended (``ended``), nothing starts: the run's signal has
  fired, so the sub-batch halts (unstarted sub-calls commit
  ``ABORTED_BEFORE_DISPATCH``, running ones are asked to stop), and it is
  sealed. :meth:`Run.execute` returns only once the sub-batch has ended: a
  started sub-call is never abandoned.
* The worker is killed (its whole process group) as soon as the run ends,
  whatever the reason, and reaped before :meth:`Run.execute` returns.

Results go back to the program straight from the thread that commits them
(the sub-batch's executor actor: one thread hop less per call), under
``_send_lock``; once the run's signal has fired, results are left to the
run's thread, which drops them once the run has ended (nothing an abort
caused reaches the program).
"""

from __future__ import annotations

import contextvars
import math
import os
import queue
import re
import selectors
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Final

from loguru import logger

from dsh_actors import (
    AbortController,
    AbortSignal,
    CodeRunFailedError,
    DshError,
    ErrorCode,
    ToolBatchInput,
    ToolRunContext,
    dumps,
    loads,
    thaw,
)

from . import protocol
from .subcalls import (
    OUTCOMES,
    Result,
    SubCall,
    SubState,
    failure,
    forward,
    log_settle,
    log_start,
    safe_str,
)
from .workers import MAX_FOLDER_ENTRIES, Worker, exit_description, folder_usage

if TYPE_CHECKING:  # pragma: no cover
    from dsh_actors import ToolRuntime

    from .signatures import Binding

__all__ = ["Ending", "Run", "RunSettings", "cpu_seconds"]

#: Most tool calls one program may make.
MAX_SUB_CALLS: Final = 10_000
#: A failed run's message lists this many of the calls its program made at
#: most: the first and the last half of them, the ones between tallied (the
#: message goes to the model: 10,000 lines would be a few hundred KB).
LISTED_CALLS: Final = 40

#: How often the working folder's size is measured while a program runs.
FOLDER_CHECK_SECONDS: Final = 0.1


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSettings:
    """What a run takes from its executor: its limits as values, and the
    two things it asks of it (a sub-batch for the program's calls, and
    taking its worker back). The run never reads the executor's state."""

    timeout_ms: float
    max_parallel_sub_calls: int
    max_output_bytes: int
    max_message_bytes: int
    max_folder_mb: int
    memory_limit_mb: int
    limits: Mapping[str, Any]
    """The resource limits the worker applies (the ``run`` message's)."""
    own_tools: tuple[str, ...]
    """The executor's own tools (``run_code``): not callable from a program
    (the ``run`` message's ``own``, named when a program calls one)."""
    open_sub_batch: Callable[..., Any]
    """``open_sub_batch(batch, sink, limit)``: the executor's sub-batch."""
    discard: Callable[[Worker], None]
    """Take the run's worker back (it is not reused) once the run ends."""


@dataclass(frozen=True, slots=True)
class Ending:
    """How a run ended: ``kind`` None for a success (``value`` set)."""

    kind: str | None
    headline: str = ""
    traceback: str = ""
    value: Any = None


class _Phase(str, Enum):
    STARTING = "starting"  # waiting for the worker's ready
    RUNNING = "running"  # the program runs
    ENDED = "ended"  # the worker is dead; sub-calls may still drain


class Run:
    """Runs one program on ``worker`` for the ``run_code`` call ``ctx``
    (see the module docstring)."""

    def __init__(
        self,
        settings: RunSettings,
        rt: ToolRuntime,
        ctx: ToolRunContext,
        worker: Worker,
        code: str,
        bindings: Sequence[Binding],
        schemas: Mapping[str, Any],
    ) -> None:
        self._settings = settings
        self._rt = rt
        self._ctx = ctx
        self._worker = worker
        self._code = code
        self._bindings = bindings
        self._schemas = schemas
        self._limit = settings.max_parallel_sub_calls
        self._max_output = settings.max_output_bytes
        agent = ctx.agent
        self._session = None if agent is None else agent.session
        self._controller = AbortController()
        self._signal = AbortSignal.any(ctx.signal, self._controller.signal)
        self._framer = protocol.LineFramer(settings.max_message_bytes)
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_lock = threading.Lock()
        self._wake_closed = False
        # (sub-call, its result, whether the sub-batch sent it already)
        self._completions: queue.SimpleQueue[tuple[SubCall, Result, bool]] = queue.SimpleQueue()
        self._sub: Any = None  # the sub-batch (a SubBatch), opened with the first call
        self._stop_lock = threading.Lock()
        self._stop: Ending | None = None
        self._ended = threading.Event()  # set once the run has ended and its worker is reaped
        # State of the schedule (the run's thread only).
        self._phase = _Phase.STARTING
        self._calls: list[SubCall] = []
        self._by_id: dict[str, SubCall] = {}  # the fed ones (the sink reads it: written before feeding)
        self._output: list[str] = []
        self._output_bytes = 0
        self._writing = False  # stdin registered for EVENT_WRITE
        self._thread = 0  # the run's thread
        # What goes to the worker: the run's thread and the sub-batch's
        # executor actor (which sends results itself) write under this lock. Invariant:
        # nothing is written once ``accepting`` is False (the run ended, the
        # worker's pipes may be closed).
        self._send_lock = threading.Lock()
        self._accepting = False
        self._outbox = bytearray()
        self._ending: Ending | None = None
        self._deadline = time.monotonic() + settings.timeout_ms / 1000
        # While a sub-call waits for the approval service (a person), the
        # deadline stands still: ``_asking`` holds those sub-calls, and
        # ``_paused_at`` when the first began (under ``_clock_lock``: the
        # threads preparing and committing sub-calls write them).
        self._clock_lock = threading.Lock()
        self._asking: set[str] = set()
        self._paused_at: float | None = None
        self._max_folder = settings.max_folder_mb << 20
        self._folder_check = time.monotonic() + FOLDER_CHECK_SECONDS
        self._reading_stderr = False
        self._context = contextvars.copy_context()  # the run_code call's (made by its body)

    def __repr__(self) -> str:
        return f"<Run {self._ctx.call_id} {self._phase.value} calls={len(self._calls)}>"

    @property
    def ended(self) -> bool:
        """Whether the run has ended (the worker is dead)."""
        return self._phase is _Phase.ENDED

    def wait_ended(self, timeout: float) -> bool:
        """Wait (any thread) until the run has ended and its worker is
        killed and reaped; whether it has. Its sub-calls may still drain."""
        return self._ended.wait(timeout)

    # -- the outside world ----------------------------------------------------

    def request_stop(self, kind: str, headline: str) -> None:
        """Ask the run to end (any thread): the first request wins."""
        with self._stop_lock:
            if self._stop is None:
                self._stop = Ending(kind=kind, headline=headline)
        self._wake()

    def approval_asked(self, call_id: str) -> None:
        """Sub-call ``call_id`` waits for the approval service (any thread:
        the one preparing it). Until every sub-call that waits has its
        answer (:meth:`approval_answered`), the deadline stands still: the
        time a person takes does not count against ``timeout_ms``, as it
        does not against a tool's own (``policies.timeout`` starts its
        clock after the approval)."""
        with self._clock_lock:
            if not self._asking:
                self._paused_at = time.monotonic()
            self._asking.add(call_id)

    def approval_answered(self, call_id: str) -> None:
        """Sub-call ``call_id`` no longer waits for a person (its answer
        came, or it settled: any thread); the deadline moves on by the time
        the program waited, once no sub-call waits any more."""
        with self._clock_lock:
            if call_id not in self._asking:
                return
            self._asking.discard(call_id)
            paused_at = self._paused_at
            if self._asking or paused_at is None:
                return
            self._paused_at = None
            self._deadline += time.monotonic() - paused_at

    def _deadline_at(self) -> float:
        """When the run times out, as of now: never while a sub-call waits
        for a person (the run's thread)."""
        with self._clock_lock:
            return math.inf if self._paused_at is not None else self._deadline

    def _wake(self) -> None:
        with self._wake_lock:
            if self._wake_closed:
                return
            try:
                os.write(self._wake_w, b"x")
            except BlockingIOError:
                pass  # the pipe is full: the run is awake anyway

    # -- the run ------------------------------------------------------------

    def execute(self) -> dict[str, Any]:
        """Run the program; its value, or raise ``CodeRunFailedError``.
        Returns only once the worker is reaped and every started sub-call
        has settled."""
        self._thread = threading.get_ident()
        unsubscribe = self._ctx.signal.add_callback(
            lambda _signal: self.request_stop("aborted", "the tool batch was aborted; the program was killed")
        )
        try:
            # The run waits for work this runtime does (the sub-batch): a
            # call actor's or executor actor's slot serves it meanwhile.
            with self._rt.waiting():
                try:
                    self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
                    self._selector.register(self._worker.stdout_fd, selectors.EVENT_READ, "out")
                    self._selector.register(self._worker.stderr_fd, selectors.EVENT_READ, "err")
                    self._reading_stderr = True
                    self._loop()
                except BaseException as exc:  # noqa: BLE001 - a bug: end the run cleanly all the same
                    logger.opt(exception=exc).error("the PTC run of {} failed internally", self._ctx.call_id)
                    self._end(Ending(kind="internal", headline=f"the PTC run failed internally: {safe_str(exc)}"))
                finally:
                    unsubscribe()
                    self._end(Ending(kind="internal", headline="the PTC run failed internally"))  # no-op once ended
                    self._drain_sub_batch()
        finally:
            self._signal.close()
            with self._wake_lock:
                self._wake_closed = True
                os.close(self._wake_r)
                os.close(self._wake_w)
            self._selector.close()
            self._settings.discard(self._worker)
        ending = self._ending
        assert ending is not None
        if ending.kind is None:
            return {"result": ending.value, "output": "".join(self._output)}
        raise CodeRunFailedError(ending.kind, self._detail(ending))

    def _requested_stop(self) -> Ending | None:
        """A stop asked for from outside (an abort, the executor closing)."""
        stop = self._stop
        if stop is None and self._ctx.signal.aborted:
            stop = Ending(kind="aborted", headline="the tool batch was aborted; the program was killed")
        return stop

    def _check_stop(self) -> bool:
        """End the run if a stop was asked for, the deadline has passed or
        the working folder is past its limits; whether the run has ended."""
        if self._phase is _Phase.ENDED:
            return True
        stop = self._requested_stop()
        if stop is not None:
            self._end(stop)
        elif time.monotonic() >= self._deadline_at():
            ms = self._settings.timeout_ms
            shown = int(ms) if float(ms).is_integer() else ms
            if self._phase is _Phase.STARTING:  # the program never started: say why, as far as stderr tells
                self._worker.read_stderr()
                tail = self._worker.stderr_tail()
                ending = Ending(
                    kind="timeout",
                    headline=f"the worker process was not ready within {shown} ms (the program did not start)",
                    traceback=f"Worker stderr:\n{tail}" if tail else "",
                )
            else:
                ending = Ending(kind="timeout", headline=f"the program did not finish within {shown} ms and was killed")
            self._end(ending)
        elif self._phase is _Phase.RUNNING and time.monotonic() >= self._folder_check:
            self._check_folder()
            self._folder_check = time.monotonic() + FOLDER_CHECK_SECONDS
        return self.ended

    def _check_folder(self) -> bool:
        """End the run if the working folder is past its limits; whether it is."""
        size, entries = folder_usage(self._worker.workdir, MAX_FOLDER_ENTRIES)
        if entries > MAX_FOLDER_ENTRIES:
            headline = f"the program made more than {MAX_FOLDER_ENTRIES} files and folders and was killed"
        elif size > self._max_folder:
            headline = (
                f"the program wrote more than {self._settings.max_folder_mb} MB "
                f"({size} bytes) to its working folder and was killed"
            )
        else:
            return False
        self._end(Ending(kind="disk", headline=headline))
        return True

    def _sub_batch_ended(self, reply: Any) -> None:
        """The sub-batch replied (any thread): normally after the run sealed
        it; before that only if it failed (a bug), and then the calls the
        program makes would never be answered: the run ends."""
        if not reply.cancelled() and reply.exception() is not None:
            self.request_stop(
                "internal", f"the program's tool calls could not be scheduled: {safe_str(reply.exception())}"
            )

    def _drain_sub_batch(self) -> None:
        """After the run ended: wait for the sub-batch to end (it was sealed
        and halted by the run's signal; a started sub-call is never
        abandoned), then settle every sub-call it committed."""
        sub_batch = self._sub
        if sub_batch is not None:
            try:
                sub_batch.reply.result()
            except BaseException as exc:  # noqa: BLE001 - a log failure or a stuck body: the run has ended already
                logger.opt(exception=exc).debug("the sub-batch of {} ended with {!r}", self._ctx.call_id, exc)
        self._drain_completions()

    def _loop(self) -> None:
        while self._phase is not _Phase.ENDED:
            deadline = self._deadline_at()
            wake = deadline if self._phase is _Phase.STARTING else min(deadline, self._folder_check)
            events = self._selector.select(max(0.0, wake - time.monotonic()))
            # A stop or the deadline before the worker's news: what the
            # program did after it does not count.
            self._check_stop()
            for key, _mask in events:
                if self.ended and key.data != "wake":  # (read again: a handler above may have ended it)
                    continue
                if key.data == "wake":
                    self._drain_wake()
                elif key.data == "out":
                    self._read_worker()
                elif key.data == "err":
                    self._read_stderr()
                elif key.data == "in":
                    self._flush_outbox()
            self._check_stop()
            self._drain_completions()
            self._sync_writer()

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    # -- the worker's side ------------------------------------------------------

    def _read_worker(self) -> None:
        fd = self._worker.stdout_fd
        while self._phase is not _Phase.ENDED:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self._worker_gone()
                return
            # Each read is news (this loop reads on while the pipe has
            # more): a stop asked for before it was written wins.
            if self._check_stop():
                return
            try:
                lines = self._framer.feed(chunk)
            except protocol.FrameTooLong as exc:
                self._end(_too_long(exc, self._settings.max_message_bytes))
                return
            for line in lines:
                self._handle(line)
                if self.ended:
                    return

    def _read_stderr(self) -> None:
        """What the worker wrote to its fd 2 counts as output (it is kept
        as the stderr tail, shown when a run fails)."""
        read = self._worker.read_stderr()
        if read < 0:  # closed: nothing more to read
            if self._reading_stderr:
                self._selector.unregister(self._worker.stderr_fd)
                self._reading_stderr = False
            return
        if self._phase is _Phase.STARTING:
            return  # the launcher's or the interpreter's, before the run: kept, not counted
        self._output_bytes += read
        if self._output_bytes > self._max_output:
            tail = self._worker.stderr_tail()
            self._end(
                Ending(
                    kind="output",
                    headline=(
                        f"the program wrote more than {self._max_output} bytes of output "
                        "(its stderr file descriptor included) and was killed"
                    ),
                    traceback=f"Worker stderr (its end):\n{tail}" if tail else "",
                )
            )

    def _protocol_error(self, problem: str) -> None:
        self._end(Ending(kind="protocol", headline=f"the worker broke the protocol: {problem}"))

    def _handle(self, line: bytes) -> None:
        try:
            message = loads(line)
        except DshError as exc:
            self._protocol_error(f"a line that is not JSON ({exc})")
            return
        if not isinstance(message, Mapping):
            self._protocol_error(f"a message that is not a JSON object but {_shown(message)}")
            return
        kind = message.get("t")
        if type(kind) is not str:
            self._protocol_error(f'a message without its kind (a "t" string): {_shown(kind)}')
            return
        if self._phase is _Phase.STARTING:
            if kind != protocol.READY:
                self._protocol_error(f"expected {protocol.READY!r}, got {_shown(kind)}")
                return
            version = message.get("v")
            if type(version) is not int or version != protocol.VERSION:
                self._protocol_error(f"the worker speaks version {_shown(version)}, not {protocol.VERSION}")
                return
            self._read_stderr()  # what was written before ready is not the program's
            self._phase = _Phase.RUNNING
            with self._send_lock:
                self._accepting = True
            self._send(
                {
                    "t": protocol.RUN,
                    "v": protocol.VERSION,
                    "code": self._code,
                    "tools": [b.wire() for b in self._bindings],
                    "limits": dict(self._settings.limits),
                    "own": list(self._settings.own_tools),
                }
            )
            return
        if kind == protocol.OUT:
            data = message.get("data")
            if type(data) is not str:
                self._protocol_error("an out message without text")
                return
            self._capture(data)
        elif kind == protocol.CALL:
            self._on_call(message)
        elif kind == protocol.CANCEL:
            self._on_cancel(message)
        elif kind == protocol.PROGRESS:
            self._on_progress(message)
        elif kind == protocol.DONE:
            self._on_done(message)
        else:
            self._protocol_error(f"an unexpected message {_shown(kind)}")

    def _capture(self, data: str) -> None:
        encoded = data.encode("utf-8")
        room = self._max_output - self._output_bytes
        if len(encoded) > room:
            self._output.append(encoded[: max(room, 0)].decode("utf-8", "ignore"))
            self._output_bytes = self._max_output
            self._end(
                Ending(
                    kind="output",
                    headline=f"the program printed more than {self._max_output} bytes and was killed",
                )
            )
            return
        self._output.append(data)
        self._output_bytes += len(encoded)

    def _on_call(self, message: Mapping[str, Any]) -> None:
        n = len(self._calls) + 1
        ident = message.get("id")
        if type(ident) is not int or ident != n:
            self._protocol_error(f"call id {_shown(ident)}, expected {n}")
            return
        name = message.get("name")
        arguments = message.get("args")
        if type(name) is not str or not isinstance(arguments, Mapping):
            self._protocol_error("a call without a tool name or an arguments object")
            return
        if n > MAX_SUB_CALLS:
            headline = (
                f"the program made more than {MAX_SUB_CALLS:,} tool calls, the most one run may make: "
                "split the work over several runs"
            )
            self._end(Ending(kind="limit", headline=headline))
            return
        call_id = f"{self._ctx.call_id}:ptc:{n}"
        schema = self._schemas.get(name)
        sub = SubCall(n, call_id, name, schema)
        self._calls.append(sub)
        if schema is None:  # only a worker that ignores its bindings gets here
            sub.state = SubState.SKIPPED
            shown = name if len(name) <= _SHOWN_CHARS else f"{name[:_SHOWN_CHARS]}..."
            sub.result = failure(f'unknown tool "{shown}"', name="ToolNotFoundError", code=str(ErrorCode.UNKNOWN_TOOL))
            self._reply(sub, sub.result)
            return
        sub_batch = self._sub
        if sub_batch is None:
            try:
                sub_batch = self._sub = self._settings.open_sub_batch(
                    ToolBatchInput(
                        calls=(),
                        signal=self._signal,
                        max_parallel_tool_calls=self._limit,
                        agent=self._ctx.agent,
                        tool_set=self._ctx.tool_set,
                        context=self._context,
                    ),
                    _Sink(self._rt, self._ctx, self._session, self._by_id, self._committed, self.request_stop),
                    self._limit,
                )
            except DshError as exc:  # the runtime is stopping
                sub.state = SubState.SKIPPED
                self._end(Ending(kind="aborted", headline=f"the program's tool calls cannot run: {exc.message}"))
                return
            sub_batch.reply.add_done_callback(self._sub_batch_ended)
        self._by_id[call_id] = sub
        sub.cancel = AbortController()
        sub_batch.feed(
            call_id,
            name,
            arguments,
            schema=schema,
            root_call_id=self._ctx.root_call_id,
            parent=self._ctx.token,
            signal=sub.cancel.signal,
        )

    def _on_cancel(self, message: Mapping[str, Any]) -> None:
        """The program stopped waiting for one of its calls (its task was
        cancelled): that sub-call alone is aborted, which frees its place
        under the sub-call limit once its body returns. Its result, if it
        still comes, is dropped by the worker."""
        ident = message.get("id")
        if type(ident) is not int or not 1 <= ident <= len(self._calls):
            self._protocol_error(f"a cancel of call {_shown(ident)}, which the program did not make")
            return
        control = self._calls[ident - 1].cancel
        if control is not None:  # (None: never fed, an unknown tool's; a settled one's abort changes nothing)
            control.abort("the program cancelled this tool call (it stopped waiting for its result)")

    def _on_progress(self, message: Mapping[str, Any]) -> None:
        """The program's ``report_progress``: the ``run_code`` call's
        ``tools/progress`` (on the run's thread, the body's)."""
        try:
            progress: Any = message.get("progress")  # (checked by report_progress: a bad one is a protocol error)
            self._ctx.report_progress(progress, message.get("total"), message.get("message"))
        except (TypeError, ValueError) as exc:
            self._protocol_error(f"a progress message with {exc}")

    def _on_done(self, message: Mapping[str, Any]) -> None:
        if message.get("ok") is True:
            if "result" not in message:
                self._protocol_error("a done message without a result")
                return
            self._read_stderr()  # written before done: it counts
            if self.ended or self._check_folder():
                return
            result = message.get("result")
            size = len(dumps(result))
            if self._output_bytes + size > self._max_output:
                self._end(
                    Ending(
                        kind="output",
                        headline=(
                            f"the program's output and returned value ({self._output_bytes + size} bytes) "
                            f"are more than {self._max_output} bytes"
                        ),
                    )
                )
                return
            self._end(Ending(kind=None, value=thaw(result)))
            return
        kind = message.get("kind")
        headline = message.get("message")
        tb = message.get("traceback", "")
        if kind not in protocol.FAILURE_KINDS or type(headline) is not str or type(tb) is not str:
            self._protocol_error("a malformed done message")
            return
        self._end(Ending(kind=kind, headline=headline, traceback=tb))

    def _worker_gone(self) -> None:
        """The worker closed its stdout without a ``done``."""
        stop = self._requested_stop()
        if stop is not None:  # killed by close(), or an abort raced with it
            self._end(stop)
            return
        worker = self._worker
        running = worker.running()  # before the kill: a status of -9 may be ours
        status = worker.kill()
        tail = worker.stderr_tail()
        shown = "" if status is None else f" ({exit_description(status)})"
        when = "before it was ready" if self._phase is _Phase.STARTING else "without finishing the run"
        if running:
            kind, headline = (
                "crashed",
                f"the worker process closed its protocol pipe {when} and was killed (it was still running; "
                f"{_OWN_DESCRIPTORS})",
            )
        elif status == protocol.EXIT_PIPE_CLOSED:
            kind, headline = (
                "crashed",
                f"the worker process closed its protocol pipe {when} and exited ({_OWN_DESCRIPTORS})",
            )
        elif status == -signal.SIGXCPU:
            kind, headline = "cpu", "the program used up its CPU time limit and was killed"
        elif status == protocol.EXIT_MEMORY:
            kind, headline = "memory", f"the program ran out of memory (limit {self._settings.memory_limit_mb} MB)"
        elif self._phase is _Phase.STARTING:
            kind, headline = "crashed", f"the worker process exited before it was ready{shown}"
        elif status is not None and status >= 0:  # (a status the worker does not use: os._exit())
            kind, headline = (
                "crashed",
                f"the worker process exited without finishing the run{shown}: "
                "a program ends by returning or raising, not by ending its process",
            )
        else:
            kind, headline = "crashed", f"the worker process exited without finishing the run{shown}"
        self._end(Ending(kind=kind, headline=headline, traceback=f"Worker stderr:\n{tail}" if tail else ""))

    def _send(self, message: Mapping[str, Any]) -> None:
        """Queue ``message`` for the worker and write what the pipe takes
        (any thread; the run's thread then waits for the pipe to take the
        rest). Dropped once the run has ended."""
        line = dumps(message) + b"\n"  # raises before anything is queued
        with self._send_lock:
            if not self._accepting:
                return
            self._outbox += line
            self._write_locked()
            left = bool(self._outbox)
        if left and threading.get_ident() != self._thread:
            self._wake()  # the run's thread registers for EVENT_WRITE

    def _write_locked(self) -> None:
        fd = self._worker.stdin_fd
        while self._outbox:
            try:
                written = os.write(fd, self._outbox)
            except BlockingIOError:
                return
            except OSError:  # the worker is gone; its stdout's EOF says how
                self._outbox.clear()
                return
            del self._outbox[:written]

    def _flush_outbox(self) -> None:
        """EVENT_WRITE on the worker's stdin (the run's thread)."""
        with self._send_lock:
            if self._accepting:
                self._write_locked()

    def _sync_writer(self) -> None:
        """Watch the worker's stdin exactly while output waits (the run's thread)."""
        with self._send_lock:
            want = self._accepting and bool(self._outbox)
        if want != self._writing:
            fd = self._worker.stdin_fd
            if want:
                self._selector.register(fd, selectors.EVENT_WRITE, "in")
            else:
                self._selector.unregister(fd)
            self._writing = want

    def _reply(self, sub: SubCall, result: Result) -> None:
        """Send ``sub``'s outcome to the program (any thread)."""
        if result.is_error:
            error = result.error
            assert error is not None
            code = None if error.info is None else str(error.info.code)
            error_name = None if error.info is None else str(error.info.name)
            self._send(
                {
                    "t": protocol.RESULT,
                    "id": sub.n,
                    "ok": False,
                    "name": sub.name,
                    "error": error.message,
                    "code": code,
                    "error_name": error_name,
                    "sub_call_id": sub.call_id,
                }
            )
        else:
            try:
                self._send({"t": protocol.RESULT, "id": sub.n, "ok": True, "value": result.value})
            except DshError as exc:  # e.g. a value nested as deep as the core allows, plus the envelope
                self._reply(sub, failure(f"the value of tool {sub.name!r} cannot be sent to the program: {exc}"))

    # -- ending ------------------------------------------------------------

    def _end(self, ending: Ending) -> None:
        """End the run: kill the worker's group, stop the sub-calls."""
        if self._phase is _Phase.ENDED:
            return
        self._phase = _Phase.ENDED
        self._ending = ending
        with self._send_lock:  # after this, no thread writes to the worker
            self._accepting = False
            self._outbox.clear()
        for fd in (self._worker.stdout_fd, self._worker.stdin_fd, self._worker.stderr_fd):
            try:
                self._selector.unregister(fd)
            except (KeyError, ValueError):
                pass
        self._writing = False
        self._reading_stderr = False
        self._worker.kill()
        self._ended.set()
        self._controller.abort(f"the run ended ({ending.kind or 'returned'})")
        if self._sub is not None:
            self._sub.seal()  # halted by the abort: what has not started never will

    def _detail(self, ending: Ending) -> str:
        parts = [ending.headline]
        if ending.traceback:
            parts.append(ending.traceback)
        made = self._calls
        if made:
            parts.append(_listing(made))
        else:
            parts.append("The program made no tool calls.")
        output = "".join(self._output)
        if output:
            parts.append(f"Output before the run ended:\n{output}")
        return "\n\n".join(parts)

    # -- the sub-batch's results ---------------------------------------------

    def _committed(self, sub: SubCall, result: Result, send: bool) -> None:
        """``sub`` committed (the sub-batch's executor actor): straight to
        the program (one thread hop less), unless the run is being stopped
        (or ``send`` is False: its log failed): then the run's thread
        decides, and a result caused by the abort never reaches the
        program."""
        self.approval_answered(sub.call_id)  # (asked and never answered: no service, it raised, an abort)
        direct = send and not self._signal.aborted
        self._completions.put((sub, result, direct))
        if direct:
            self._reply(sub, result)
        self._wake()

    def _drain_completions(self) -> None:
        while True:
            try:
                sub, result, replied = self._completions.get_nowait()
            except queue.Empty:
                return
            sub.state = SubState.SETTLED
            sub.result = result if result.is_error else None  # (a success's is not kept: see SubCall)
            forward(self._ctx, sub, result)
            if not replied:
                self._reply(sub, result)  # dropped if the run has ended


class _Sink:
    """The sub-batch's ``FeedSink`` for one run: it logs each sub-call's
    ``tool/ptc-dispatch-start`` as it starts and its ``tool/ptc-dispatch``
    as it commits (with a session), and hands the result to the run.
    Called on the sub-batch's executor actor only; ``subs`` is written by
    the run's thread before it feeds the call."""

    __slots__ = ("_rt", "_ctx", "_session", "_subs", "_on_result", "_stop", "_started", "_broken")

    def __init__(
        self,
        rt: ToolRuntime,
        ctx: ToolRunContext,
        session: Any,
        subs: Mapping[str, SubCall],
        on_result: Callable[[SubCall, Result, bool], None],
        stop: Callable[[str, str], None],
    ) -> None:
        self._rt = rt
        self._ctx = ctx
        self._session = session
        self._subs = subs
        self._on_result = on_result
        self._stop = stop
        self._started: set[str] = set()  # sub-calls whose start was logged
        self._broken = False  # a log write failed: the run is ending

    def started(self, execution: Any) -> None:
        session = self._session
        if session is None:
            return
        sub = self._subs[execution.call_id]
        try:
            log_start(session, self._ctx, sub, execution.arguments)  # (as fed: frozen, read-only)
        except BaseException as exc:
            self._broken = True
            self._stop("internal", f"the session log could not be written: {safe_str(exc)}")
            raise
        self._started.add(sub.call_id)

    def committed(self, execution: Any, result: Any) -> None:
        sub = self._subs[execution.call_id]
        session = self._session
        if session is not None and not self._broken and sub.call_id in self._started:
            try:
                log_settle(self._rt, session, self._ctx, sub, execution, result)
            except BaseException as exc:  # noqa: BLE001 - the program must not go on unlogged
                self._broken = True
                self._stop("internal", f"the session log could not be written: {safe_str(exc)}")
                self._on_result(sub, result, False)
                return
        self._on_result(sub, result, True)


_OWN_DESCRIPTORS: Final = "a program must not close file descriptors it did not open"

_KIND_OF_MESSAGE: Final = re.compile(rb'^\{\s*"t"\s*:\s*"([a-z_]+)"')


def _too_long(exc: protocol.FrameTooLong, limit: int) -> Ending:
    """The ending for a message past the limit: the program's own doing
    when it is its returned value or a tool call's arguments (it can pass
    less, or use files), else the worker's."""
    kind = _KIND_OF_MESSAGE.match(exc.head)
    what = None if kind is None else kind.group(1)
    if what == protocol.DONE.encode():
        return Ending(kind="output", headline=f"the program returned a value of more than {limit} bytes as JSON")
    if what == protocol.PROGRESS.encode():
        return Ending(
            kind="output",
            headline=f"the program reported progress with a message of more than {limit} bytes as JSON",
        )
    if what == protocol.CALL.encode():
        return Ending(
            kind="output",
            headline=(
                f"the program called a tool with arguments of more than {limit} bytes as JSON; "
                "pass large data through files in the working folder"
            ),
        )
    return Ending(kind="protocol", headline=f"the worker sent {exc}")


_SHOWN_CHARS: Final = 60
_JSON_KINDS: Final = {bool: "a boolean", type(None): "null"}


def _shown(value: object) -> str:
    """A value the worker sent (lossless JSON, frozen), as a protocol error
    shows it: a str's repr or a number, cut short, else its JSON kind
    (never a Python repr of the frozen containers)."""
    if type(value) is str:
        return repr(value) if len(value) <= _SHOWN_CHARS else f"{value[:_SHOWN_CHARS]!r}... ({len(value):,} characters)"
    if type(value) in (int, float):
        return str(value)[:_SHOWN_CHARS]
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (tuple, list)):
        return "an array"
    return _JSON_KINDS.get(type(value), "a value")


def cpu_seconds(timeout_ms: float) -> int:
    """The CPU-time limit that backs up a wall-clock timeout."""
    return max(1, math.ceil(timeout_ms / 1000)) + 1


def _listing(made: list[SubCall]) -> str:
    """The calls a failed run's program made, one line each, in the order
    made; past ``LISTED_CALLS``, the first and the last ``LISTED_CALLS /
    2`` and a tally of the ones between."""
    lines = [f"Tool calls the program made ({len(made):,}):"]
    if len(made) <= LISTED_CALLS:
        lines.extend(sub.summary() for sub in made)
        return "\n".join(lines)
    half = LISTED_CALLS // 2
    between = made[half:-half]
    tally = Counter(sub.outcome() for sub in between)
    counts = ", ".join(f"{tally[word]:,} {word}" for word in OUTCOMES if tally[word])
    lines.extend(sub.summary() for sub in made[:half])
    lines.append(f"- ... {len(between):,} more: {counts}")
    lines.extend(sub.summary() for sub in made[-half:])
    return "\n".join(lines)
