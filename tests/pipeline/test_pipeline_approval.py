"""``Ask`` goes to the approval service (SPEC section 8, approval): the
pinned denial reasons, the request, and guards after approval."""

from __future__ import annotations

import enum
from typing import Any

import pytest

from dsh_actors import AbortController, AbortSignal, Agent, ApprovalRequest, Ask

from .helpers import Journal, Trip, assert_failure, echo_tool, run_one


def ask(reason: str | None = None, display_reason: Any = None) -> Any:
    def pre(execution: Any, next_: Any) -> Any:
        return Ask(reason=reason, display_reason=display_reason)

    return pre


def test_without_an_approval_service_ask_is_denied_with_the_pinned_reason(rt: Any) -> None:
    rt.events.on("tools/pre-execute", ask())
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert_failure(result, 'tool "echo" requires approval, but no approval service is installed')
    assert "body" not in trip.journal


def test_without_an_approval_service_ask_is_denied_with_the_asks_own_reason(rt: Any) -> None:
    rt.events.on("tools/pre-execute", ask(reason="deploys need a human"))
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert_failure(result, "deploys need a human")
    assert "body" not in trip.journal


def test_a_call_without_an_agent_cannot_be_routed_to_the_approval_service(rt: Any) -> None:
    asked: list[Any] = []
    rt.approvals.set(lambda request: asked.append(request) or "allowed-once")
    rt.events.on("tools/pre-execute", ask(reason="why"))
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=None)

    assert_failure(result, 'tool "echo" requires approval, but the call has no agent to route it through')
    assert asked == []
    assert "body" not in trip.journal


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("rejected", 'the user rejected tool "echo"'),
        ("cancelled", 'approval for tool "echo" was cancelled'),
        ("unavailable", 'tool "echo" requires approval, but no approval channel is available'),
    ],
)
def test_each_denying_answer_gives_its_pinned_reason(rt: Any, answer: str, message: str) -> None:
    rt.approvals.set(lambda request: answer)
    rt.events.on("tools/pre-execute", ask(reason="audited reason"))
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert_failure(result, message)
    assert "body" not in trip.journal


def _generator() -> Any:
    yield "allowed-once"


@pytest.mark.parametrize(
    ("answer", "shown"),
    [
        ("allowed_once", "the string 'allowed_once'"),
        ("x" * 1_000_000, "the string '" + "x" * 57 + "...'"),
        (_generator(), "generator"),
        (None, "NoneType"),
    ],
)
def test_an_answer_that_is_not_one_of_the_decisions_is_named_with_the_valid_ones(
    rt: Any, answer: Any, shown: str
) -> None:
    # Never a repr of the answer (an object's address, a megabyte of text, a
    # __repr__ that raises): a short string quoted, else its type, and the
    # answers that would have been understood.
    rt.approvals.set(lambda request: answer)
    rt.events.on("tools/pre-execute", ask())
    rt.tools.register(echo_tool())

    result = run_one(rt, agent=Agent("main"))

    message = result.error.message
    assert f'the approval service answered {shown} for tool "echo"; expected one of "allowed-once"' in message
    assert len(message) < 300


class Answer(enum.StrEnum):
    ALLOW = "allowed-once"
    MAYBE = "maybe"


class MixedAnswer(str, enum.Enum):  # (the "string enum" before StrEnum)
    ALLOW = "allowed-once"


class Text(str):
    pass


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(Answer.ALLOW, id="StrEnum"),
        pytest.param(MixedAnswer.ALLOW, id="str-Enum"),
        pytest.param(Text("allowed-once"), id="str-subclass"),
    ],
)
def test_an_allowed_once_answer_of_a_str_subclass_is_read_as_the_text_it_holds(rt: Any, answer: Any) -> None:
    # (As the reference says of any answer: it used to fail the call,
    # "answered Answer", while a StrEnum "rejected" was read as its text.)
    rt.approvals.set(lambda request: answer)
    rt.events.on("tools/pre-execute", ask())
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert not result.is_error and result.value == "hi"
    assert "body" in trip.journal


def test_an_unknown_answer_of_a_str_subclass_is_named_by_its_type_and_text_never_its_repr(rt: Any) -> None:
    rt.approvals.set(lambda request: Answer.MAYBE)
    rt.events.on("tools/pre-execute", ask())
    rt.tools.register(echo_tool())

    message = run_one(rt, agent=Agent("main")).error.message

    assert message.startswith(
        "approval: the approval service answered the string 'maybe' (of type Answer) for tool \"echo\"; expected one of"
    )
    assert "<" not in message


def test_an_approval_denial_still_passes_through_post_execute(rt: Any) -> None:
    rt.approvals.set(lambda request: "rejected")
    rt.events.on("tools/pre-execute", ask())
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    assert run_one(rt, agent=Agent("main")).is_error
    assert "post" in trip.journal
    assert trip.post_results[0].error.message == 'the user rejected tool "echo"'


def test_allowed_once_runs_the_body(rt: Any) -> None:
    rt.approvals.set(lambda request: "allowed-once")
    rt.events.on("tools/pre-execute", ask())
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert not result.is_error and result.value == "hi"
    assert trip.phases == ["execute", "body", "post"]  # the Ask listener vetoed the later "pre"


def test_the_approval_request_carries_the_agent_tool_call_reasons_and_signal(rt: Any) -> None:
    requests: list[ApprovalRequest] = []
    display = {"en": "Run echo?", "fr": "Lancer echo ?"}

    def service(request: ApprovalRequest) -> str:
        requests.append(request)
        return "allowed-once"

    rt.approvals.set(service)
    rt.events.on("tools/pre-execute", ask(reason="echo talks to the world", display_reason=display))
    rt.tools.register(echo_tool())
    agent = Agent("main")

    assert not run_one(rt, agent=agent).is_error

    assert len(requests) == 1
    request = requests[0]
    assert request.agent is agent
    assert request.tool_name == "echo"
    assert request.call_id == "c1"
    assert request.reason == "echo talks to the world"
    assert request.display_reason == display
    assert isinstance(request.signal, AbortSignal)


def test_the_approval_request_signal_fires_when_the_batch_is_aborted_and_a_cancelled_answer_is_kept(
    rt: Any,
) -> None:
    controller = AbortController()
    observed: list[bool] = []

    def service(request: ApprovalRequest) -> str:
        observed.append(request.signal.aborted)
        controller.abort()
        observed.append(request.signal.aborted)
        return "cancelled"

    rt.approvals.set(service)
    rt.events.on("tools/pre-execute", ask())
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"), signal=controller.signal)

    assert observed == [False, True]
    # A denial that settles after cancellation is kept as it is.
    assert_failure(result, 'approval for tool "echo" was cancelled')
    assert "body" not in trip.journal


def test_a_raising_approval_service_fails_the_call_and_skips_post_execute(rt: Any) -> None:
    def service(request: ApprovalRequest) -> str:
        raise RuntimeError("the approval UI crashed")

    rt.approvals.set(service)
    rt.events.on("tools/pre-execute", ask())
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert_failure(result, "approval: the approval UI crashed", "POLICY_FAILED")
    assert "body" not in trip.journal
    assert "post" not in trip.journal
    assert trip.journal.count(("result", "c1")) == 1


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param("maybe", id="maybe"),
        pytest.param("", id="empty"),
        pytest.param("Allowed-Once", id="wrong-case"),
        pytest.param(None, id="None"),
        pytest.param(True, id="True"),
    ],
)
def test_an_unknown_answer_fails_the_call_without_running_it(rt: Any, answer: Any) -> None:
    rt.approvals.set(lambda request: answer)
    rt.events.on("tools/pre-execute", ask())
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert result.is_error and result.value is None
    assert result.content[0].text.startswith("Error: ")
    assert "body" not in trip.journal
    assert "execute" not in trip.journal


def test_guards_run_after_allowed_once(rt: Any) -> None:
    journal = Journal()

    def guard(execution: Any) -> str | None:
        journal.add("guard")
        return "the guard still denies"

    rt.approvals.set(lambda request: "allowed-once")
    rt.events.on("tools/pre-execute", ask())
    rt.tools.guard(guard)
    rt.tools.register(echo_tool())

    result = run_one(rt, agent=Agent("main"))

    assert journal.entries == ["guard"]
    assert_failure(result, "the guard still denies")


def test_guards_do_not_run_after_a_rejected_ask(rt: Any) -> None:
    journal = Journal()

    def guard(execution: Any) -> str | None:
        journal.add("guard")
        return None

    rt.approvals.set(lambda request: "rejected")
    rt.events.on("tools/pre-execute", ask())
    rt.tools.guard(guard)
    rt.tools.register(echo_tool())

    assert run_one(rt, agent=Agent("main")).is_error
    assert journal.entries == []


def test_disposing_the_approval_service_restores_the_previous_one(rt: Any) -> None:
    rt.approvals.set(lambda request: "allowed-once")
    dispose = rt.approvals.set(lambda request: "rejected")
    rt.events.on("tools/pre-execute", ask())
    rt.tools.register(echo_tool())
    agent = Agent("main")

    assert_failure(run_one(rt, agent=agent), 'the user rejected tool "echo"')
    dispose()
    assert not run_one(rt, agent=agent).is_error


def test_an_approval_service_class_given_for_an_instance_is_refused_naming_the_fix(rt: Any) -> None:
    # The class is callable, so it was installed: asked about a call, it
    # made an instance of the request, and the model read "approval:
    # 'ApprovalRequest' object is not iterable".
    import policies.approval as approval
    from dsh_actors import InvalidTypeError

    with pytest.raises(InvalidTypeError, match=r"not the class RuleService: pass RuleService\(\.\.\.\)"):
        rt.approvals.set(approval.RuleService)
    rt.approvals.set(approval.RuleService([approval.allow("echo")]))  # an instance is taken
