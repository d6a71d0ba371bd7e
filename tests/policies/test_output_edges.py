"""Edges of what happens to a tool's output and around a call's life: cards
that could not be written as JSON, a policy's DshError without a message,
retry and a tool declaring ``idempotent=True``, config ints too big for a
float."""

from __future__ import annotations

from typing import Any

import pytest
from policy_helpers import call, code_of, run_one, tool

import policies
from dsh_actors import Agent, Ask, DshError, ToolOutput, ToolTimeoutError, define_tool, dumps
from dsh_actors.errors import LosslessJsonError
from dsh_actors.presentation import (
    GenericCallView,
    ReadFileLine,
    SearchResultView,
    TerminalResultView,
    ToolResultProjection,
    ToolResultView,
    WebResultView,
)

# A shell's output decoded with surrogateescape: a lone surrogate.
SHELL_OUTPUT = b"total 0 \xff\n".decode("utf-8", "surrogateescape")


# -- cards ------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: TerminalResultView(title="ls", output=SHELL_OUTPUT, exit_code=0),
        lambda: TerminalResultView(title=SHELL_OUTPUT),
        lambda: SearchResultView(shape="paths", truncated=False, total=1, paths=[SHELL_OUTPUT]),
        lambda: ReadFileLine(1, SHELL_OUTPUT),
        lambda: WebResultView(kind="fetch", url="https://x", status_code=2**70),
        lambda: TerminalResultView(exit_code=-(2**64)),
        lambda: SearchResultView(shape="paths", truncated=False, total=2**64),
    ],
)
def test_a_card_that_could_not_be_written_as_json_is_refused_at_construction(make: Any) -> None:
    with pytest.raises(LosslessJsonError, match="not lossless JSON|out of range"):
        make()


def test_a_presenter_returning_an_unwritable_card_falls_back_to_the_generic_card() -> None:
    definition = define_tool(
        name="sh",
        description="Run a command.",
        parameters={},
        output=ToolOutput(schema={"type": "string"}),
        execute=lambda args, ctx: "",
        present_result=lambda args, result: TerminalResultView(title="sh", output=SHELL_OUTPUT, exit_code=0),
    )
    assert definition.present_result is not None
    view = definition.present_result({}, ToolResultProjection(content=(), is_error=False))

    assert view is None  # the caller shows the generic card
    # and every card that does exist can be written and read back
    card = TerminalResultView(title="sh", output="total 0 \ufffd\n", exit_code=0)
    assert ToolResultView.from_json(dumps(card.to_json()) and card.to_json()) == card


def test_an_unknown_card_kind_is_named_briefly_and_never_through_its_repr() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    with pytest.raises(LosslessJsonError, match=r"Hostile\)$"):
        GenericCallView(title="t", kind=Hostile())  # type: ignore[arg-type]
    with pytest.raises(LosslessJsonError) as caught:
        GenericCallView(title="t", kind="x" * 100_000)  # type: ignore[arg-type]
    assert len(str(caught.value)) < 300


# -- policy configuration ---------------------------------------------------------


@pytest.mark.parametrize("option", ["base_ms", "max_ms"])
def test_a_huge_integer_backoff_is_a_config_error_not_an_overflow(rt: Any, option: str) -> None:
    with pytest.raises(ValueError, match=rf"policies.retry: {option} must be at most"):
        rt.use(policies.retry, tools=("x",), **{option: 10**400})


def test_an_integer_too_long_to_print_is_named_by_its_size(rt: Any) -> None:
    with pytest.raises(ValueError, match=r"attempts must be a positive integer, got an int of \d+ bits"):
        rt.use(policies.retry, tools=("x",), attempts=-(10**5000))


# -- result building -------------------------------------------------------


class QuotaError(DshError):
    """A DshError subclass whose __init__ skips DshError's: no ``message``."""

    code = "QUOTA"  # type: ignore[assignment]

    def __init__(self, who: str) -> None:
        Exception.__init__(self, f"quota exceeded for {who}")


def raise_quota(*args: Any) -> Any:
    raise QuotaError("bob")


@pytest.mark.parametrize("where", ["tools/pre-execute", "tools/post-execute", "approval"])
def test_a_policy_raising_a_dsh_error_without_a_message_fails_only_its_call(rt: Any, where: str) -> None:
    rt.tools.register(tool())
    if where == "approval":
        rt.events.on("tools/pre-execute", lambda execution, next_: Ask("ok?"))
        rt.approvals.set(raise_quota)
    else:
        rt.events.on(where, raise_quota)

    result = run_one(rt, call(message="hi"), agent=Agent("main"))  # the batch does not raise

    assert code_of(result) == "POLICY_FAILED"
    assert result.error.message == f"{where}: quota exceeded for bob"


def test_a_body_raising_a_dsh_error_without_a_message_shows_its_text(rt: Any) -> None:
    rt.tools.register(tool("quota", raise_quota))

    result = run_one(rt, call("quota"), agent=Agent("main"))

    assert code_of(result) == "QUOTA"
    assert result.error.message == "quota exceeded for bob"


def test_a_dsh_error_whose_code_raises_is_still_described_as_itself(rt: Any) -> None:
    class Odd(DshError):
        @property  # type: ignore[override]
        def code(self) -> str:
            raise RuntimeError("no code")

    def body(args: Any, ctx: Any) -> Any:
        raise Odd("odd failure")

    rt.tools.register(tool("odd", body))

    result = run_one(rt, call("odd"), agent=Agent("main"))

    assert result.error.message == "odd failure"
    assert result.error.info is not None
    assert (result.error.info.name, result.error.info.code) == ("Odd", "TOOL_FAILED")


# -- retry ------------------------------------------------------------------


def test_a_tool_declaring_idempotent_true_is_retried(rt: Any) -> None:
    attempts: list[int] = []

    def flaky(args: Any, ctx: Any) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ToolTimeoutError(50)
        return "ok"

    rt.use(policies.retry, base_ms=1, max_ms=1)
    rt.tools.register(tool("fetch", flaky, idempotent=True))

    result = run_one(rt, call("fetch"), agent=Agent("main"))

    assert not result.is_error and result.value == "ok"
    assert len(attempts) == 2


def test_a_tool_not_declaring_idempotent_is_still_not_retried(rt: Any) -> None:
    attempts: list[int] = []

    def flaky(args: Any, ctx: Any) -> str:
        attempts.append(1)
        raise ToolTimeoutError(50)

    rt.use(policies.retry, base_ms=1, max_ms=1)
    rt.tools.register(tool("fetch", flaky))

    assert code_of(run_one(rt, call("fetch"), agent=Agent("main"))) == "TOOL_TIMEOUT"
    assert len(attempts) == 1
