"""``rt.on_stop`` hooks: each runs on a thread of its own, bounded by the
stop's deadline (and twice ``ToolRuntime.STOP_GRACE``); one that blocks is
left running, named in ``rt.abandoned``, and the stop goes on. A hook's
``SystemExit`` or ``KeyboardInterrupt`` does not cut the teardown short:
``stop()`` raises it once the runtime is stopped; nor does one a signal
raises in the main thread waiting in ``stop()``. A hook runs in the context
of the ``stop()`` that began the stop, wherever that ran."""

from __future__ import annotations

import contextvars
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from scheduling.helpers import assert_no_new_threads, live_threads

from dsh_actors import ToolBatchInput, ToolCall, ToolRunContext, ToolRuntime, tool

GUARD = 10.0  # seconds; only ever reached if something deadlocks


def _stop_in_thread(rt: ToolRuntime, timeout: float) -> list[BaseException]:
    """``rt.stop(timeout)`` on a thread of its own, joined with the guard
    (an old stop that never returns fails here); what it raised."""
    raised: list[BaseException] = []

    def stop() -> None:
        try:
            rt.stop(timeout)
        except BaseException as exc:  # noqa: BLE001 - inspected by the test
            raised.append(exc)

    stopper = threading.Thread(target=stop, name="test-stop")
    stopper.start()
    stopper.join(GUARD)
    assert not stopper.is_alive(), f"rt.stop(timeout={timeout}) did not return within {GUARD} s"
    return raised


@pytest.mark.parametrize("make", [lambda: SystemExit(3), KeyboardInterrupt], ids=["SystemExit", "KeyboardInterrupt"])
def test_a_hook_raising_a_base_exception_does_not_cut_the_stop_short(make: Callable[[], BaseException]) -> None:
    before = live_threads()
    rt = ToolRuntime().start()
    running = threading.Event()

    @tool
    def waits(ctx: ToolRunContext) -> str:
        """Waits for the stop."""
        running.set()
        ctx.signal.wait(GUARD)
        return "done"

    rt.tools.register(waits)
    ran: list[str] = []
    rt.on_stop(lambda: ran.append("registered first, runs after"))

    def bad() -> None:
        ran.append("bad")
        raise make()

    rt.on_stop(bad)
    future = rt.tools.submit(ToolBatchInput(calls=(ToolCall("c1", "waits", "{}"),)))
    assert running.wait(GUARD)
    with pytest.raises(type(make())):
        rt.stop(GUARD)  # raised once the runtime is stopped
    assert ran == ["bad", "registered first, runs after"]
    assert rt.halted and rt.abandoned == ()
    assert len(future.result(0).results) == 1  # the executor's drain (the first hook registered) answered it
    assert_no_new_threads(before)  # the actors, the loop and the hooks' threads all ended
    rt.stop()  # done: nothing left to raise


def test_a_hook_that_blocks_is_abandoned_named_and_the_stop_goes_on(
    monkeypatch: pytest.MonkeyPatch, log_records: Any
) -> None:
    monkeypatch.setattr(ToolRuntime, "STOP_GRACE", 0.2)
    warnings = log_records("WARNING")
    before = live_threads()
    rt = ToolRuntime().start()
    entered, release = threading.Event(), threading.Event()
    ran: list[str] = []
    rt.on_stop(lambda: ran.append("after"))

    def pool_join() -> None:  # (a pool's join without a timeout)
        entered.set()
        release.wait(GUARD)

    rt.on_stop(pool_join)
    try:
        assert _stop_in_thread(rt, 0.0) == []
        assert entered.is_set() and ran == ["after"]
        assert rt.halted
        hooks = [name for name in rt.abandoned if name.startswith("dsh-stop-hook")]
        assert hooks == [
            "dsh-stop-hook (test_a_hook_that_blocks_is_abandoned_named_and_the_stop_goes_on.<locals>.pool_join)"
        ]
        assert any("abandoned" in record["message"] and "pool_join" in record["message"] for record in warnings.items)
    finally:
        release.set()
    assert_no_new_threads(before)  # the abandoned hook's thread ends once it returns


def test_a_hook_sees_the_stop_callers_context_and_may_call_stop() -> None:
    before = live_threads()
    where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="unset")
    rt = ToolRuntime().start()
    seen: list[object] = []

    def hook() -> None:
        seen.append(where.get())
        rt.stop()  # the stop is under way: returns at once
        seen.append(rt.halted)

    rt.on_stop(hook)
    where.set("the caller's")
    rt.stop(GUARD)
    assert seen == ["the caller's", False]
    assert rt.halted and rt.abandoned == ()
    assert_no_new_threads(before)


def _sys_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # (an application's SIGTERM handler: sys.exit)


@pytest.mark.parametrize("sent_from", ["a stop hook", "a stop_signal callback"])
@pytest.mark.parametrize(
    ("signum", "handler", "raised"),
    [(signal.SIGINT, signal.default_int_handler, KeyboardInterrupt), (signal.SIGTERM, _sys_exit, SystemExit)],
    ids=["Ctrl-C", "SIGTERM-sys.exit"],
)
def test_a_signal_to_the_main_thread_waiting_in_stop_does_not_cut_the_stop_short(
    sent_from: str, signum: int, handler: Callable[[int, Any], object], raised: type[BaseException]
) -> None:
    # A real signal, sent to the main thread as it waits in stop() by what
    # the stop runs (on a thread it started while the main thread was in
    # that wait): Python runs the handler there, which raises. The stop
    # goes on (it still waits for that hook, runs the next and stops
    # everything) and stop() raises it once it is done.
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("Python runs signal handlers on the main thread only")
    main = threading.main_thread().ident
    assert main is not None
    handled = threading.Event()
    ran_once: list[bool] = []

    def handle(signum: int, frame: Any) -> None:
        # (The signal sent again, see interrupts(): raised once. Checked on a
        # list, not on handled: a second signal landing inside handled.set(),
        # which holds the event's lock, ran this again and deadlocked there.)
        if ran_once:
            return
        ran_once.append(True)
        handled.set()
        handler(signum, frame)

    previous = signal.signal(signum, handle)
    try:
        before = live_threads()
        rt = ToolRuntime().start()
        ran: list[str] = []
        rt.on_stop(lambda: ran.append("registered first, runs after"))

        def interrupts() -> None:
            # A signal that lands as the main thread is about to block in its
            # wait (past its last check for signals, before the lock's system
            # call) is handled only once that wait ends (CPython): so it is
            # sent again until the main thread handles it.
            deadline = time.monotonic() + GUARD
            signal.pthread_kill(main, signum)
            while not handled.wait(0.05) and time.monotonic() < deadline:
                signal.pthread_kill(main, signum)
            ran.append("handled" if handled.is_set() else "never handled")  # (the main thread raised meanwhile)

        if sent_from == "a stop hook":
            rt.on_stop(interrupts)
        else:
            rt.stop_signal.add_callback(lambda _: interrupts())
        with pytest.raises(raised):
            rt.stop(GUARD)
    finally:
        signal.signal(signum, previous)
    assert ran == ["handled", "registered first, runs after"]
    assert rt.halted and rt.abandoned == ()
    assert_no_new_threads(before)  # the actors, the loop and the hooks' threads all ended
    rt.stop()  # done: nothing left to raise


def test_a_system_exit_an_abandoned_hook_raises_later_is_logged(
    monkeypatch: pytest.MonkeyPatch, log_records: Any
) -> None:
    monkeypatch.setattr(ToolRuntime, "STOP_GRACE", 0.2)
    errors = log_records("ERROR")
    before = live_threads()
    rt = ToolRuntime().start()
    release = threading.Event()

    def late() -> None:
        release.wait(GUARD)
        raise SystemExit(3)

    rt.on_stop(late)
    try:
        assert _stop_in_thread(rt, 0.0) == []  # abandoned: nobody raises what it raises later
        (name,) = rt.abandoned
        (hook,) = [thread for thread in threading.enumerate() if thread.name == name]
    finally:
        release.set()
    hook.join(GUARD)
    assert not hook.is_alive()
    logged = [record["message"] for record in errors.items if "SystemExit" in record["message"]]
    assert len(logged) == 1 and "rt.abandoned" in logged[0], logged
    assert_no_new_threads(before)


def test_a_hook_of_a_stop_begun_in_a_tool_body_sees_the_bodys_context() -> None:
    before = live_threads()
    where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="unset")
    rt = ToolRuntime().start()
    seen: list[str] = []
    rt.on_stop(lambda: seen.append(where.get()))

    @tool
    def stops(ctx: ToolRunContext) -> str:
        """Stops the runtime."""
        where.set("the body's")
        rt.stop()  # on a thread of the runtime: the stop finishes on dsh-stop
        return "stopping"

    rt.tools.register(stops)
    where.set("the test's")
    future = rt.tools.submit(ToolBatchInput(calls=(ToolCall("c1", "stops", "{}"),)))
    assert len(future.result(GUARD).results) == 1
    rt.stop(GUARD)  # waits for the stop the body began
    assert seen == ["the body's"]
    assert rt.halted and rt.abandoned == ()
    assert_no_new_threads(before)


@pytest.mark.parametrize("lands_in", ["_on_own_thread", "_start_stopper"])
def test_an_interrupt_as_the_stop_begins_does_not_leave_it_unfinished(
    lands_in: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Ctrl-C (raised here by what stop() calls, once) that lands after
    # stop() marked the stop begun and before its dsh-stop thread ran: it
    # used to leave the runtime refusing work with nothing torn down
    # (_on_own_thread: stop() raised at once, rt.halted stayed False until
    # another stop()), or a caller waiting for a dsh-stop thread that was
    # never started (_start_stopper: stop() never returned). The stop now
    # goes on, and stop() raises the interrupt once the runtime is stopped.
    before = live_threads()
    rt = ToolRuntime().start()
    original = getattr(ToolRuntime, lands_in)
    pending = [KeyboardInterrupt("Ctrl-C")]

    def interrupted(self: ToolRuntime, *args: Any) -> Any:
        if pending:
            raise pending.pop()
        return original(self, *args)

    monkeypatch.setattr(ToolRuntime, lands_in, interrupted)
    try:
        raised = _stop_in_thread(rt, GUARD)
        assert [type(exc) for exc in raised] == [KeyboardInterrupt]
        assert rt.halted and rt.abandoned == ()
    finally:
        rt.stop()  # (finishes a stop left unfinished; done: nothing left to raise)
    assert_no_new_threads(before)


def test_hooks_registered_last_run_after_every_other_hook_the_drains_included() -> None:
    # last=True: after the others, the native executor's drain among them
    # (registered at start, so it runs after the hooks registered later):
    # a late hook sees every batch answered. Each group last-registered first.
    before = live_threads()
    rt = ToolRuntime().start()
    running, early_ran = threading.Event(), threading.Event()

    @tool
    def waits(ctx: ToolRunContext) -> str:
        """Ends once the stop began and the early hooks ran."""
        running.set()
        ctx.signal.wait(GUARD)
        early_ran.wait(GUARD)
        return "done"

    rt.tools.register(waits)
    future = rt.tools.submit(ToolBatchInput(calls=[ToolCall("c1", "waits", "{}")]))
    assert running.wait(GUARD)
    order: list[str] = []

    def early(name: str) -> Callable[[], None]:
        def hook() -> None:
            order.append(f"{name}: batch answered {future.done()}")
            if name == "early 1":  # (the last of them to run: the body may end now)
                early_ran.set()

        return hook

    rt.on_stop(lambda: order.append(f"late 1: batch answered {future.done()}"), last=True)
    rt.on_stop(early("early 1"))
    rt.on_stop(lambda: order.append(f"late 2: batch answered {future.done()}"), last=True)
    rt.on_stop(early("early 2"))
    with pytest.raises(TypeError, match="on_stop's last must be True or False, got str"):
        rt.on_stop(lambda: None, last="yes")  # type: ignore[arg-type]
    assert _stop_in_thread(rt, GUARD) == []
    assert order == [
        "early 2: batch answered False",
        "early 1: batch answered False",
        "late 2: batch answered True",
        "late 1: batch answered True",
    ]
    assert future.result(0).results[0].result.error.info.code == "ABORTED"  # (it ended after the stop's abort)
    assert_no_new_threads(before)
