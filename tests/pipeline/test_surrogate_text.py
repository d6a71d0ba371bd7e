"""Text holding a lone surrogate (what ``os.fsdecode`` gives for a file name
that is not UTF-8) in a failure's message or an ``Ask``'s reason is kept as
its ``\\udcff`` escape, as a ``FileNotFoundError`` quotes its file name: the
message stays the tool's own (not a ``POLICY_FAILED`` about lossless JSON)
and a logged batch stays writable."""

from __future__ import annotations

import os
from typing import Any

import pytest

from dsh_actors import (
    Agent,
    ApprovalRequest,
    Ask,
    Deny,
    LogStep,
    Session,
    ToolBatchInput,
    ToolErrorInfo,
    ToolExecutionFailure,
    ToolFailure,
    text,
)
from dsh_actors.errors import utf8_text

from .helpers import call, echo_tool

NAME = os.fsdecode(b"report\xff.txt")  # "report\udcff.txt"
SHOWN = "report\\udcff.txt"  # as repr() and a FileNotFoundError show it


def test_the_helper_escapes_lone_surrogates_only() -> None:
    assert NAME == "report\udcff.txt"
    assert utf8_text(NAME) == SHOWN
    assert utf8_text("naïve – ok") == "naïve – ok"
    ascii_text = "plain"
    assert utf8_text(ascii_text) is ascii_text


def run_logged(rt: Any) -> tuple[Any, Session]:
    session = Session()
    batch = rt.tools.execute(ToolBatchInput(calls=[call()], agent=Agent("main", session=session), log=LogStep(1, 1)))
    return batch.results[0].result, session


def body_raises(args: Any, ctx: Any) -> Any:
    raise ValueError(f"cannot parse {NAME}: line 3")


def register_raising_echo(rt: Any) -> None:
    rt.tools.register(echo_tool(execute=body_raises))


def body_case(setup: Any) -> bool:
    return setup is register_raising_echo


def wrapper_raises(execution: Any, next_: Any) -> Any:
    raise OSError(f"cannot open {NAME}")


def listener_raises(execution: Any, next_: Any) -> Any:
    raise ValueError(f"{NAME} is locked")


def guard_raises(execution: Any) -> str | None:
    raise ValueError(f"{NAME} is locked")


@pytest.mark.parametrize(
    ("setup", "message", "code"),
    [
        pytest.param(
            register_raising_echo,
            f"cannot parse {SHOWN}: line 3",
            "TOOL_FAILED",
            id="body",
        ),
        pytest.param(
            lambda rt: rt.events.on("tools/pre-execute", lambda e, n: Deny(f"{NAME} is outside the workspace")),
            f"{SHOWN} is outside the workspace",
            None,
            id="deny",
        ),
        pytest.param(
            lambda rt: rt.tools.guard(lambda e: f"{NAME} is outside the workspace"),
            f"{SHOWN} is outside the workspace",
            None,
            id="guard-reason",
        ),
        pytest.param(
            lambda rt: rt.tools.guard(guard_raises),
            f"guard guard_raises failed: ValueError: {SHOWN} is locked",
            None,
            id="guard-raises",
        ),
        pytest.param(
            lambda rt: rt.events.on("tools/execute", wrapper_raises),
            f"cannot open {SHOWN}",
            "TOOL_FAILED",
            id="wrapper",
        ),
        pytest.param(
            lambda rt: rt.events.on("tools/pre-execute", listener_raises),
            f"tools/pre-execute: {SHOWN} is locked",
            "POLICY_FAILED",
            id="listener",
        ),
    ],
)
def test_a_failure_whose_text_holds_a_lone_surrogate_keeps_it_escaped_and_is_logged(
    rt: Any, setup: Any, message: str, code: str | None
) -> None:
    setup(rt)
    if not body_case(setup):
        rt.tools.register(echo_tool())

    result, session = run_logged(rt)

    assert result.error.message == message
    assert (result.error.info and result.error.info.code) == code
    assert result.content == (text("Error: " + message),)
    logged = session.events()[-1]
    assert logged["type"] == "tool/result" and logged["error"]["message"] == message


def test_a_failure_a_wrapper_builds_with_a_lone_surrogate_is_kept_escaped_and_logged(rt: Any) -> None:
    built = ToolExecutionFailure(
        error=ToolFailure(f"cannot open {NAME}", ToolErrorInfo("Locked", "LOCKED", f"{NAME} is locked")),
        content=(text("Error: the report is locked"),),
    )
    rt.events.on("tools/execute", lambda execution, next_: built)
    rt.tools.register(echo_tool())

    result, session = run_logged(rt)

    assert result.error == ToolFailure(f"cannot open {SHOWN}", ToolErrorInfo("Locked", "LOCKED", f"{SHOWN} is locked"))
    assert result.content == (text("Error: the report is locked"),)
    logged = session.events()[-1]
    assert logged["type"] == "tool/result" and logged["error"]["info"]["reason"] == f"{SHOWN} is locked"


def test_an_ask_keeps_a_lone_surrogate_of_its_reasons_escaped() -> None:
    ask = Ask(reason=f"delete {NAME}?", display_reason=f"Delete {NAME}?")
    assert ask.reason == f"delete {SHOWN}?"
    assert ask.display_reason == {"en": f"Delete {SHOWN}?"}
    assert Ask(display_reason={"en": NAME, "fr": NAME}).display_reason == {"en": SHOWN, "fr": SHOWN}
    assert Ask(reason=f"delete {NAME}?") == Ask(reason=f"delete {SHOWN}?")


def test_a_deferred_ask_whose_reason_holds_a_lone_surrogate_is_logged_and_recovered(rt: Any) -> None:
    requests: list[ApprovalRequest] = []

    def service(request: ApprovalRequest) -> str:
        requests.append(request)
        return "deferred"

    rt.approvals.set(service)
    rt.events.on(
        "tools/pre-execute",
        lambda e, n: Ask(reason=f"rm {NAME}", display_reason=f"Delete {NAME}?") if e.call_id == "c1" else n(),
    )
    rt.tools.register(echo_tool())
    agent = Agent("main", session=Session())
    batch = ToolBatchInput(calls=[call(id="c1"), call(id="c2")], agent=agent, log=LogStep(1, 1))

    result = rt.tools.execute(batch)

    assert result.pending == ("c1",) and result.suspension is not None
    assert [(r.call_id, r.result.is_error) for r in result.results] == [("c2", False)]
    assert requests[0].reason == f"rm {SHOWN}" and requests[0].display_reason == {"en": f"Delete {SHOWN}?"}
    asked = [e for e in agent.session.events() if e["type"] == "tool/approval-request"]
    assert [(e["reason"], e["display_reason"]) for e in asked] == [(f"rm {SHOWN}", {"en": f"Delete {SHOWN}?"})]
    assert agent.session.open_calls(1, 1, "main") == ["c1"]  # c2's result is logged
    again = rt.tools.recover(agent, 1, 1)  # the service defers again
    assert again.pending == ("c1",)
