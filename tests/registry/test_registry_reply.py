"""The one-shot reply ``ToolsService.execute`` waits on (registry/service.py,
``_Reply``): the part of a Future an executor settles, settled once."""

from __future__ import annotations

import threading

import pytest

from dsh_actors.registry.service import _Reply

GUARD = 10.0


def test_it_is_settled_once_with_the_first_result() -> None:
    reply = _Reply()
    assert not reply.done() and reply.set_running_or_notify_cancel()
    assert not reply.wait(0)
    reply.set_result("first")
    reply.set_result("second")
    reply.set_exception(RuntimeError("late"))
    assert reply.done() and not reply.set_running_or_notify_cancel()
    assert reply.wait(0) and reply.wait(0)  # waiting twice returns at once
    assert reply.outcome() == "first"


def test_an_exception_is_raised_to_the_waiter() -> None:
    reply = _Reply()
    error = RuntimeError("boom")
    reply.set_exception(error)
    reply.set_result("ignored")
    with pytest.raises(RuntimeError) as caught:
        reply.outcome()
    assert caught.value is error


def test_a_waiter_on_another_thread_wakes_when_it_is_settled() -> None:
    reply = _Reply()
    waiting = threading.Event()
    got: list[object] = []

    def waiter() -> None:
        waiting.set()
        assert reply.wait(GUARD)
        got.append(reply.outcome())

    thread = threading.Thread(target=waiter)
    thread.start()
    assert waiting.wait(GUARD)
    reply.set_result(42)
    thread.join(GUARD)
    assert got == [42]
