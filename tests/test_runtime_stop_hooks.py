"""``rt.on_stop`` hooks: each runs on a thread of its own, bounded by the
stop's deadline (and twice ``ToolRuntime.STOP_GRACE``); one that blocks is
left running, named in ``rt.abandoned``, and the stop goes on. A hook's
``SystemExit`` or ``KeyboardInterrupt`` does not cut the teardown short:
``stop()`` raises it once the runtime is stopped."""

from __future__ import annotations

import contextvars
import threading
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
