"""``dsh-actors run BATCH.json --tools MODULE``: run one batch of tool calls.

``--mcp "COMMAND ..."`` (repeatable) also mounts the tools of a stdio MCP
server, ``--mcp-config FILE`` (repeatable) those of each server a JSON file
lists (:mod:`.mcp_servers`); ``--tools``, ``--mcp``, ``--mcp-config`` or
several.

The batch runs as one model step (``LogStep(turn=1, step=1)``) of one agent
(``--agent``, default ``cli``) whose session is in memory, or the JSONL file
``--log`` names, so the cards printed afterwards are drawn from the logged
events exactly as ``dsh-actors replay`` draws them. That file is a new one
or an empty regular one: anything else (``/dev/null``, a FIFO, a file that
holds events or another session holds) is refused before anything runs.
``--json`` prints the live results instead, canonical values included:
every call of the batch, those a suspended batch left open (awaiting an
approval, or never started behind one) in ``pending``, counted in the
summary as the cards' summary line counts them. Its ``version``
(:data:`JSON_VERSION`) says which shape a consumer reads (the keys
``dsh_actors/cli/README.md`` lists for it).

``dsh-actors resume`` (:mod:`.resume`) finishes a batch that suspended,
from its ``--json`` document and its log, and ``dsh-actors recover``
(:mod:`.recover`) one a crash interrupted, from its log, through the same
:func:`run_batch`: the same loading, approvals, Ctrl-C and output.

With no approval channel (no ``--approve``, stdin or stderr not a
terminal, and no service of the ``--tools`` module), a call a policy asks
approval for is denied with the policy's reason as its error; then one
note on stderr, after the results, names ``--approve`` and its choices
(:class:`Unasked`).

A tool's ``timeout_ms`` is enforced (``policies.timeout``: past it the call
fails ``TOOL_TIMEOUT``) unless ``--no-timeout``.

While the batch runs, each progress report of a running call
(``tools/progress``: a body's ``ctx.report_progress``, an MCP server's
progress notification, a PTC program's ``report_progress``) is shown on
stderr as ``… CALL_ID TOOL: 2/5 (40%) message``. With ``-v`` a call whose
tool raised also shows the traceback under its card.

Exit status: 0 when the batch ran, whatever its calls returned (the summary
line says how many failed), a batch that suspended on a deferred approval
included, with cards or ``--json``; 1 when it could not run (bad file, module,
tools, executor or log); 74 when standard output is closed (then nothing
runs) or the results could not be written to it (the batch ran); 130 when
interrupted (Ctrl-C aborts the batch: started calls drain, the rest are
skipped, and the results are printed; one after the batch settled ends the
command as it would; a second Ctrl-C exits at once, without waiting for
bodies that ignore their signal).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import selectors
import shlex
import signal
import socket
import stat
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Final

import orjson

from ..errors import DshError, printable
from ..events import Ask
from ..execution import ToolExecution
from ..json import thaw
from ..model import Agent, LogStep, ToolBatchInput, ToolBatchResult, content_to_json
from ..runtime import ToolRuntime
from ..session import Session, StepKey, error_to_json, same_step
from ..signals import AbortController, AbortSignal
from .batchfile import BatchFileError, read_batch, unreadable
from .exits import EXIT_INTERRUPTED, OutputError, write_output
from .loading import (
    CliError,
    ToolSource,
    install_executor,
    install_timeout,
    install_tools,
    load_tool_source,
    one_line,
    terminal_prompt,
)
from .mcp_servers import McpServers
from .render import Tally, choose_style, log_entries, render_log, resolve_views, summary_line

__all__ = [
    "APPROVE_ANSWERS",
    "APPROVE_MODES",
    "JSON_VERSION",
    "approver",
    "check_prompt_input",
    "in_thread",
    "open_written_log",
    "run_batch",
    "run_command",
]

APPROVE_MODES: Final = ("yes", "no", "prompt")
JSON_VERSION: Final = 1
"""The ``version`` of the ``--json`` document: the shape ``README.md``
beside this module documents. A key added keeps it; a key removed, renamed
or given another meaning raises it."""


APPROVE_ANSWERS: Final = {"yes": "allowed-once", "no": "rejected"}
"""The approval answer each of ``--approve``'s fixed choices gives (and
``resume --decide``'s ``yes``/``no``)."""


def approver(mode: str) -> Any:
    """The approval service of ``--approve MODE``: a fixed answer, or the
    terminal prompt."""
    answer = APPROVE_ANSWERS.get(mode)
    if answer is not None:
        return lambda request: answer
    return terminal_prompt()


def _open_log(path: str | None) -> Session:
    """The batch's session: in memory, or a new log file at ``path`` (a
    missing file, or an empty regular one), held for this run's writes.
    Anything else is refused before anything is loaded or runs: the cards
    are drawn from the events read back from the log, which a device or a
    FIFO (``/dev/null``, a named pipe) does not give back."""
    if path is None:
        return Session()
    if not path:  # (Path("") is the current directory)
        raise CliError("--log needs a file name (got an empty one)")
    target = Path(path)
    try:
        status = target.stat()
    except FileNotFoundError:
        status = None
    except OSError as err:
        raise CliError(f"--log {path}: cannot use it: {err.strerror or err}") from None
    if status is not None:
        if stat.S_ISDIR(status.st_mode):
            raise CliError(f"--log {path}: is a directory")
        if not stat.S_ISREG(status.st_mode):
            raise CliError(
                f"--log {path}: not a regular file (the results are read back from the log); "
                "name a new file, or leave out --log to keep the log in memory"
            )
        if status.st_size > 0:
            raise CliError(f"--log {path}: the file is not empty (a log is written to a new file); choose a new file")
    try:
        return Session(target)
    except FileNotFoundError:
        raise CliError(f"--log {path}: the folder {str(target.parent)!r} does not exist") from None
    except OSError as err:
        raise CliError(f"--log {path}: cannot write it: {err.strerror or err}") from None
    except DshError as err:  # another session holds the file, say
        raise CliError(f"--log {path}: {one_line(err)}") from None


def open_written_log(path: str | None, whose: str) -> Session:
    """The session log at ``path`` that a run wrote, opened to go on in it
    (``Session.open``), for ``resume`` and ``recover``: one line naming
    the fix when there is none there or it cannot be read (``whose``: the
    batch whose run wrote it, ``"the suspended batch's"``)."""
    if not path:
        raise CliError("--log needs a file name (got an empty one)")
    try:
        return Session.open(path)
    except OSError as err:
        raise CliError(unreadable(f"--log {path}", err, "session log", f"; name the log {whose} run wrote")) from None
    except DshError as err:  # a bad line, say
        raise CliError(f"--log {path}: {one_line(err)}") from None


def in_thread(work: Callable[[], ToolBatchResult], command: str) -> Future[ToolBatchResult]:
    """``work()`` (``rt.tools.resume`` or ``rt.tools.recover``, which
    block) on a thread of its own, as a future: the main thread waits for
    it as ``run`` waits for its batch (:class:`Interrupts`, so a Ctrl-C
    aborts the batch). ``command`` names the thread."""
    future: Future[ToolBatchResult] = Future()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(work())
        except BaseException as err:  # noqa: BLE001 - the waiting thread reports it
            future.set_exception(err)

    threading.Thread(target=target, name=f"dsh-actors {command}", daemon=True).start()
    return future


def _quit_now(command: str) -> None:
    """The second Ctrl-C: exit 130 at once, without waiting for anything
    (a body that ignores its signal would hold a normal exit until
    ``rt.stop()`` gives up). What was printed and logged so far is flushed."""
    try:
        sys.stderr.write(f"dsh-actors {command}: interrupted again; quitting\n")
        sys.stderr.flush()
        sys.stdout.flush()
    finally:
        os._exit(EXIT_INTERRUPTED)


class Interrupts:
    """The SIGINT handler while a batch runs, installed before the batch is
    submitted (so a Ctrl-C at any moment of the run counts, even before the
    main thread waits): the first Ctrl-C aborts the batch and the run keeps
    waiting for it to settle; the second exits at once (130, ``_quit_now``).
    ``command`` (``run``, ``resume``, ``recover``) names the command in its messages.
    The handler runs on the main thread between two bytecodes: it aborts
    only while that thread waits for the batch (holding none of the
    runtime's locks), else :meth:`wait` aborts when it begins. A Ctrl-C
    after the batch settled (while its results are printed, the MCP
    servers and the runtime stop) has nothing to abort: the command ends
    as it would, with exit status 130 (``seen``)."""

    def __init__(self, controller: AbortController, command: str = "run") -> None:
        self.controller = controller
        self.command = command  # (the messages name it)
        self.seen = False  # a Ctrl-C came
        self.waiting = False  # the main thread waits for the batch
        self.settled = False  # the wait returned the batch's result

    def __call__(self, signum: int, frame: Any) -> None:
        if self.seen:
            _quit_now(self.command)
        self.seen = True
        doing = "the batch has ended; finishing" if self.settled else "aborting the batch"
        sys.stderr.write(f"dsh-actors {self.command}: interrupted; {doing} (Ctrl-C again to quit at once)\n")
        sys.stderr.flush()
        if self.waiting and not self.settled:
            self._abort()

    def _abort(self) -> None:
        self.controller.abort("interrupted from the terminal")  # (a second abort does nothing)

    def wait(self, future: Future[ToolBatchResult]) -> tuple[ToolBatchResult, bool]:
        """The batch's result, and whether a Ctrl-C came.

        On the main thread it waits in ``select`` on a socket that both the
        batch's end and any signal write to (``signal.set_wakeup_fd``), not
        in a lock: the kernel may hand SIGINT to any thread of the process
        (a body's, an actor's), and then nothing wakes a main thread
        blocked in a lock to run the handler; a byte on the wakeup socket
        does."""
        self.waiting = True
        if self.seen:
            self._abort()  # interrupted before the wait began
        if threading.current_thread() is threading.main_thread():
            _wait_waking_on_signals(future)
        result = future.result()
        self.settled = True
        return result, self.seen


def _wait_waking_on_signals(future: Future[Any]) -> None:
    """Block the main thread until ``future`` is done, running the signal
    handlers as signals come, whichever thread received them."""
    wake_read, wake_write = socket.socketpair()
    try:
        for end in (wake_read, wake_write):
            end.setblocking(False)

        def poke(_: object) -> None:
            with contextlib.suppress(OSError):
                wake_write.send(b"\0")

        previous = signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
        try:
            future.add_done_callback(poke)
            with selectors.DefaultSelector() as selector:
                selector.register(wake_read, selectors.EVENT_READ)
                while not future.done():
                    selector.select()  # the handlers run when it returns
                    with contextlib.suppress(BlockingIOError):
                        while wake_read.recv(4096):
                            pass
        finally:
            signal.set_wakeup_fd(previous)
    finally:
        wake_read.close()
        wake_write.close()


class ProgressLines:
    """``tools/progress`` listener: one line on ``stream`` per report
    (several calls' reports interleave, so each line names its call).
    Runs on the reporting thread; the lock keeps lines whole."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def __call__(self, execution: Any, progress: Any) -> None:
        line = printable(f"… {execution.call_id} {execution.name}: {progress_text(progress)}") + "\n"
        with self._lock:
            self._stream.write(line)
            self._stream.flush()


def progress_text(progress: Any) -> str:
    """``2/5 (40%) copying`` (``2`` without a total, the message when set)."""
    done = _number(progress.progress)
    total = progress.total
    if total is None:
        text = done
    else:
        text = f"{done}/{_number(total)}"
        share = progress.progress * 100 / total if total > 0 else math.inf
        if math.isfinite(share):
            text += f" ({share:.0f}%)"
    message = progress.message
    return f"{text} {message}" if message else text


def _number(value: float) -> str:
    # (a whole number as digits only while that is short: 1e300 is not 301 digits)
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def _json_document(
    batch: ToolBatchResult, names: dict[str, str], views: dict[str, Any], shape: str, tally: Tally
) -> bytes:
    """The ``--json`` document: its ``version`` (:data:`JSON_VERSION`),
    every call of the batch, the settled ones in ``results`` and the open
    ones (a batch that suspended on a deferred approval) in ``pending``,
    each in model order, its ``suspension``, and a ``summary``: ``tally``,
    what the cards' summary line counts."""
    results = []
    for item in batch.results:
        outcome = item.result
        entry: dict[str, Any] = {
            "call_id": item.call_id,
            "name": names.get(item.call_id),
            "is_error": outcome.is_error,
        }
        if not outcome.is_error:
            entry["value"] = thaw(outcome.value)
        entry["content"] = content_to_json(outcome.content)
        entry["error"] = error_to_json(outcome.error)
        entry["meta"] = thaw(outcome.meta)
        call_view, result_view = views.get(item.call_id, (None, None))
        entry["call_view"] = None if call_view is None else call_view.to_json()
        entry["result_view"] = None if result_view is None else result_view.to_json()
        results.append(entry)
    pending = _pending_entries(batch, views)
    document = {
        "version": JSON_VERSION,
        "shape": shape,
        "results": results,
        "pending": pending,
        "additional_contexts": [
            {"content": content_to_json(m.content), "source": m.source, "meta": thaw(m.meta)}
            for m in batch.additional_contexts
        ],
        "concluded": batch.concluded,
        "suspension": batch.suspension,
        "summary": {
            "calls": tally.calls,
            "ok": tally.ok,
            "error": tally.errors,
            "without_result": tally.calls - tally.ok - tally.errors,
            "awaiting_approval": tally.awaiting,
            "never_started": tally.never,
        },
    }
    return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"


def _pending_entries(batch: ToolBatchResult, views: dict[str, Any]) -> list[dict[str, Any]]:
    """The open calls of a suspended batch (``batch.pending``), model order,
    as its ``suspension`` describes them: ``"deferred"`` (awaiting an
    approval: ``approval`` is what the person is asked) or ``"pending"``
    (never started: it waits for the deferred calls ``waits_for``)."""
    if batch.suspension is None:
        return []
    entries = []
    for call in batch.suspension["calls"]:
        state = call["state"]
        if state == "settled":
            continue
        call_view = views.get(call["id"], (None, None))[0]
        entries.append(
            {
                "call_id": call["id"],
                "name": call["name"],
                "state": state,
                "approval": call.get("approval"),
                "waits_for": call.get("waits_for", []),
                "call_view": None if call_view is None else call_view.to_json(),
            }
        )
    return entries


class Unasked:
    """The ``tools/approval-request`` observer of a run with no approval
    channel (no ``--approve``, no terminal to prompt on): it notes each
    call the pipeline asks an approval for (an ``Ask`` that no approval
    given earlier stands for) while no approval service is installed,
    which the pipeline then denies with the ``Ask``'s reason, so the run
    can tell the user the way on (:meth:`note`). It only watches. Runs on
    the calls' threads; the lock keeps the set whole."""

    def __init__(self, rt: ToolRuntime) -> None:
        self._approvals = rt.approvals
        self._lock = threading.Lock()
        self._calls: set[str] = set()

    def __call__(self, execution: ToolExecution, ask: Ask) -> None:
        if self._approvals.service is None:
            with self._lock:
                self._calls.add(execution.call_id)

    def note(self, args: argparse.Namespace) -> str | None:
        """The line for stderr when a call was denied for want of an
        approval channel (else None): it names ``--approve`` and its
        choices (with the batch on piped stdin, ``prompt`` for the batch saved
        to a file: it reads its answers from stdin)."""
        count = len(self._calls)
        if count == 0:
            return None
        calls = "1 call that asks for approval was" if count == 1 else f"{count} calls that ask for approval were"
        command = args.command
        if command in ("resume", "recover"):  # (a resumed or recovered batch is not run again: its calls ended)
            way = (
                "--approve yes (allow them), --approve no (reject them) or --approve prompt answers such calls "
                "of the next batch you run or resume"
            )
        elif _stdin_input(args) is not None:
            way = (
                "rerun with --approve yes (allow them) or --approve no (reject them), or save the batch to a "
                "file for --approve prompt (it reads the answers from standard input)"
            )
        else:
            way = (
                "rerun with --approve yes (allow them), --approve no (reject them) or --approve prompt "
                "(ask, reading the answers from standard input)"
            )
        return (
            f"dsh-actors {command}: note: {calls} denied: there is no terminal to ask on and no approval service; "
            f"{way}\n"
        )


def _install(
    rt: ToolRuntime, args: argparse.Namespace, source: ToolSource | None, servers: McpServers
) -> Unasked | None:
    """The tools, the approval service, the timeout policy and the
    executor the batch runs with; with no approval channel (neither
    ``--approve`` nor a terminal), the :class:`Unasked` listener."""
    explicit = args.approve is not None
    terminal = sys.stdin.isatty() and sys.stderr.isatty()
    if not explicit and terminal:
        rt.approvals.set(terminal_prompt())  # installed first: the module's own service, if any, wins
    if source is not None:
        install_tools(source, rt)
    servers.start(rt)
    if explicit:
        rt.approvals.set(approver(args.approve))  # asked for: it wins
    if args.timeout:
        install_timeout(rt)  # a tool's timeout_ms holds here as in an application that applies it
    install_executor(args.executor, rt)
    if explicit or terminal:
        return None
    unasked = Unasked(rt)
    rt.events.on("tools/approval-request", unasked)
    return unasked


def _print(
    args: argparse.Namespace,
    rt: ToolRuntime,
    batch: ToolBatchResult,
    session: Session,
    names: dict[str, str],
    shape: str,
    step: StepKey | None = None,
) -> None:
    """The results, as cards drawn from the log's events or as the
    ``--json`` document (``names``: each call's tool; ``shape``: the batch
    file's family; ``step``: the batch's step, when the log may hold
    others: only its calls are shown and counted)."""
    entries = log_entries(session.events())
    if step is not None:
        entries = [
            e
            for e in entries
            if e.turn is not None and e.step is not None and same_step((e.turn, e.step, e.agent), step)
        ]
    lookup = rt.tools.get
    out = sys.stdout
    if args.json:
        views = {e.call_id: resolve_views(e, lookup) for e in entries}
        tally = Tally()
        for entry in entries:
            tally.add(entry)
        write_output(out, [_json_document(batch, names, views, shape, tally).decode("utf-8")], json=True)
    else:
        style = choose_style(out, args.color)
        verbose = bool(getattr(args, "verbose", False))
        lines = render_log(entries, lookup, style, max_lines=args.max_lines or None, steps=False, tracebacks=verbose)
        write_output(out, [*(line + "\n" for line in lines), summary_line(entries) + "\n"])


def _stdin_input(args: argparse.Namespace) -> str | None:
    """What the command reads from standard input (``-``: ``"batch"``,
    or ``"suspension"``) when that input is not a terminal, else None:
    reading it takes that input to its end, so the prompt could read no
    answer from it. (On a terminal the prompt reads on after its Ctrl-D.)
    ``recover`` reads nothing from it: None."""
    command = args.command
    if command == "recover":
        return None
    what = "suspension" if command == "resume" else "batch"
    path = args.suspension if what == "suspension" else args.batch
    return what if path == "-" and sys.stdin is not None and not sys.stdin.isatty() else None


def check_prompt_input(args: argparse.Namespace) -> None:
    """Refuse ``--approve prompt`` with the input on standard input that is
    not a terminal (:func:`_stdin_input`): no question could ever be
    answered (every asking call would be denied)."""
    what = _stdin_input(args)
    if args.approve != "prompt" or what is None:
        return
    raise CliError(
        f"--approve prompt reads its answers from standard input, which holds the {what} ('-'): "
        f"save the {what} to a file and name it instead of '-', or answer every call with --approve yes or no"
    )


def run_command(args: argparse.Namespace) -> int:
    """Run the batch; see the module docstring for the exit status."""
    check_prompt_input(args)
    try:
        batch_file = read_batch(args.batch)
    except BatchFileError as err:
        raise CliError(str(err)) from None
    existed = args.log is not None and os.path.exists(args.log)  # (False for a name too long: _open_log says so)
    session = _open_log(args.log)  # (first: a log that cannot be used is refused before anything runs)

    def submit(rt: ToolRuntime) -> Callable[[AbortSignal], Future[ToolBatchResult]]:
        return lambda abort: rt.tools.submit(
            ToolBatchInput(
                calls=batch_file.calls,
                signal=abort,
                max_parallel_tool_calls=args.max_parallel,
                agent=Agent(args.agent, session=session),
                log=LogStep(turn=1, step=1),
            )
        )

    names = {call.id: call.name for call in batch_file.calls}
    return run_batch(args, session, submit, names, batch_file.shape, keep_log=existed, failed="the batch failed")


def run_batch(
    args: argparse.Namespace,
    session: Session,
    prepare: Callable[[ToolRuntime], Callable[[AbortSignal], Future[ToolBatchResult]]],
    names: dict[str, str],
    shape: str,
    *,
    keep_log: bool,
    failed: str,
    step: StepKey | None = None,
) -> int:
    """What ``run``, ``resume`` and ``recover`` share once their input is
    read and their ``session`` open: load the tools (``--tools``, ``--mcp``,
    ``--mcp-config``), start a runtime with them and the approval service,
    timeout policy and executor the options ask for (:func:`_install`),
    ``prepare(rt)`` the batch (``resume`` asks its decisions then), start it
    (the returned function, given the batch's signal) under :class:`Interrupts`,
    and print its results (:func:`_print`: ``names`` and ``shape`` for
    ``--json``, ``step`` the batch's step when the log may hold others). A
    :class:`DshError` the batch ends with is a one-line error starting
    ``failed`` (where it tells a program to finish a step with
    ``rt.tools.recover``, it names ``dsh-actors recover --log FILE``:
    :func:`cli_recover`). ``session`` is closed at the end; its file is
    removed when nothing ran, unless ``keep_log``. Returns the exit
    status."""
    command = args.command
    ran = False
    on_main_thread = threading.current_thread() is threading.main_thread()
    sigint = signal.getsignal(signal.SIGINT) if on_main_thread else None
    interrupts: Interrupts | None = None
    try:
        source = None if args.tools is None else load_tool_source(args.tools)
        servers = McpServers(getattr(args, "mcp", None) or [], getattr(args, "mcp_config", None) or [])
        with ToolRuntime() as rt, servers:
            unasked = _install(rt, args, source, servers)
            rt.events.on("tools/progress", ProgressLines(sys.stderr))
            start = prepare(rt)
            controller = AbortController()
            interrupts = Interrupts(controller, command)
            if on_main_thread:
                signal.signal(signal.SIGINT, interrupts)  # (put back below)
            ran = True
            try:
                batch, _ = interrupts.wait(start(controller.signal))
            except DshError as err:
                raise CliError(f"{failed}: {cli_recover(err.message, session)}") from None
            try:
                _print(args, rt, batch, session, names, shape, step)
            except OutputError as err:  # (not a reason to run it again: its calls ran)
                log = "" if session.path is None else f"; dsh-actors replay {session.path} shows its results"
                raise OutputError(f"{err}; the batch ran{log}") from None
            note = None if unasked is None else unasked.note(args)
            if note is not None:
                sys.stderr.write(note)
    finally:
        if sigint is not None and interrupts is not None and signal.getsignal(signal.SIGINT) is interrupts:
            signal.signal(signal.SIGINT, sigint)
        session.close()
        if not ran and not keep_log and session.path is not None:
            session.path.unlink(missing_ok=True)  # the batch never ran: leave no empty log behind
    return EXIT_INTERRUPTED if interrupts is not None and interrupts.seen else 0


#: How the library tells a program to finish an interrupted step.
_LIBRARY_RECOVER: Final = re.compile(r"rt\.tools\.recover\([^()]*\)")


def cli_recover(message: str, session: Session) -> str:
    """``message`` (the library's) with each ``rt.tools.recover(agent,
    turn, step)`` it tells the reader to call given as the command that
    does it, ``dsh-actors recover --log FILE`` (the log of ``session``);
    unchanged for a session without a file, which nothing can recover."""
    if session.path is None:
        return message
    command = f"dsh-actors recover --log {shlex.quote(str(session.path))}"
    return _LIBRARY_RECOVER.sub(lambda _: command, message)
