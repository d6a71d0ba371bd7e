"""A tool defined with ``requires_approval`` (docs/reference.md, section 5):
the ``tools/pre-execute`` waterfall's default becomes an ``Ask`` naming the
tool, routed as any ``Ask``; a listener's own decision still wins."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dsh_actors import Agent, Allow, ApprovalRequest, Ask, Deny, ToolDefinition, ToolOutput

from .helpers import Journal, Trip, assert_failure, call, code_of, echo_tool, run, run_one

REASON = None  # the definition's Ask has none: the denials name what is missing
NO_SERVICE = 'tool "echo" requires approval, but no approval service is installed'


class Service:
    """An approval service giving ``answer``, recording each request."""

    def __init__(self, answer: str = "allowed-once") -> None:
        self.answer = answer
        self.requests = Journal()

    def __call__(self, request: ApprovalRequest) -> str:
        self.requests.add(request)
        return self.answer

    @property
    def asked(self) -> list[tuple[str, str, str | None]]:
        return [(r.call_id, r.tool_name, r.reason) for r in self.requests.entries]


def counting_body(ran: Journal) -> Any:
    def body(args: Any, ctx: Any) -> Any:
        ran.add(ctx.call_id)
        return args["message"]

    return body


def test_without_a_listener_a_call_is_asked_and_allowed_once_runs_it(rt: Any) -> None:
    ran = Journal()
    service = Service("allowed-once")
    rt.approvals.set(service)
    rt.tools.register(echo_tool(requires_approval=True, execute=counting_body(ran)))

    result = run_one(rt, agent=Agent("main"))

    assert not result.is_error and result.value == "hi"
    assert service.asked == [("c1", "echo", REASON)]
    assert service.requests.entries[0].display_reason is None
    assert ran.entries == ["c1"]


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("rejected", 'the user rejected tool "echo"'),
        ("cancelled", 'approval for tool "echo" was cancelled'),
        ("unavailable", 'tool "echo" requires approval, but no approval channel is available'),
    ],
)
def test_a_denying_answer_denies_it_and_post_execute_sees_the_denial(rt: Any, answer: str, message: str) -> None:
    rt.approvals.set(Service(answer))
    trip = Trip(rt)
    rt.tools.register(echo_tool(requires_approval=True, execute=trip.body))

    assert_failure(run_one(rt, agent=Agent("main")), message)
    assert trip.phases == ["pre", "post"]  # the listener's next() got the Ask; no body


def test_without_an_approval_service_or_an_agent_it_is_denied_with_the_pinned_reasons(rt: Any) -> None:
    ran = Journal()
    rt.tools.register(echo_tool(requires_approval=True, execute=counting_body(ran)))

    assert_failure(run_one(rt, agent=Agent("main")), NO_SERVICE)
    service = Service("allowed-once")
    rt.approvals.set(service)
    assert_failure(
        run_one(rt, agent=None), 'tool "echo" requires approval, but the call has no agent to route it through'
    )
    assert service.asked == [] and ran.entries == []


def test_deferred_suspends_the_call_and_resume_runs_it(rt: Any) -> None:
    ran = Journal()
    service = Service("deferred")
    rt.approvals.set(service)
    rt.tools.register(echo_tool(requires_approval=True, execute=counting_body(ran)))
    agent = Agent("main")

    suspended = run(rt, call(id="c1"), agent=agent)

    assert suspended.results == () and suspended.pending == ("c1",)
    assert ran.entries == []
    saved = json.loads(json.dumps(suspended.suspension))
    assert saved["calls"][0]["approval"] == {"reason": REASON, "display_reason": None}
    done = rt.tools.resume(saved, {"c1": "allowed-once"}, agent=agent)
    assert [(item.call_id, item.result.value) for item in done.results] == [("c1", "hi")]
    assert ran.entries == ["c1"]
    assert service.asked == [("c1", "echo", REASON)]  # the resume's answer took the service's place


def test_a_listener_that_decides_without_next_still_decides_an_allow_included(rt: Any) -> None:
    ran = Journal()
    service = Service("rejected")
    rt.approvals.set(service)
    rt.tools.register(echo_tool(requires_approval=True, execute=counting_body(ran)))
    undo = rt.events.on("tools/pre-execute", lambda execution, next_: Allow())

    assert run_one(rt, agent=Agent("main")).value == "hi"
    assert service.asked == [] and ran.entries == ["c1"]
    undo()
    rt.events.on("tools/pre-execute", lambda execution, next_: Deny("not today"))
    assert_failure(run_one(rt, agent=Agent("main")), "not today")
    assert service.asked == [] and ran.entries == ["c1"]


def test_a_listener_that_calls_next_gets_the_ask_and_may_return_its_own(rt: Any) -> None:
    seen = Journal()
    service = Service("allowed-once")
    rt.approvals.set(service)
    rt.tools.register(echo_tool(requires_approval=True))
    rt.tools.register(echo_tool("plain"))

    def observe(execution: Any, next_: Any) -> Any:
        decision = next_()
        seen.add((execution.name, decision))
        if execution.call_id == "c3":
            return Ask(reason="asked again", display_reason="Run it?")
        return decision

    rt.events.on("tools/pre-execute", observe)
    batch = run(rt, call(id="c1"), call("plain", id="c2"), call(id="c3"), agent=Agent("main"))

    assert [item.result.value for item in batch.results] == ["hi", "hi", "hi"]
    assert seen.entries == [("echo", Ask(reason=REASON)), ("plain", Allow()), ("echo", Ask(reason=REASON))]
    assert service.asked == [("c1", "echo", REASON), ("c3", "echo", "asked again")]
    assert service.requests.entries[1].display_reason == {"en": "Run it?"}


def test_a_predicate_asks_only_for_the_calls_it_answers_true_on_frozen_arguments(rt: Any) -> None:
    ran = Journal()
    given = Journal()
    service = Service("rejected")
    rt.approvals.set(service)

    def risky(args: Any) -> bool:
        given.add(args)
        return bool(args["message"].startswith("rm "))

    rt.tools.register(echo_tool(requires_approval=risky, execute=counting_body(ran)))
    batch = run(
        rt,
        call(arguments='{"message": "ls"}', id="c1"),
        call(arguments='{"message": "rm -r /"}', id="c2"),
        call(arguments='{"message": 3}', id="c3"),  # invalid: not asked, fails INVALID_ARGS
        agent=Agent("main"),
    )

    assert batch.results[0].result.value == "ls"
    assert batch.results[1].result.error.message == 'the user rejected tool "echo"'
    assert code_of(batch.results[2].result) == "INVALID_ARGS"
    assert service.asked == [("c2", "echo", REASON)]
    assert ran.entries == ["c1"]
    assert given.entries == [{"message": "ls"}, {"message": "rm -r /"}]


def raw_tool(requires_approval: Any, ran: Journal) -> ToolDefinition:
    return ToolDefinition(
        name="raw",
        description="A raw tool.",
        parameters={"type": "object"},
        output=ToolOutput(schema={"type": "string"}),
        execute=lambda args, ctx: ran.add(ctx.call_id) or "ran",
        requires_approval=requires_approval,
    )


def test_a_predicate_that_raises_fails_the_call_naming_the_tool_without_running_it(rt: Any) -> None:
    def explode(args: Any) -> bool:
        raise KeyError("amount")

    ran = Journal()
    service = Service("allowed-once")
    rt.approvals.set(service)
    trip = Trip(rt)
    rt.tools.register(echo_tool(requires_approval=explode, execute=trip.body))
    rt.tools.register(raw_tool(explode, ran))

    batch = run(rt, call(id="c1"), call("raw", "{}", id="c2"), agent=Agent("main"))

    for item, name in zip(batch.results, ("echo", "raw"), strict=True):
        assert_failure(
            item.result,
            f"requires_approval: the predicate of tool \"{name}\" raised KeyError: 'amount'; it must return "
            "True or False for any arguments the tool accepts",
            "POLICY_FAILED",
        )
        assert isinstance(item.result.error.exception.__cause__, KeyError)
    assert trip.phases == ["pre", "pre"]  # no body; post-execute skipped, as for a raising listener
    assert service.asked == [] and ran.entries == []


def test_a_predicate_that_answers_something_else_than_a_bool_fails_the_call(rt: Any) -> None:
    ran = Journal()
    rt.approvals.set(Service("allowed-once"))
    rt.tools.register(raw_tool(lambda args: "yes", ran))

    result = run_one(rt, call("raw", "{}"), agent=Agent("main"))

    assert_failure(
        result,
        'requires_approval: the predicate of tool "raw" returned str; it must return True or False',
        "POLICY_FAILED",
    )
    assert ran.entries == []
