"""Ctrl-C while the main thread waits in a blocking ``rt.tools.execute``
(reference section 7): the batch is aborted (its calls see their signal,
the unstarted ones are ``ABORTED_BEFORE_DISPATCH``), the wait goes on until
it has settled, then the ``KeyboardInterrupt`` goes on; a second Ctrl-C
during that wait leaves at once, the batch still aborted.

The interrupt is a real SIGINT sent to the main thread from a tool body
(``signal.pthread_kill``), once the main thread blocks in the wait: Python
runs the handler there, interrupting the lock wait. Threads are
synchronised with Events; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from dsh_actors import (
    AbortController,
    Agent,
    Ask,
    LogStep,
    NativeExecutor,
    Session,
    ToolBatchInput,
    ToolCall,
    ToolRuntime,
)
from dsh_actors.definition import ToolOutput, define_tool
from dsh_actors.model import text

WAIT = 10.0  # the bound of every wait; a correct run never reaches it

TEXT = ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)])


def make_tool(name: str, body: Any) -> Any:
    return define_tool(name=name, description=f"the {name} tool", parameters={}, output=TEXT, execute=body)


def quick(args: Any, ctx: Any) -> str:
    return "quick"


def logged(session: Session, *names: str, **options: Any) -> ToolBatchInput:
    """One call per name (``c0, c1, ...``), serial, logged at turn 1, step 1."""
    return ToolBatchInput(
        calls=tuple(ToolCall(f"c{i}", name, "{}") for i, name in enumerate(names)),
        agent=Agent("a", session=session),
        log=LogStep(turn=1, step=1),
        max_parallel_tool_calls=1,
        **options,
    )


def logged_codes(session: Session) -> dict[str, str | None]:
    """Each logged call's failure code (None: a success)."""
    return {
        e["call_id"]: (e["error"] or {}).get("info", {}).get("code") if e.get("error") else None
        for e in session.events()
        if e["type"] == "tool/result"
    }


#: Where the main thread waits for a batch: the blocking facade's reply,
#: and a future's result (``NativeExecutor.execute``).
BATCH_WAITS = ("_Reply.wait", "Future.result")


class MainWaits:
    """Ctrl-C in the main thread's n-th wait for a batch, deterministically.

    A profile hook on the main thread holds it as it begins that wait (the
    lock's ``acquire``), until a tool body has sent it a real SIGINT
    (:meth:`interrupt`): Python's handler then raises the
    ``KeyboardInterrupt`` right there, as from the interrupted wait. (A
    SIGINT that lands while the main thread is on its way into the lock's
    system call stays pending until the wait ends: a test that just sends
    one would be flaky.) The hook is gone once it raised: :meth:`arm` sets
    it again."""

    def __init__(self, count: int) -> None:
        self.entered = [threading.Event() for _ in range(count)]
        self.sent = [threading.Event() for _ in range(count)]
        self._seen = 0

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "c_call" or getattr(arg, "__name__", None) != "acquire":
            return
        waiter = frame if frame.f_code.co_qualname != "Condition.wait" else frame.f_back
        if waiter is None or waiter.f_code.co_qualname not in BATCH_WAITS:
            return
        n = self._seen
        self._seen += 1
        if n < len(self.entered):
            self.entered[n].set()
            self.sent[n].wait(WAIT)  # the SIGINT's KeyboardInterrupt is raised here

    def arm(self) -> None:
        """Watch the calling thread's (the main thread's) waits."""
        sys.setprofile(self)

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Watch the main thread's waits, within the block."""
        self.arm()
        try:
            yield
        finally:
            sys.setprofile(None)

    def interrupt(self, n: int) -> None:
        """(From a tool body.) Ctrl-C once the main thread's n-th wait began."""
        assert self.entered[n].wait(WAIT), "the main thread never waited"
        main = threading.main_thread().ident
        assert main is not None
        signal.pthread_kill(main, signal.SIGINT)
        self.sent[n].set()


class Interrupting:
    """A tool body (``slow``) that sends Ctrl-C once the main thread waits,
    then waits on its own signal: ``aborted`` (whether it fired),
    ``reason`` (its reason), ``ended`` (set as the body returns)."""

    def __init__(self, ctrl_c: MainWaits) -> None:
        self.ctrl_c = ctrl_c
        self.ended = threading.Event()
        self.aborted: bool | None = None
        self.reason: Any = None

    def __call__(self, args: Any, ctx: Any) -> str:
        try:
            self.ctrl_c.interrupt(0)
            self.aborted = ctx.signal.wait(WAIT)
            self.reason = ctx.signal.reason
            return "slow"
        finally:
            self.ended.set()


@pytest.fixture
def ctrl_c() -> Iterator[MainWaits]:
    """Python's own SIGINT handler (KeyboardInterrupt), put back afterwards."""
    assert threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield MainWaits(2)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_in_execute_aborts_the_batch_and_waits_for_it_to_settle(ctrl_c: MainWaits) -> None:
    caller = AbortController()
    slow = Interrupting(ctrl_c)
    session = Session()
    with ToolRuntime() as rt:
        rt.tools.register(make_tool("slow", slow))
        rt.tools.register(make_tool("quick", quick))
        with pytest.raises(KeyboardInterrupt), ctrl_c.watching():
            rt.tools.execute(logged(session, "slow", "quick", "quick", signal=caller.signal))
        # The batch settled before the interrupt went on: every call is logged.
        assert slow.ended.is_set(), "execute() left before the batch settled"
        assert slow.aborted is True, "the running body never saw its signal"
        assert "interrupted (KeyboardInterrupt)" in str(slow.reason)
        assert logged_codes(session) == {
            "c0": "ABORTED",
            "c1": "ABORTED_BEFORE_DISPATCH",
            "c2": "ABORTED_BEFORE_DISPATCH",
        }
        assert not caller.signal.aborted, "the caller's own signal was aborted"
        # The runtime goes on working, and the caller's signal still counts.
        again = rt.tools.execute(ToolBatchInput(calls=(ToolCall("d0", "quick", "{}"),), signal=caller.signal))
        assert not again.results[0].result.is_error


def test_a_second_ctrl_c_while_execute_waits_for_the_aborted_batch_leaves_at_once(ctrl_c: MainWaits) -> None:
    release = threading.Event()
    saw: dict[str, bool] = {}

    def stubborn(args: Any, ctx: Any) -> str:
        # The abort runs this on the main thread, before it waits again.
        ctx.signal.add_callback(lambda _: ctrl_c.arm())
        ctrl_c.interrupt(0)
        saw["aborted"] = ctx.signal.wait(WAIT)
        ctrl_c.interrupt(1)  # again, while execute waits for the batch to settle
        release.wait(WAIT)  # ignores its signal until the caller has left
        return "stubborn"

    session = Session()
    with ToolRuntime() as rt:
        rt.tools.register(make_tool("stubborn", stubborn))
        rt.tools.register(make_tool("quick", quick))
        try:
            with pytest.raises(KeyboardInterrupt) as second, ctrl_c.watching():
                rt.tools.execute(logged(session, "stubborn", "quick"))
            assert isinstance(second.value.__context__, KeyboardInterrupt)  # (the first one)
            assert saw["aborted"] is True
            assert not release.is_set()
        finally:
            release.set()
    # The stop drained the batch: still aborted, every call logged.
    assert logged_codes(session) == {"c0": "ABORTED", "c1": "ABORTED_BEFORE_DISPATCH"}


def test_ctrl_c_in_native_executor_execute_aborts_the_batch_and_waits_for_it(ctrl_c: MainWaits) -> None:
    slow = Interrupting(ctrl_c)

    session = Session()
    with ToolRuntime() as rt:
        rt.tools.register(make_tool("slow", slow))
        rt.tools.register(make_tool("quick", quick))
        executor = NativeExecutor()
        rt.tools.set_executor(executor)
        with pytest.raises(KeyboardInterrupt), ctrl_c.watching():
            executor.execute(logged(session, "slow", "quick"))
        assert slow.ended.is_set(), "NativeExecutor.execute() left before the batch settled"
        assert slow.aborted is True
        assert logged_codes(session) == {"c0": "ABORTED", "c1": "ABORTED_BEFORE_DISPATCH"}
        assert not executor.execute(ToolBatchInput(calls=(ToolCall("d0", "quick", "{}"),))).results[0].result.is_error


def test_ctrl_c_reaches_a_batch_nested_in_a_body_through_the_bodys_signal(ctrl_c: MainWaits) -> None:
    # A body's nested execute runs on the runtime's thread, as before: it
    # is the outer batch's abort, through the signal the body passes on,
    # that stops it.
    nested_saw: dict[str, bool] = {}
    nested_codes: dict[str, str | None] = {}

    def inner(args: Any, ctx: Any) -> str:
        ctrl_c.interrupt(0)
        nested_saw["aborted"] = ctx.signal.wait(WAIT)
        return "inner"

    session = Session()
    with ToolRuntime() as rt:

        def outer(args: Any, ctx: Any) -> str:
            nested = rt.tools.execute(
                ToolBatchInput(
                    calls=(ToolCall("n0", "inner", "{}"), ToolCall("n1", "quick", "{}")),
                    signal=ctx.signal,
                    max_parallel_tool_calls=1,
                )
            )
            for item in nested.results:
                failure = item.result.error if item.result.is_error else None
                nested_codes[item.call_id] = None if failure is None or failure.info is None else failure.info.code
            return "outer"

        rt.tools.register(make_tool("outer", outer))
        rt.tools.register(make_tool("inner", inner))
        rt.tools.register(make_tool("quick", quick))
        with pytest.raises(KeyboardInterrupt), ctrl_c.watching():
            rt.tools.execute(logged(session, "outer", "quick"))
        assert nested_saw["aborted"] is True
        assert nested_codes == {"n0": "ABORTED", "n1": "ABORTED_BEFORE_DISPATCH"}
        assert logged_codes(session) == {"c0": "ABORTED", "c1": "ABORTED_BEFORE_DISPATCH"}


def test_ctrl_c_in_resume_aborts_the_resumed_batch_and_waits_for_it(ctrl_c: MainWaits) -> None:
    slow = Interrupting(ctrl_c)

    def ask_for_c0(execution: Any, next_: Any) -> Any:
        return Ask(reason="a person must approve") if execution.call_id == "c0" else next_()

    session = Session()
    agent = Agent("a", session=session)
    with ToolRuntime() as rt:
        rt.tools.register(make_tool("slow", slow))
        rt.tools.register(make_tool("quick", quick))
        rt.events.on("tools/pre-execute", ask_for_c0)
        rt.approvals.set(lambda request: "deferred")
        batch = ToolBatchInput(
            calls=(ToolCall("c0", "slow", "{}"), ToolCall("c1", "quick", "{}")),
            agent=agent,
            log=LogStep(turn=1, step=1),
        )
        suspended = rt.tools.execute(batch)
        assert "c0" in suspended.pending
        with pytest.raises(KeyboardInterrupt), ctrl_c.watching():
            rt.tools.resume(suspended.suspension, {"c0": "allowed-once"}, agent=agent)
        assert slow.ended.is_set(), "resume() left before the batch settled"
        assert slow.aborted is True
        assert logged_codes(session) == {"c0": "ABORTED", "c1": "ABORTED_BEFORE_DISPATCH"}


def test_native_executor_execute_of_a_non_batch_on_the_main_thread_names_its_type() -> None:
    with ToolRuntime() as rt:
        executor = NativeExecutor()
        rt.tools.set_executor(executor)
        with pytest.raises(TypeError, match="expected a ToolBatchInput, got str"):
            executor.execute("not a batch")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "at",
    [
        ("interrupt.py", "started", "call"),
        ("interrupt.py", "started", "return"),
        ("service.py", "_start", "call"),
    ],
)
@pytest.mark.parametrize("native", [False, True])
def test_ctrl_c_around_the_start_leaves_no_batch_running_and_no_wait(
    at: tuple[str, str, str], native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Ctrl-C that lands as the batch is being started (Python runs signal
    # handlers at a function's entry or return) either stops the start
    # before anything runs, or aborts the batch it started; either way
    # execute raises KeyboardInterrupt and never waits for a reply that
    # nobody settles, and leaves the step slot free (one slot here: the
    # next batch must run). (One that lands inside the dispatcher's
    # hand-over itself, between its decision and its send, a window of a
    # few instructions, is not covered: holding Ctrl-C there by swapping
    # the SIGINT handler cost 24 us a batch. The one wait in it, for a new
    # actor's thread to start, is: see the next test.)
    from dsh_actors.scheduling.dispatcher import Dispatcher

    monkeypatch.setattr(Dispatcher, "STEPPING_MAX", 1)
    if native and at[0] == "service.py":
        at = ("executor.py", "submit_into", "call")
    filename, function, event = at
    ran: list[str] = []

    def hook(frame: Any, what: str, arg: Any) -> None:
        if what == event and frame.f_code.co_name == function and frame.f_code.co_filename.endswith(filename):
            sys.setprofile(None)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with ToolRuntime() as rt:
            rt.tools.register(make_tool("quick", lambda args, ctx: ran.append(ctx.call_id) or "ok"))
            executor = NativeExecutor()
            if native:
                rt.tools.set_executor(executor)
            batch = ToolBatchInput(calls=(ToolCall("c0", "quick", "{}"),))
            sys.setprofile(hook)
            try:
                with pytest.raises(KeyboardInterrupt):
                    executor.execute(batch) if native else rt.tools.execute(batch)
            finally:
                sys.setprofile(None)
            assert ran == []  # (interrupted before its body, or aborted before it)
            again = ToolBatchInput(calls=(ToolCall("c1", "quick", "{}"),))
            future = executor.submit(again) if native else rt.tools.submit(again)
            assert not future.result(WAIT).results[0].result.is_error  # (the one step slot is free)
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("native", [False, True])
def test_ctrl_c_while_the_start_waits_for_a_new_executor_actor_leaks_no_step_slot(
    native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With no executor actor idle (a new runtime), the batch's start makes
    # one on the caller's thread and waits for its thread to start
    # (Thread.start): a real SIGINT there raised KeyboardInterrupt out of
    # the dispatcher's hand-over with the step slot counted and no actor to
    # hold it, so, at one step slot, every later batch waited forever. The
    # interrupt now ends only that wait: the batch is handed over (and
    # aborted by it, as any batch a Ctrl-C reached at its start), the
    # dispatcher keeps its invariants, and the next batch runs.
    from dsh_actors.scheduling.dispatcher import Dispatcher

    monkeypatch.setattr(Dispatcher, "STEPPING_MAX", 1)
    interrupted: list[str] = []

    def hook(frame: Any, what: str, arg: Any) -> None:
        starting = frame.f_back
        if what == "call" and frame.f_code.co_name == "wait" and starting is not None:
            if starting.f_code.co_qualname == "Thread.start":
                sys.setprofile(None)
                interrupted.append(starting.f_locals["self"].name)
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with ToolRuntime() as rt:
            rt.tools.register(make_tool("quick", quick))
            executor = NativeExecutor()
            if native:
                rt.tools.set_executor(executor)
            batch = ToolBatchInput(calls=(ToolCall("c0", "quick", "{}"),))
            sys.setprofile(hook)
            try:
                with pytest.raises(KeyboardInterrupt):
                    executor.execute(batch) if native else rt.tools.execute(batch)
            finally:
                sys.setprofile(None)
            assert len(interrupted) == 1 and "ExecutorActor" in interrupted[0], interrupted
            rt.dispatcher.assert_invariants()
            again = ToolBatchInput(calls=(ToolCall("c1", "quick", "{}"),))
            future = executor.submit(again) if native else rt.tools.submit(again)
            assert not future.result(WAIT).results[0].result.is_error  # (the one step slot was not kept)
            rt.dispatcher.assert_invariants()
    finally:
        signal.signal(signal.SIGINT, previous)
