"""AbortController / AbortSignal: level-triggered flag, callbacks, fusion.

Threads are synchronised with Event/Barrier only; a ``join(timeout=...)`` is a
deadlock guard, never a way to wait for something to happen.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loguru import logger

from dsh_actors.errors import AbortError, ErrorCode
from dsh_actors.signals import AbortCallback, AbortController, AbortSignal, Unsubscribe, fuse_late

GUARD = 10.0  # seconds; only ever reached if something deadlocks


def run_threads(count: int, target: Callable[[int], object]) -> None:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(GUARD)
    assert not any(thread.is_alive() for thread in threads), "deadlock"


def run_guarded(fn: Callable[[], object]) -> None:
    run_threads(1, lambda _: fn())


@pytest.fixture
def error_log(library_logs: None) -> Iterator[list[Any]]:
    records: list[Any] = []
    handler = logger.add(lambda message: records.append(message.record), level="ERROR")
    try:
        yield records
    finally:
        logger.remove(handler)


# -- the flag ---------------------------------------------------------------


def test_a_fresh_signal_is_pending_with_no_reason() -> None:
    signal = AbortController().signal
    assert signal.aborted is False
    assert signal.reason is None
    assert signal.listener_count == 0
    assert signal.wait(timeout=0) is False
    signal.throw_if_aborted()


def test_once_aborted_a_signal_stays_aborted_and_wait_returns_at_once() -> None:
    controller = AbortController()
    assert controller.abort("stop") is True
    for _ in range(3):
        assert controller.signal.aborted is True
        assert controller.signal.reason == "stop"
        assert controller.signal.wait() is True
        assert controller.signal.wait(timeout=0) is True


def test_abort_without_a_reason_uses_a_fresh_abort_error() -> None:
    first, second = AbortController(), AbortController()
    first.abort()
    second.abort()
    reason = first.signal.reason
    assert isinstance(reason, AbortError)
    assert reason.code is ErrorCode.ABORTED
    assert reason.reason is None
    assert second.signal.reason is not reason


def test_the_first_reason_wins_and_later_aborts_return_false() -> None:
    controller = AbortController()
    assert controller.abort("first") is True
    assert controller.abort("second") is False
    assert controller.abort() is False
    assert controller.signal.reason == "first"


def test_racing_aborts_have_exactly_one_winner_and_everyone_sees_its_reason() -> None:
    threads = 16
    controller = AbortController()
    signal = controller.signal
    child = AbortSignal.any(AbortController().signal, signal)
    heard: list[object] = []
    signal.add_callback(lambda s: heard.append(s.reason))
    barrier = threading.Barrier(threads)
    won: list[bool] = [False] * threads
    seen: list[object] = [None] * threads
    reasons = [f"reason-{i}" for i in range(threads)]

    def racer(i: int) -> None:
        barrier.wait()
        won[i] = controller.abort(reasons[i])
        seen[i] = signal.reason

    run_threads(threads, racer)
    assert won.count(True) == 1
    winner = reasons[won.index(True)]
    assert all(reason is winner for reason in seen)
    assert heard == [winner]
    assert child.reason is winner


# -- callbacks --------------------------------------------------------------


def test_a_callback_runs_once_on_the_aborting_thread_after_aborted_is_visible() -> None:
    controller = AbortController()
    calls: list[tuple[AbortSignal, bool, object, threading.Thread]] = []
    controller.signal.add_callback(lambda s: calls.append((s, s.aborted, s.reason, threading.current_thread())))
    aborter: list[threading.Thread] = []

    def abort(_: int) -> None:
        aborter.append(threading.current_thread())
        controller.abort("why")
        controller.abort("again")

    run_threads(1, abort)
    assert calls == [(controller.signal, True, "why", aborter[0])]
    assert controller.signal.listener_count == 0


def test_callbacks_run_in_subscription_order() -> None:
    controller = AbortController()
    order: list[int] = []

    def recorder(i: int) -> AbortCallback:
        return lambda _: order.append(i)

    for i in range(5):
        controller.signal.add_callback(recorder(i))
    controller.abort()
    assert order == [0, 1, 2, 3, 4]


def test_a_callback_may_read_subscribe_and_abort_without_deadlock() -> None:
    first, second, third = AbortController(), AbortController(), AbortController()
    log: list[str] = []

    def on_first(signal: AbortSignal) -> None:
        log.append(f"first aborted={signal.aborted} {signal!r}")
        signal.add_callback(lambda _: log.append("late subscriber ran at once"))
        third.signal.add_callback(lambda _: log.append("third"))
        log.append(f"re-abort first: {first.abort('again')}")
        second.abort("from first")

    def on_second(signal: AbortSignal) -> None:
        log.append(f"second reason={signal.reason}")
        first.abort("cycle")  # already aborted: a no-op, not a deadlock

    first.signal.add_callback(on_first)
    second.signal.add_callback(on_second)
    run_guarded(lambda: first.abort("go"))
    assert log == [
        "first aborted=True <AbortSignal aborted reason='go'>",
        "late subscriber ran at once",
        "re-abort first: False",
        "second reason=from first",
    ]
    assert third.signal.listener_count == 1
    assert second.signal.aborted


def test_a_raising_callback_is_logged_and_the_others_still_run(error_log: list[Any]) -> None:
    controller = AbortController()
    ran: list[str] = []

    def broken(_: AbortSignal) -> None:
        ran.append("broken")
        raise RuntimeError("boom")

    controller.signal.add_callback(lambda _: ran.append("before"))
    controller.signal.add_callback(broken)
    controller.signal.add_callback(lambda _: ran.append("after"))
    assert controller.abort() is True
    assert ran == ["before", "broken", "after"]
    assert len(error_log) == 1
    assert "broken" in error_log[0]["message"]
    assert error_log[0]["extra"]["traceback"].endswith("RuntimeError: boom")  # (as text: errors.log_exception)


def test_a_raising_callback_on_an_already_aborted_signal_is_contained(
    error_log: list[Any],
) -> None:
    controller = AbortController()
    controller.abort()

    def broken(_: AbortSignal) -> None:
        raise ValueError("late boom")

    unsubscribe = controller.signal.add_callback(broken)
    unsubscribe()
    assert len(error_log) == 1


def test_add_callback_on_an_aborted_signal_runs_it_now_on_the_calling_thread() -> None:
    controller = AbortController()
    controller.abort("done")
    calls: list[tuple[object, threading.Thread]] = []
    unsubscribe = controller.signal.add_callback(lambda s: calls.append((s.reason, threading.current_thread())))
    assert calls == [("done", threading.current_thread())]
    assert controller.signal.listener_count == 0
    unsubscribe()
    unsubscribe()


def test_unsubscribe_is_idempotent_and_removes_only_its_own_callback() -> None:
    controller = AbortController()
    ran: list[str] = []
    drop = controller.signal.add_callback(lambda _: ran.append("dropped"))
    controller.signal.add_callback(lambda _: ran.append("kept"))
    assert controller.signal.listener_count == 2
    drop()
    drop()
    assert controller.signal.listener_count == 1
    controller.abort()
    drop()
    assert ran == ["kept"]


def test_a_callback_may_unsubscribe_itself_and_others_during_dispatch() -> None:
    controller = AbortController()
    ran: list[str] = []
    handles: dict[str, Unsubscribe] = {}

    def first(_: AbortSignal) -> None:
        ran.append("first")
        handles["first"]()
        handles["third"]()
        handles["third"]()

    handles["first"] = controller.signal.add_callback(first)
    handles["second"] = controller.signal.add_callback(lambda _: ran.append("second"))
    handles["third"] = controller.signal.add_callback(lambda _: ran.append("third"))
    controller.abort()
    assert ran == ["first", "second"]
    assert controller.signal.listener_count == 0
    for unsubscribe in handles.values():
        unsubscribe()


# -- wait / throw_if_aborted ------------------------------------------------


@pytest.mark.parametrize("timeout", [0, 0.001, -1])
def test_wait_with_a_timeout_returns_false_while_pending(timeout: float) -> None:
    assert AbortController().signal.wait(timeout) is False


@pytest.mark.parametrize("following", [False, True])
@pytest.mark.parametrize("timeout", [math.inf, 10**400])
def test_wait_longer_than_the_platform_can_waits_until_the_abort(timeout: float, following: bool) -> None:
    # Before, threading's OverflowError ("timestamp out of range for
    # platform time_t") came out of wait(math.inf).
    parent = AbortController()
    controller = AbortController(parent.signal) if following else parent
    outcome: list[object] = []

    def waiter(_: int) -> None:
        try:
            outcome.append(controller.signal.wait(timeout))
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            outcome.append(exc)

    thread = threading.Thread(target=waiter, args=(0,))
    thread.start()
    parent.abort()
    thread.join(GUARD)
    assert outcome == [True]


@pytest.mark.parametrize("following", [False, True])
def test_wait_and_add_callback_refuse_what_they_cannot_use_naming_it(following: bool) -> None:
    # Before, add_callback(None) (what calling the callback returned) was
    # kept, and only logged as "raised" when the signal aborted: it never
    # ran. wait("1") failed with "'>' not supported between instances of
    # 'str' and 'int'"; wait(nan) returned False at once.
    from dsh_actors import InvalidTypeError, InvalidValueError

    parent = AbortController()
    signal = AbortController(parent.signal).signal if following else parent.signal
    with pytest.raises(InvalidTypeError, match=r"^add_callback\(\) takes a function, fn\(signal\), not NoneType None"):
        signal.add_callback(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match=r"^wait\(timeout=\.\.\.\) is a number of seconds or None, not str$"):
        signal.wait("1")  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError, match="not NaN"):
        signal.wait(math.nan)
    assert parent.signal.listener_count == 0  # (a following signal did not link)
    assert signal.wait(0) is False


def test_wait_returns_true_when_another_thread_aborts() -> None:
    controller = AbortController()
    waiting = threading.Event()
    result: list[bool] = []

    def waiter(_: int) -> None:
        waiting.set()
        result.append(controller.signal.wait(timeout=GUARD))

    thread = threading.Thread(target=waiter, args=(0,))
    thread.start()
    assert waiting.wait(GUARD)
    assert controller.abort() is True
    thread.join(GUARD)
    assert result == [True]


def test_many_waiters_all_wake_on_one_abort() -> None:
    waiters = 8
    controller = AbortController()
    ready = threading.Barrier(waiters + 1)
    result: list[bool] = []

    def waiter(_: int) -> None:
        ready.wait()
        result.append(controller.signal.wait(timeout=GUARD))

    threads = [threading.Thread(target=waiter, args=(i,)) for i in range(waiters)]
    for thread in threads:
        thread.start()
    ready.wait()
    controller.abort()
    for thread in threads:
        thread.join(GUARD)
    assert result == [True] * waiters


def test_throw_if_aborted_raises_the_reason_when_it_is_an_exception() -> None:
    controller = AbortController()
    controller.signal.throw_if_aborted()
    reason = KeyError("gone")
    controller.abort(reason)
    with pytest.raises(KeyError) as caught:
        controller.signal.throw_if_aborted()
    assert caught.value is reason


def test_throw_if_aborted_raises_the_default_abort_error() -> None:
    controller = AbortController()
    controller.abort()
    with pytest.raises(AbortError) as caught:
        controller.signal.throw_if_aborted()
    assert caught.value is controller.signal.reason


def test_throw_if_aborted_wraps_a_reason_that_is_not_an_exception() -> None:
    controller = AbortController()
    controller.abort({"why": "user"})
    with pytest.raises(AbortError) as caught:
        controller.signal.throw_if_aborted()
    assert caught.value.reason == {"why": "user"}
    assert caught.value.code is ErrorCode.ABORTED


# -- fusion -------------------------------------------------------------------


def test_a_fused_signal_aborts_with_the_reason_of_the_first_parent_to_abort() -> None:
    a, b = AbortController(), AbortController()
    child = AbortSignal.any(a.signal, b.signal)
    assert not child.aborted
    assert a.signal.listener_count == b.signal.listener_count == 1
    b.abort("b first")
    a.abort("a second")
    assert child.reason == "b first"


def test_a_fused_signal_over_an_aborted_parent_is_born_aborted_and_subscribes_nowhere() -> None:
    pending, first, second = AbortController(), AbortController(), AbortController()
    second.abort("second")
    first.abort("first")
    child = AbortSignal.any(pending.signal, second.signal, first.signal)
    assert child.reason == "second"
    assert pending.signal.listener_count == 0
    assert first.signal.listener_count == second.signal.listener_count == 0


def test_a_fused_signal_that_fires_detaches_from_every_parent() -> None:
    parents = [AbortController() for _ in range(4)]
    child = AbortSignal.any(*(p.signal for p in parents))
    ran: list[object] = []
    child.add_callback(lambda s: ran.append(s.reason))
    parents[2].abort("third")
    assert ran == ["third"]
    assert [p.signal.listener_count for p in parents] == [0, 0, 0, 0]
    parents[0].abort("later")
    assert child.reason == "third"
    child.close()
    child.close()


def test_closing_a_fused_signal_detaches_it_and_freezes_it_pending() -> None:
    a, b = AbortController(), AbortController()
    child = AbortSignal.any(a.signal, b.signal)
    ran: list[str] = []
    child.add_callback(lambda _: ran.append("dropped"))
    child.close()
    assert a.signal.listener_count == b.signal.listener_count == 0
    assert child.listener_count == 0
    assert child.wait(timeout=0) is False
    assert child.add_callback(lambda _: ran.append("never")) is not None
    assert child.listener_count == 0
    a.abort()
    child.close()
    assert not child.aborted
    assert child.reason is None
    assert ran == []
    assert repr(child) == "<AbortSignal pending closed>"


def test_a_fused_signal_closes_on_leaving_its_with_block_even_on_error() -> None:
    a = AbortController()
    with AbortSignal.any(a.signal) as child:
        assert a.signal.listener_count == 1
    assert a.signal.listener_count == 0
    with pytest.raises(RuntimeError), AbortSignal.any(a.signal) as child:
        raise RuntimeError("body failed")
    assert a.signal.listener_count == 0
    assert not child.aborted


def test_ten_thousand_closed_children_leave_a_long_lived_parent_with_no_listeners() -> None:
    parent = AbortController()
    children = [AbortSignal.any(parent.signal) for _ in range(10_000)]
    assert parent.signal.listener_count == 10_000
    for child in children:
        child.close()
    assert parent.signal.listener_count == 0
    parent.abort()
    assert not any(child.aborted for child in children)


def test_ten_thousand_children_fire_together_and_leave_no_listeners() -> None:
    parent, other = AbortController(), AbortController()
    children = [AbortSignal.any(parent.signal, other.signal) for _ in range(10_000)]
    parent.abort("all")
    assert all(child.reason == "all" for child in children)
    assert parent.signal.listener_count == other.signal.listener_count == 0


def test_a_fused_signal_of_no_parents_never_aborts() -> None:
    child = AbortSignal.any()
    assert not child.aborted
    assert child.wait(timeout=0) is False
    child.close()


def test_a_fused_signal_of_one_parent_is_a_distinct_signal() -> None:
    a = AbortController()
    child = AbortSignal.any(a.signal)
    assert child is not a.signal
    assert child != a.signal
    a.abort("x")
    assert child.reason == "x"


def test_a_parent_given_twice_is_subscribed_once() -> None:
    a = AbortController()
    child = AbortSignal.any(a.signal, a.signal)
    assert a.signal.listener_count == 1
    child.close()
    assert a.signal.listener_count == 0


def test_any_rejects_what_is_not_a_signal() -> None:
    with pytest.raises(TypeError, match="NoneType"):
        AbortSignal.any(AbortController().signal, None)  # type: ignore[arg-type]


def test_fusion_nests_propagates_and_detaches_at_every_level() -> None:
    a, b, c = AbortController(), AbortController(), AbortController()
    inner = AbortSignal.any(a.signal, b.signal)
    outer = AbortSignal.any(inner, c.signal)
    assert inner.listener_count == 1
    a.abort("from a")
    assert inner.reason == "from a"
    assert outer.reason == "from a"
    assert [s.listener_count for s in (a.signal, b.signal, c.signal, inner)] == [0, 0, 0, 0]


def test_closing_an_inner_fused_signal_frees_the_outer_subscription_to_it() -> None:
    a, c = AbortController(), AbortController()
    inner = AbortSignal.any(a.signal)
    outer = AbortSignal.any(inner, c.signal)
    inner.close()
    assert inner.listener_count == 0
    a.abort()
    assert not outer.aborted
    c.abort("c")
    assert outer.reason == "c"
    assert c.signal.listener_count == 0


def test_closing_a_fused_signal_from_its_own_callback_lets_the_rest_run() -> None:
    parent = AbortController()
    child = AbortSignal.any(parent.signal)
    ran: list[str] = []
    child.add_callback(lambda s: s.close())
    child.add_callback(lambda _: ran.append("second"))
    parent.abort()
    assert ran == ["second"]
    assert child.aborted


class _RecordingParent(AbortSignal):
    def __init__(self) -> None:
        super().__init__()
        self.subscribers: list[AbortCallback] = []

    def add_callback(self, fn: AbortCallback) -> Unsubscribe:
        self.subscribers.append(fn)
        return super().add_callback(fn)


def test_a_closed_fused_signal_ignores_a_parent_abort_delivered_late() -> None:
    # A parent's dispatch may take the child's callback just before the child
    # closes on another thread and deliver it just after: the child must
    # stay pending, since its callbacks were already dropped.
    parent = _RecordingParent()
    child = AbortSignal.any(parent)
    child.close()
    parent._abort("late")
    [deliver] = parent.subscribers
    deliver(parent)
    assert not child.aborted


class _AbortsAnotherWhenSubscribed(AbortSignal):
    """A parent whose subscription makes another parent abort before
    ``add_callback`` returns: the window in which ``any`` holds a live
    subscription it has not recorded yet."""

    def __init__(self, victim: AbortController, *, on_other_thread: bool) -> None:
        super().__init__()
        self.victim = victim
        self.on_other_thread = on_other_thread

    def add_callback(self, fn: AbortCallback) -> Unsubscribe:
        unsubscribe = super().add_callback(fn)
        if self.on_other_thread:
            run_guarded(lambda: self.victim.abort("late"))
        else:
            self.victim.abort("late")
        return unsubscribe


@pytest.mark.parametrize("on_other_thread", [False, True])
def test_a_parent_aborting_while_any_subscribes_leaves_no_subscription(
    on_other_thread: bool,
) -> None:
    victim, untouched = AbortController(), AbortController()
    hook = _AbortsAnotherWhenSubscribed(victim, on_other_thread=on_other_thread)
    child = AbortSignal.any(victim.signal, hook, untouched.signal)
    assert child.reason == "late"
    assert hook.listener_count == 0
    assert victim.signal.listener_count == 0
    assert untouched.signal.listener_count == 0


def test_any_racing_a_parent_abort_on_another_thread_is_aborted_and_leaves_nothing() -> None:
    for _ in range(100):
        a, b = AbortController(), AbortController()
        barrier = threading.Barrier(2)
        children: list[AbortSignal] = []

        def racer(i: int) -> None:
            barrier.wait()
            if i == 0:
                b.abort("b")
            else:
                children.append(AbortSignal.any(a.signal, b.signal))

        run_threads(2, racer)
        assert children[0].reason == "b"
        assert a.signal.listener_count == b.signal.listener_count == 0


def test_closing_a_fused_signal_racing_its_parent_abort_is_one_or_the_other() -> None:
    for _ in range(100):
        parent = AbortController()
        child = AbortSignal.any(parent.signal)
        heard: list[object] = []
        child.add_callback(lambda s: heard.append(s.reason))
        barrier = threading.Barrier(2)

        def racer(i: int) -> None:
            barrier.wait()
            if i == 0:
                parent.abort("p")
            else:
                child.close()

        run_threads(2, racer)
        assert parent.signal.listener_count == 0
        assert heard == (["p"] if child.aborted else [])


# -- a controller that follows parents ---------------------------------------


def test_a_controller_with_parents_aborts_with_the_first_abort_its_own_included() -> None:
    caller = AbortController()
    controller = AbortController(caller.signal)
    caller.abort("caller first")
    assert controller.signal.aborted
    assert controller.signal.reason == "caller first"
    assert controller.abort("too late") is False
    assert caller.signal.listener_count == 0

    own = AbortController(AbortController().signal)
    assert own.abort("mine") is True
    assert own.signal.reason == "mine"


def test_a_controller_over_an_aborted_parent_is_born_aborted() -> None:
    parent = AbortController()
    parent.abort("before")
    controller = AbortController(AbortController().signal, parent.signal)
    assert controller.signal.reason == "before"
    assert controller.abort("after") is False


def test_closing_a_controller_with_parents_detaches_it_and_its_abort_is_refused() -> None:
    caller = AbortController()
    controller = AbortController(caller.signal)
    ran: list[object] = []
    controller.signal.add_callback(lambda signal: ran.append(signal.reason))
    controller.signal.close()
    assert caller.signal.listener_count == 0
    assert controller.abort("late") is False
    caller.abort("late too")
    assert not controller.signal.aborted
    assert ran == []


def test_a_controller_subscribes_to_its_parents_only_once_something_subscribes_to_it() -> None:
    caller = AbortController()
    controller = AbortController(caller.signal)
    assert caller.signal.listener_count == 0  # read from the parent until then
    assert not controller.signal.aborted
    heard: list[object] = []
    unsubscribe = controller.signal.add_callback(lambda signal: heard.append(signal.reason))
    assert caller.signal.listener_count == 1
    unsubscribe()
    assert caller.signal.listener_count == 1  # linked for good, until it fires or closes
    controller.signal.close()
    assert caller.signal.listener_count == 0
    assert controller.abort("closed") is False
    assert heard == []


def test_a_linked_controller_tells_its_listeners_of_a_parent_abort() -> None:
    caller = AbortController()
    controller = AbortController(caller.signal)
    child = AbortSignal.any(controller.signal)  # a fused child subscribes: linked
    heard: list[object] = []
    controller.signal.add_callback(lambda signal: heard.append(signal.reason))
    caller.abort("stop")
    assert heard == ["stop"]
    assert child.reason == "stop"
    assert caller.signal.listener_count == controller.signal.listener_count == 0


def test_a_controller_not_yet_linked_takes_the_abort_of_the_parent_that_aborted_first() -> None:
    first, second = AbortController(), AbortController()
    controller = AbortController(first.signal, second.signal)
    second.abort("second aborted first")
    first.abort("first aborted later")
    # Nobody looked in between: what a subscribed signal would have heard.
    assert controller.signal.reason == "second aborted first"
    late = AbortSignal.any(first.signal, controller.signal)
    assert late.reason == "first aborted later"  # any(): born with its first aborted argument
    assert fuse_late((first.signal, controller.signal)).reason == "second aborted first"


def test_a_controller_adopts_a_grandparent_abort_through_a_following_parent() -> None:
    root = AbortController()
    middle = AbortController(root.signal)
    leaf = AbortController(middle.signal)
    root.abort("root")
    assert leaf.abort("mine") is False
    assert leaf.signal.reason == middle.signal.reason == "root"
    assert AbortSignal.any(leaf.signal).reason == "root"


def test_waiting_on_a_controller_with_parents_wakes_on_a_parent_abort() -> None:
    caller = AbortController()
    controller = AbortController(caller.signal)
    waiting = threading.Event()
    woke: list[bool] = []

    def waiter(_: int) -> None:
        waiting.set()
        woke.append(controller.signal.wait(GUARD))

    thread = threading.Thread(target=waiter, args=(0,))
    thread.start()
    waiting.wait(GUARD)
    caller.abort("go")  # before or after the wait linked it: either way it wakes
    thread.join(GUARD)
    assert woke == [True]
    assert controller.signal.reason == "go"


def test_linking_a_controller_racing_its_close_leaves_no_subscription() -> None:
    for _ in range(200):
        caller = AbortController()
        controller = AbortController(caller.signal)
        barrier = threading.Barrier(2)

        def racer(i: int) -> None:
            barrier.wait()
            if i == 0:
                controller.signal.add_callback(lambda _: None)
            else:
                controller.signal.close()

        run_threads(2, racer)
        assert caller.signal.listener_count == 0
        assert controller.abort("late") is False


def test_linking_a_controller_racing_its_parent_abort_fires_it_once() -> None:
    for _ in range(200):
        caller = AbortController()
        controller = AbortController(caller.signal)
        heard: list[object] = []
        barrier = threading.Barrier(2)

        def racer(i: int) -> None:
            barrier.wait()
            if i == 0:
                controller.signal.add_callback(lambda signal: heard.append(signal.reason))
            else:
                caller.abort("p")

        run_threads(2, racer)
        assert heard == ["p"]
        assert caller.signal.listener_count == 0


def test_a_controller_rejects_a_parent_that_is_not_a_signal() -> None:
    with pytest.raises(TypeError, match=r"AbortController\(\) takes AbortSignals, not str"):
        AbortController("nope")  # type: ignore[arg-type]
    aborted = AbortController()
    aborted.abort()
    with pytest.raises(TypeError, match=r"AbortController\(\) takes AbortSignals, not str"):
        AbortController(aborted.signal, "nope")  # type: ignore[arg-type]


class _SlowToSubscribe(AbortSignal):
    """A parent (that never aborts) whose subscription waits for ``release``."""

    __slots__ = ("entered", "release")

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def add_callback(self, fn: AbortCallback) -> Unsubscribe:
        self.entered.set()
        self.release.wait(GUARD)
        return super().add_callback(fn)


def test_a_parent_abort_while_a_controller_links_is_neither_lost_nor_overtaken() -> None:
    slow, b = _SlowToSubscribe(), AbortController()
    controller = AbortController(slow, b.signal)
    heard: list[object] = []
    linker = threading.Thread(target=lambda: controller.signal.add_callback(lambda s: heard.append(s.reason)))
    linker.start()
    assert slow.entered.wait(GUARD)  # subscribing: to `slow` now, to b next
    b.abort("b")
    assert controller.signal.aborted
    assert controller.signal.reason == "b"
    assert controller.abort("own, later") is False
    slow.release.set()
    linker.join(GUARD)
    assert heard == ["b"]  # (run on the linking thread: it subscribed after the abort)
    assert slow.listener_count == b.signal.listener_count == 0


def test_waiting_on_a_controller_another_thread_is_linking_sees_a_parent_abort_at_once() -> None:
    slow, b = _SlowToSubscribe(), AbortController()
    controller = AbortController(slow, b.signal)
    linker = threading.Thread(target=lambda: controller.signal.add_callback(lambda _: None))
    linker.start()
    assert slow.entered.wait(GUARD)  # subscribing: to `slow` now, to b next
    b.abort("b")
    try:
        assert controller.signal.wait(0) is True
    finally:
        slow.release.set()
        linker.join(GUARD)
    assert controller.signal.reason == "b"


class _SlowToRead(AbortSignal):
    """A parent (that never aborts) whose first ``aborted`` read once
    ``armed`` waits for ``release``."""

    __slots__ = ("armed", "entered", "release")

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    @property  # type: ignore[override]
    def aborted(self) -> bool:
        if self.armed and not self.entered.is_set():
            self.entered.set()
            self.release.wait(GUARD)
        return False


def test_a_controller_read_while_its_parents_abort_takes_the_first_of_them() -> None:
    a, slow, b = AbortController(), _SlowToRead(), AbortController()
    controller = AbortController(a.signal, slow, b.signal)
    slow.armed = True
    seen: list[object] = []
    reader = threading.Thread(target=lambda: seen.append(controller.signal.aborted))
    reader.start()
    assert slow.entered.wait(GUARD)  # the read has looked at a (pending) and is at `slow`
    a.abort("a")
    b.abort("b")
    slow.release.set()
    reader.join(GUARD)
    assert seen == [True]
    assert controller.signal.reason == "a"


def test_fuse_late_over_a_controller_not_yet_read_takes_the_abort_it_follows() -> None:
    x, a = AbortController(), AbortController()
    controller = AbortController(x.signal)
    x.abort("x first")
    a.abort("a later")
    assert fuse_late((a.signal, controller.signal)).reason == "x first"


# -- odds and ends ----------------------------------------------------------


def test_close_on_a_controller_signal_changes_nothing() -> None:
    controller = AbortController()
    child = AbortSignal.any(controller.signal)
    ran: list[str] = []
    controller.signal.add_callback(lambda _: ran.append("ran"))
    with controller.signal as same:
        assert same is controller.signal
    controller.signal.close()
    assert controller.signal.listener_count == 2
    controller.abort("still works")
    assert ran == ["ran"]
    assert child.reason == "still works"


def test_repr_shows_the_state() -> None:
    controller = AbortController()
    controller.signal.add_callback(lambda _: None)
    controller.signal.add_callback(lambda _: None)
    AbortSignal.any(controller.signal)
    assert repr(controller.signal) == "<AbortSignal pending listeners=3>"
    controller.abort("why")
    assert repr(controller.signal) == "<AbortSignal aborted reason='why'>"
    assert repr(controller) == "<AbortController <AbortSignal aborted reason='why'>>"


def test_repr_survives_a_reason_with_a_broken_repr() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    controller = AbortController()
    controller.abort(Hostile())
    assert repr(controller.signal) == "<AbortSignal aborted reason=<unprintable>>"


def test_signals_compare_and_hash_by_identity() -> None:
    first, second = AbortSignal(), AbortSignal()
    assert first != second
    assert first == first
    assert len({first, second, first}) == 2


# -- property: fusion over random graphs ------------------------------------


@dataclass
class _Node:
    signal: AbortSignal
    # "controller": AbortController(); "fused": AbortSignal.any(*parents);
    # "following": AbortController(*parents), subscribed to its parents only
    # once something subscribed to it (``linked``).
    kind: str
    controller: AbortController | None = None
    parents: tuple[int, ...] = ()
    aborted: bool = False
    reason: object = None
    closed: bool = False
    linked: bool = False
    listeners: int = 0  # callbacks added by the "listen" operation, still pending
    children: list[int] = field(default_factory=list)

    @property
    def live(self) -> bool:
        """Still able to abort (a plain controller's close changes nothing)."""
        return not self.aborted and not (self.closed and self.kind != "controller")


class _Model:
    """What the signals should do, told eagerly: every child subscribed to
    its parents from the start. A following signal must be the same, to
    every reader but its parents' ``listener_count``."""

    def __init__(self) -> None:
        self.nodes: list[_Node] = []
        self.controllers: list[int] = []
        for _ in range(2):
            self.new()

    def new(self) -> None:
        controller = AbortController()
        self.controllers.append(len(self.nodes))
        self.nodes.append(_Node(controller.signal, "controller", controller))

    def _child(self, node: _Node) -> None:
        for p in node.parents:
            if self.nodes[p].aborted:
                node.aborted, node.reason = True, self.nodes[p].reason
                break
        index = len(self.nodes)
        for p in set(node.parents):
            self.nodes[p].children.append(index)
        self.nodes.append(node)

    def fuse(self, picks: list[int]) -> None:
        parents = tuple(p % len(self.nodes) for p in picks)
        node = _Node(AbortSignal.any(*(self.nodes[p].signal for p in parents)), "fused", parents=parents)
        if not any(self.nodes[p].aborted for p in parents):
            for p in parents:  # it subscribed to each: a following parent is linked now
                self._link(p)
        self._child(node)

    def follow(self, picks: list[int]) -> None:
        parents = tuple(p % len(self.nodes) for p in picks[:3]) or (0,)
        controller = AbortController(*(self.nodes[p].signal for p in parents))
        self.controllers.append(len(self.nodes))
        self._child(_Node(controller.signal, "following", controller, parents))

    def _link(self, index: int) -> None:
        node = self.nodes[index]
        if node.kind == "following" and node.live and not node.linked:
            node.linked = True
            for p in node.parents:
                self._link(p)

    def listen(self, pick: int) -> None:
        index = pick % len(self.nodes)
        node = self.nodes[index]
        heard: list[object] = []
        node.signal.add_callback(lambda signal: heard.append(signal.reason))
        if node.aborted:
            assert heard == [node.reason]  # run at once
        elif node.live:
            node.listeners += 1
            self._link(index)

    def abort(self, pick: int, reason: object) -> None:
        index = self.controllers[pick % len(self.controllers)]
        node = self.nodes[index]
        assert node.controller is not None
        assert node.controller.abort(reason) is node.live
        if not node.live:
            return
        node.aborted, node.reason = True, reason
        fired = [index]
        while fired:
            for c in self.nodes[fired.pop()].children:
                child = self.nodes[c]
                if child.live:
                    child.aborted, child.reason = True, reason
                    fired.append(c)

    def close(self, pick: int) -> None:
        node = self.nodes[pick % len(self.nodes)]
        node.signal.close()
        if node.kind != "controller" and not node.aborted:
            node.closed = True

    def check(self) -> None:
        expected = [0] * len(self.nodes)
        for node in self.nodes:
            if node.live and (node.kind == "fused" or node.linked):
                for p in set(node.parents):
                    expected[p] += 1
        for node, count in zip(self.nodes, expected, strict=True):
            assert node.signal.aborted is node.aborted
            assert node.signal.reason is node.reason
            assert node.signal.listener_count == (count + node.listeners if node.live else 0)
            if node.kind != "controller" and not node.live:
                assert node.signal._links in (None, [])  # subscribed nowhere
            if node.kind == "following" and not node.linked:
                assert node.signal._links is None  # never subscribed


_index = st.integers(min_value=0, max_value=10_000)
_operations = st.lists(
    st.one_of(
        st.tuples(st.just("new")),
        st.tuples(st.just("fuse"), st.lists(_index, max_size=3)),
        st.tuples(st.just("follow"), st.lists(_index, max_size=3)),
        st.tuples(st.just("listen"), _index),
        st.tuples(st.just("abort"), _index),
        st.tuples(st.just("close"), _index),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(_operations)
def test_a_fused_signal_aborts_iff_a_parent_aborted_before_it_closed(
    operations: list[tuple[Any, ...]],
) -> None:
    model = _Model()
    for step, (op, *args) in enumerate(operations):
        if op == "new":
            model.new()
        elif op == "fuse":
            model.fuse(args[0])
        elif op == "follow":
            model.follow(args[0])
        elif op == "listen":
            model.listen(args[0])
        elif op == "abort":
            model.abort(args[0], f"reason-{step}")
        else:
            model.close(args[0])
        model.check()
