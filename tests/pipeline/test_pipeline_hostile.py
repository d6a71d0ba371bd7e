"""Hostile user code (SPEC section 5): exceptions of any kind from a tool,
listener, renderer or finalizer become failure results, and nothing they
do kills an actor or hangs a batch: the runtime keeps working after."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_actors import Agent, Ask, DshError, ErrorCode, ToolArgsError, ToolErrorInfo, text

from .helpers import assert_failure, call, echo_tool, run, run_one


class Meltdown(BaseException):
    """A BaseException subclass that is not KeyboardInterrupt/SystemExit."""


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr either")


class UnprintableBase(BaseException):
    def __str__(self) -> str:
        raise Meltdown("str melted")


class QuotaExceeded(DshError):
    code = "QUOTA_EXCEEDED"  # type: ignore[assignment]


class Poison:
    """An object whose comparisons and hash raise."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("poisoned __eq__")

    def __hash__(self) -> int:
        raise RuntimeError("poisoned __hash__")

    def __repr__(self) -> str:
        raise RuntimeError("poisoned __repr__")


class PoisonStr(str):
    """A str subclass (not lossless JSON) whose comparisons raise."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("poisoned __eq__")

    __hash__ = str.__hash__


def still_works(rt: Any) -> None:
    """The runtime answers a plain batch after the hostile one."""
    rt.tools.register(echo_tool(name="healthy"))
    batch = run(rt, call(name="healthy", id="after"), agent=Agent("after"))
    assert batch.results[0].call_id == "after"
    result = batch.results[0].result
    assert not result.is_error and result.value == "hi"


def raiser(exc: BaseException) -> Any:
    def body(args: Any, ctx: Any) -> Any:
        raise exc

    return body


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        pytest.param(Meltdown("core breach"), "core breach", id="BaseException-subclass"),
        pytest.param(GeneratorExit("closing"), "closing", id="GeneratorExit"),
        pytest.param(Unprintable(), "<unprintable thrown value>", id="unprintable-Exception"),
        pytest.param(UnprintableBase(), "<unprintable thrown value>", id="unprintable-BaseException"),
        pytest.param(RuntimeError("plain"), "plain", id="Exception"),
    ],
)
def test_whatever_a_body_raises_becomes_a_failure(rt: Any, exc: BaseException, message: str) -> None:
    rt.tools.register(echo_tool(execute=raiser(exc)))
    assert_failure(run_one(rt, agent=Agent("main")), message)
    still_works(rt)


def test_an_exception_with_an_empty_message_still_gives_a_non_empty_failure(rt: Any) -> None:
    rt.tools.register(echo_tool(execute=raiser(RuntimeError())))
    result = run_one(rt)
    assert result.is_error
    assert result.error.message != ""
    assert result.content == (text("Error: " + result.error.message),)


def test_a_dsh_error_from_a_body_carries_its_name_and_code(rt: Any) -> None:
    rt.tools.register(echo_tool(execute=raiser(QuotaExceeded("quota exceeded"))))

    result = run_one(rt)

    assert_failure(result, "quota exceeded")
    assert result.error.info == ToolErrorInfo(name="QuotaExceeded", code="QUOTA_EXCEEDED")
    still_works(rt)


@pytest.mark.parametrize(
    ("exc", "name"),
    [
        (FileNotFoundError(2, "No such file or directory"), "FileNotFoundError"),
        (ValueError("bad"), "ValueError"),
        (Meltdown("core breach"), "Meltdown"),
        (Unprintable(), "Unprintable"),
    ],
)
def test_a_plain_exception_from_a_body_records_its_class_name_with_the_code_tool_failed(
    rt: Any, exc: BaseException, name: str
) -> None:
    from dsh_actors import LogStep, Session, ToolBatchInput

    rt.tools.register(echo_tool(execute=raiser(exc)))
    session = Session()
    rt.tools.execute(ToolBatchInput(calls=[call()], agent=Agent("main", session=session), log=LogStep(1, 1)))
    result = run_one(rt)
    assert result.error.info == ToolErrorInfo(name=name, code="TOOL_FAILED")
    assert session.events()[-1]["error"]["info"] == {"name": name, "code": "TOOL_FAILED", "reason": None}


def test_an_exception_with_an_empty_message_is_named_by_its_class_in_message_and_info(rt: Any) -> None:
    rt.tools.register(echo_tool(execute=raiser(KeyError())))
    result = run_one(rt)
    assert result.error.message == "KeyError"
    assert result.error.info == ToolErrorInfo(name="KeyError", code="TOOL_FAILED")


def test_a_built_in_dsh_error_from_a_body_keeps_its_code(rt: Any) -> None:
    rt.tools.register(echo_tool(execute=raiser(ToolArgsError(["value.x is wrong"]))))
    result = run_one(rt)
    assert_failure(result, "invalid arguments: value.x is wrong", ErrorCode.INVALID_ARGS)
    assert result.error.info is not None and result.error.info.name == "ToolArgsError"


def test_invalid_arguments_fail_with_invalid_args_before_the_body(rt: Any) -> None:
    ran: list[Any] = []
    rt.tools.register(echo_tool(execute=lambda args, ctx: ran.append(args) or "x"))
    result = run_one(rt, call(arguments='{"message": 42}'))
    assert result.is_error
    assert result.error.info is not None and result.error.info.code == ErrorCode.INVALID_ARGS
    assert result.error.message.startswith("invalid arguments: ")
    assert ran == []


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(lambda: Poison(), id="poison"),
        pytest.param(lambda: [Poison()], id="poison-in-a-list"),
        pytest.param(lambda: {"k": Poison()}, id="poison-in-a-dict"),
        pytest.param(lambda: PoisonStr("hi"), id="str-subclass-with-poisoned-eq"),
        pytest.param(lambda: {PoisonStr("k"): 1}, id="poisoned-str-subclass-key"),
    ],
)
def test_a_body_returning_an_object_whose_eq_and_hash_raise_becomes_a_failure(rt: Any, value: Any) -> None:
    rt.tools.register(
        echo_tool(execute=lambda args, ctx: value(), schema={"type": "json"}, render=lambda args, v: [text("x")])
    )
    result = run_one(rt)
    assert result.is_error and result.value is None
    assert result.error.info is not None and result.error.info.code == ErrorCode.INVALID_TOOL_OUTPUT
    still_works(rt)


@pytest.mark.parametrize(
    "rendered",
    [
        pytest.param("hi", id="a-str"),
        pytest.param(None, id="None"),
        pytest.param(text("hi"), id="a-bare-block"),
        pytest.param(["hi"], id="a-list-of-str"),
        pytest.param([Poison()], id="a-list-of-poison"),
    ],
)
def test_a_render_returning_something_that_is_not_a_list_of_blocks_becomes_a_failure(rt: Any, rendered: Any) -> None:
    rt.tools.register(echo_tool(render=lambda args, value: rendered))
    result = run_one(rt)
    assert result.is_error and result.value is None
    still_works(rt)


def test_a_render_raising_a_base_exception_becomes_a_failure(rt: Any) -> None:
    def render(args: Any, value: Any) -> Any:
        raise Meltdown("render melted")

    rt.tools.register(echo_tool(render=render))
    assert run_one(rt).is_error
    still_works(rt)


def pre_melts(execution: Any, next_: Any) -> Any:
    raise Meltdown("pre melted")


def wrapper_melts(execution: Any, next_: Any) -> Any:
    raise Meltdown("wrapper melted")


def post_melts(execution: Any, result: Any, next_: Any) -> Any:
    raise Meltdown("post melted")


@pytest.mark.parametrize(
    ("event", "listener", "message"),
    [
        pytest.param("tools/pre-execute", pre_melts, "tools/pre-execute: pre melted", id="pre-execute"),
        pytest.param("tools/execute", wrapper_melts, "wrapper melted", id="execute"),
        pytest.param("tools/post-execute", post_melts, "tools/post-execute: post melted", id="post-execute"),
    ],
)
def test_a_listener_raising_a_base_exception_subclass_becomes_a_failure(
    rt: Any, event: str, listener: Any, message: str
) -> None:
    dispose = rt.events.on(event, listener)
    rt.tools.register(echo_tool())

    assert_failure(run_one(rt, agent=Agent("main")), message)
    dispose()
    still_works(rt)


def test_a_tools_result_observer_raising_a_base_exception_subclass_is_contained(rt: Any) -> None:
    seen: list[str] = []

    def melts(execution: Any, result: Any) -> None:
        raise Meltdown("observer melted")

    rt.events.on("tools/result", melts)
    rt.events.on("tools/result", lambda execution, result: seen.append(execution.call_id))
    rt.tools.register(echo_tool())

    result = run_one(rt)

    assert not result.is_error and result.value == "hi"
    assert seen == ["c1"]
    still_works(rt)


def test_a_listener_raising_an_unprintable_exception_gives_the_unprintable_message(rt: Any) -> None:
    def pre(execution: Any, next_: Any) -> Any:
        raise Unprintable()

    rt.events.on("tools/pre-execute", pre)
    rt.tools.register(echo_tool())
    assert_failure(run_one(rt), "tools/pre-execute: <unprintable thrown value>", "POLICY_FAILED")


def guard_melts(execution: Any) -> str | None:
    raise Meltdown("guard melted")


@pytest.mark.parametrize(
    "guard",
    [
        pytest.param(lambda execution: 1 / 0, id="raises"),
        pytest.param(guard_melts, id="base-exception"),
    ],
)
def test_a_raising_guard_becomes_a_failure_not_a_broken_batch(rt: Any, guard: Any) -> None:
    ran: list[Any] = []
    dispose = rt.tools.guard(guard)
    rt.tools.register(echo_tool(execute=lambda args, ctx: ran.append(args) or "x"))

    result = run_one(rt, agent=Agent("main"))

    assert result.is_error
    assert ran == []
    dispose()
    still_works(rt)


def test_an_approval_service_raising_a_base_exception_subclass_becomes_a_failure(rt: Any) -> None:
    def service(request: Any) -> str:
        raise Meltdown("approval melted")

    rt.approvals.set(service)
    rt.events.on("tools/pre-execute", lambda execution, next_: Ask())
    rt.tools.register(echo_tool())

    assert_failure(run_one(rt, agent=Agent("main")), "approval: approval melted", "POLICY_FAILED")


@pytest.mark.parametrize(
    ("answer", "message", "code"),
    [
        pytest.param(
            Poison(),
            'approval: the approval service answered Poison for tool "echo"; expected one of "allowed-once", '
            '"rejected", "cancelled", "unavailable" or "deferred"',
            "POLICY_FAILED",
            id="not-a-str",
        ),
        # A str subclass is read as the text it holds: its own __eq__ never runs.
        pytest.param(PoisonStr("rejected"), 'the user rejected tool "echo"', None, id="str-subclass"),
    ],
)
def test_an_approval_answer_whose_eq_raises_is_read_without_comparing_it(
    rt: Any, answer: Any, message: str, code: str | None
) -> None:
    rt.approvals.set(lambda request: answer)
    rt.events.on("tools/pre-execute", lambda execution, next_: Ask())
    ran: list[Any] = []
    rt.tools.register(echo_tool(execute=lambda args, ctx: ran.append(args) or "x"))

    assert_failure(run_one(rt, agent=Agent("main")), message, code)
    assert ran == []


def exits(*args: Any) -> Any:
    raise SystemExit(2)


def loses_key(*args: Any) -> Any:
    raise KeyError("user")


EXITED = (
    "SystemExit: 2 (sys.exit() was called: argparse calls it on arguments it cannot parse; raise an exception instead)"
)


@pytest.mark.parametrize(
    ("where", "raises", "message"),
    [
        pytest.param("tools/pre-execute", exits, f"tools/pre-execute: {EXITED}", id="listener-exits"),
        pytest.param("approval", exits, f"approval: {EXITED}", id="service-exits"),
        pytest.param("tools/post-execute", loses_key, "tools/post-execute: KeyError: 'user'", id="listener-key"),
    ],
)
def test_a_policy_s_exception_is_named_as_a_body_s_is(rt: Any, where: str, raises: Any, message: str) -> None:
    # (Not "tools/pre-execute: 2": a SystemExit's text is its exit code, a KeyError's the key.)
    if where == "approval":
        rt.approvals.set(raises)
        rt.events.on("tools/pre-execute", lambda execution, next_: Ask())
    else:
        rt.events.on(where, raises)
    rt.tools.register(echo_tool())

    assert_failure(run_one(rt, agent=Agent("main")), message, "POLICY_FAILED")


@pytest.mark.parametrize(
    "hook",
    [
        pytest.param("project_content", id="project_content"),
        pytest.param("finalize_content", id="finalize_content"),
    ],
)
def test_a_content_hook_raising_a_base_exception_subclass_is_contained(rt: Any, hook: str) -> None:
    def melts(execution: Any, result: Any) -> Any:
        raise Meltdown(f"{hook} melted")

    rt.tools.register(echo_tool(**{hook: melts}))
    batch = run(rt)
    assert len(batch.results) == 1
    still_works(rt)


def test_a_deny_with_a_non_string_reason_still_gives_a_failure(rt: Any) -> None:
    from dsh_actors import Deny

    dispose = rt.events.on(
        "tools/pre-execute",
        lambda execution, next_: Deny(Unprintable()),  # type: ignore[arg-type]
    )
    rt.tools.register(echo_tool())
    result = run_one(rt)
    assert result.is_error
    assert type(result.error.message) is str
    assert result.content == (text("Error: " + result.error.message),)
    dispose()
    still_works(rt)


def test_many_hostile_calls_in_one_batch_each_get_their_own_failure(rt: Any) -> None:
    rt.tools.register(echo_tool(name="melts", execute=raiser(Meltdown("melted"))))
    rt.tools.register(echo_tool(name="unprintable", execute=raiser(Unprintable())))
    rt.tools.register(echo_tool(name="poison", execute=lambda args, ctx: Poison(), schema={"type": "json"}))
    rt.tools.register(echo_tool())

    batch = run(
        rt,
        call("melts", id="a"),
        call("unprintable", id="b"),
        call("poison", id="c"),
        call("echo", id="d"),
    )

    assert [item.call_id for item in batch.results] == ["a", "b", "c", "d"]
    assert [item.result.is_error for item in batch.results] == [True, True, True, False]
    assert batch.results[0].result.error.message == "melted"
    assert batch.results[1].result.error.message == "<unprintable thrown value>"
    assert batch.results[3].result.value == "hi"


def test_a_wrapper_that_calls_next_after_it_returned_is_refused_and_the_body_does_not_run_again(rt: Any) -> None:
    # The call's result is settled (and committed) when the waterfall
    # returns: a next() kept and called later, from another thread, raises
    # instead of running the body outside the batch.
    import threading

    from dsh_actors import InvalidStateError

    runs: list[str] = []
    kept: list[Any] = []

    def body(args: Any, ctx: Any) -> str:
        runs.append(ctx.call_id)
        return "hi"

    def wrapper(execution: Any, next_: Any) -> Any:
        kept.append(next_)
        return next_()

    rt.tools.register(echo_tool(execute=body))
    rt.events.on("tools/execute", wrapper)
    assert not run_one(rt).is_error
    late: list[BaseException] = []

    def later() -> None:
        try:
            kept[0]()
        except BaseException as exc:  # noqa: BLE001 - what it raised is the point
            late.append(exc)

    thread = threading.Thread(target=later)
    thread.start()
    thread.join(10)
    assert len(runs) == 1
    assert len(late) == 1 and isinstance(late[0], InvalidStateError)
    assert "after the waterfall had returned" in str(late[0])
