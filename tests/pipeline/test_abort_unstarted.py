"""A call cancelled before its body started is settled by one method,
``Call.abort_unstarted``: ``ABORTED_BEFORE_DISPATCH``, which post-execute
sees exactly when the call's pre-execute phases ran, once or more
(``Call.phases_ran``). Driven through the pipeline's stages on the test
thread, so each case is exact."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dsh_actors import AbortController, Cancel, ToolExecutionInput, ToolRuntime
from dsh_actors.pipeline.call import begin
from dsh_actors.pipeline.finalize import finalize
from dsh_actors.pipeline.prepare import prepare

from .helpers import code_of, echo_tool


@contextmanager
def _runtime(posts: list[str]) -> Iterator[ToolRuntime]:
    with ToolRuntime() as rt:
        rt.tools.register(echo_tool())

        def post(execution: Any, result: Any, next_: Any) -> Any:
            posts.append(code_of(result))
            return next_()

        rt.events.on("tools/post-execute", post)
        yield rt


def _call(controller: AbortController) -> Any:
    return begin(
        0, ToolExecutionInput(call_id="c0", name="echo", arguments={"message": "hi"}, signal=controller.signal)
    )


def test_a_call_aborted_before_its_phases_ran_skips_post_execute() -> None:
    posts: list[str] = []
    with _runtime(posts) as rt:
        controller = AbortController()
        call = _call(controller)
        controller.abort()
        prepare(rt.kernel, call)
        assert call.phases_ran is False
        assert code_of(finalize(rt.kernel, call)) == "ABORTED_BEFORE_DISPATCH"
    assert posts == []


def test_a_call_prepared_once_and_aborted_before_it_is_prepared_again_passes_post_execute() -> None:
    # Prepared, then sent back (what it was prepared under changed), then the
    # caller aborts before the second prepare's pre-aborted check: the
    # phases ran once, so post-execute sees the abort, as it sees the abort
    # of any call prepared and not dispatched.
    posts: list[str] = []
    with _runtime(posts) as rt:
        controller = AbortController()
        call = _call(controller)
        prepare(rt.kernel, call)
        assert call.outcome is None and call.phases_ran
        call.unprepare()
        assert call.phases_ran, "unprepare() keeps that the phases ran"
        controller.abort()
        prepare(rt.kernel, call)
        assert code_of(finalize(rt.kernel, call)) == "ABORTED_BEFORE_DISPATCH"
    assert posts == ["ABORTED_BEFORE_DISPATCH"]


def test_a_listener_that_cancels_passes_post_execute() -> None:
    posts: list[str] = []
    with _runtime(posts) as rt:
        rt.events.on("tools/pre-execute", lambda execution, next_: Cancel())
        call = _call(AbortController())
        prepare(rt.kernel, call)
        assert code_of(finalize(rt.kernel, call)) == "ABORTED_BEFORE_DISPATCH"
    assert posts == ["ABORTED_BEFORE_DISPATCH"]
