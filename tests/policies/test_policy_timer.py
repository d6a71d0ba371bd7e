"""The deadline timer behind the timeout policy: one thread, one heap,
cancelled deadlines removed, a lazy start and a clean stop."""

from __future__ import annotations

import threading

from policy_helpers import WAIT, Recorder

from policies._timer import DeadlineTimer


def test_deadlines_fire_in_deadline_order_whatever_the_order_they_were_scheduled_in() -> None:
    timer = DeadlineTimer()
    fired = Recorder()
    done = threading.Event()

    def note(label: str) -> None:
        fired.add(label)
        if len(fired.items) == 3:
            done.set()

    try:
        timer.schedule(0.03, lambda: note("third"))
        timer.schedule(0.01, lambda: note("first"))
        timer.schedule(0.02, lambda: note("second"))
        assert done.wait(WAIT)
    finally:
        timer.stop()
    assert fired.items == ["first", "second", "third"]


def test_one_thread_serves_every_deadline() -> None:
    timer = DeadlineTimer(name="dsh-policy-test-timer")
    count = Recorder()
    done = threading.Event()

    def tick() -> None:
        count.add(1)
        if len(count.items) == 50:
            done.set()

    try:
        for i in range(50):
            timer.schedule(0.001 * (i % 5), tick)
        assert done.wait(WAIT)
        named = [t for t in threading.enumerate() if t.name == "dsh-policy-test-timer"]
        assert named == [timer.thread]
    finally:
        timer.stop()


def test_the_thread_starts_with_the_first_deadline_and_stop_ends_it() -> None:
    timer = DeadlineTimer()
    assert timer.thread is None
    deadline = timer.schedule(3600, lambda: None)
    assert deadline is not None
    thread = timer.thread
    assert thread is not None and thread.is_alive()
    timer.stop()
    assert not thread.is_alive()
    assert timer.pending == 0


def test_a_cancelled_deadline_never_fires() -> None:
    timer = DeadlineTimer()
    fired = Recorder()
    later = threading.Event()
    busy, release = threading.Event(), threading.Event()
    try:
        # the timer's thread is held in a callback while the early deadline is
        # scheduled and cancelled, so it cannot fire first on a loaded machine
        timer.schedule(0, lambda: (busy.set(), release.wait(WAIT)))
        assert busy.wait(WAIT)
        early = timer.schedule(0.005, lambda: fired.add("cancelled one"))
        assert early is not None
        assert early.cancel() is True
        timer.schedule(0.01, later.set)
        release.set()
        assert later.wait(WAIT)  # fires after the cancelled one was due
    finally:
        timer.stop()
    assert fired.items == []
    assert early.cancel() is False  # idempotent


def test_cancelled_deadlines_do_not_accumulate_in_the_heap() -> None:
    timer = DeadlineTimer()
    try:
        for _ in range(10):
            handles = [timer.schedule(3600, lambda: None) for _ in range(1000)]
            for handle in handles:
                assert handle is not None
                handle.cancel()
            assert timer.pending == 0
            assert timer.heap_size < 128
    finally:
        timer.stop()


def test_cancelling_after_it_fired_reports_false() -> None:
    timer = DeadlineTimer()
    fired = threading.Event()
    try:
        deadline = timer.schedule(0, fired.set)
        assert deadline is not None
        assert fired.wait(WAIT)
        assert deadline.fired
        assert deadline.cancel() is False
    finally:
        timer.stop()


def test_stop_drops_pending_deadlines_without_running_them_and_refuses_new_ones() -> None:
    timer = DeadlineTimer()
    fired = Recorder()
    timer.schedule(3600, lambda: fired.add("late"))
    timer.stop()
    timer.stop()  # idempotent
    assert timer.schedule(0, lambda: fired.add("after stop")) is None
    assert fired.items == []
    assert timer.pending == 0


def test_a_raising_callback_does_not_stop_the_others() -> None:
    timer = DeadlineTimer()
    after = threading.Event()

    def boom() -> None:
        raise RuntimeError("boom")

    try:
        timer.schedule(0, boom)
        timer.schedule(0.001, after.set)
        assert after.wait(WAIT)
    finally:
        timer.stop()


def test_a_callback_may_schedule_and_stop() -> None:
    timer = DeadlineTimer()
    second = threading.Event()
    stopped = threading.Event()

    def then_stop() -> None:
        timer.stop()  # from the timer thread itself: must not join itself
        stopped.set()

    timer.schedule(0, lambda: timer.schedule(0, second.set))
    assert second.wait(WAIT)
    timer.schedule(0, then_stop)
    assert stopped.wait(WAIT)
    thread = timer.thread
    assert thread is not None
    thread.join(WAIT)
    assert not thread.is_alive()
