"""policies.approval: rule services, remembered decisions, and the plugin."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from policy_helpers import Recorder, call, run_one, tool

import policies
from dsh_actors import AbortSignal, Agent, ApprovalRequest, Ask, Session, materialize
from policies.approval import (
    Answer,
    RememberingService,
    Rule,
    RuleService,
    allow,
    ask,
    deny,
)

MAIN = Agent("main")


def request(tool_name: str = "bash", agent: Agent = MAIN, call_id: str = "c1", **arguments: Any) -> ApprovalRequest:
    return ApprovalRequest(
        agent=agent,
        tool_name=tool_name,
        call_id=call_id,
        reason="it runs commands",
        display_reason=None,
        signal=AbortSignal(),
        arguments=materialize(arguments),
    )


class Scripted:
    """A service answering from a script and recording what it was asked."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.asked = Recorder()

    def decide(self, req: ApprovalRequest) -> Answer:
        self.asked.add((req.tool_name, req.call_id))
        return self.answers.pop(0)

    def __call__(self, req: ApprovalRequest) -> str:
        return self.decide(req).answer


def always_ask(execution: Any, next_: Any) -> Any:
    return Ask(reason="policy says ask")


# -- rules ---------------------------------------------------------------------


def test_rules_allow_and_deny_by_tool_name() -> None:
    service = RuleService([allow("read"), deny("rm")], default="deny")

    assert service(request("read")) == "allowed-once"
    assert service(request("rm")) == "rejected"
    assert service(request("other")) == "rejected"  # the default


def test_a_rule_may_test_the_arguments() -> None:
    service = RuleService([deny("rm", when=lambda args: args.get("recursive") is True), allow("rm")], default="deny")

    assert service(request("rm", path="x")) == "allowed-once"
    assert service(request("rm", path="x", recursive=True)) == "rejected"


def test_the_first_matching_rule_wins() -> None:
    service = RuleService([allow("bash"), deny("bash")], default="deny")
    assert service(request("bash")) == "allowed-once"
    service = RuleService([deny(), allow("bash")], default="allow")
    assert service(request("bash")) == "rejected"


def test_a_predicate_must_answer_exactly_true() -> None:
    service = RuleService([allow(when=lambda args: 1)], default="deny")
    assert service(request()) == "rejected"


def test_ask_delegates_to_the_ask_service_with_its_remember_flag() -> None:
    inner = Scripted(Answer("allowed-once", remember=True))
    service = RuleService([ask("bash")], default="deny", ask=inner)

    assert service.decide(request()) == Answer("allowed-once", remember=True)
    assert inner.asked.items == [("bash", "c1")]


def test_ask_without_an_ask_service_is_unavailable() -> None:
    assert RuleService([], default="ask")(request()) == "unavailable"


def test_rules_through_the_runtime(rt: Any) -> None:
    rt.events.on("tools/pre-execute", always_ask)
    rt.use(policies.approval, service=RuleService([allow("echo")], default="deny"))
    rt.tools.register(tool("echo"))
    rt.tools.register(tool("rm"))

    allowed = run_one(rt, call("echo", message="hi"), agent=MAIN)
    denied = run_one(rt, call("rm"), agent=MAIN)

    assert not allowed.is_error and allowed.value == "hi"
    assert denied.error is not None and denied.error.message == 'the user rejected tool "rm"'


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: Rule("maybe"), ValueError),  # type: ignore[arg-type]
        (lambda: allow(3), TypeError),  # type: ignore[arg-type]
        (lambda: allow("x", when=5), TypeError),  # type: ignore[arg-type]
        (lambda: RuleService(allow("x")), TypeError),  # type: ignore[arg-type]
        (lambda: RuleService(["x"]), TypeError),  # type: ignore[list-item]
        (lambda: RuleService([], default="perhaps"), ValueError),  # type: ignore[arg-type]
        (lambda: RuleService([], ask=5), TypeError),  # type: ignore[arg-type]
        (lambda: RememberingService(5), TypeError),  # type: ignore[arg-type]
    ],
)
def test_bad_rules_are_rejected_when_built(make: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="policies.approval"):
        make()


# -- remembered decisions ------------------------------------------------------


def test_an_always_answer_is_remembered_for_the_same_tool_and_exact_arguments() -> None:
    inner = Scripted(Answer("allowed-once", remember=True))
    service = RememberingService(inner)

    assert service(request("bash", command="ls", cwd="/")) == "allowed-once"
    # Same tool, same arguments (key order does not matter), another call id.
    assert service(request("bash", call_id="c2", cwd="/", command="ls")) == "allowed-once"
    assert inner.asked.items == [("bash", "c1")]
    assert len(service) == 1


def test_a_remembered_answer_never_applies_to_other_arguments_another_tool_or_another_agent() -> None:
    inner = Scripted(
        Answer("allowed-once", remember=True),
        Answer("rejected"),
        Answer("rejected"),
        Answer("rejected"),
        Answer("rejected"),
    )
    service = RememberingService(inner)
    service(request("bash", command="ls"))

    assert service(request("bash", call_id="c2", command="ls -la")) == "rejected"
    assert service(request("bash", call_id="c3", command="ls", extra=None)) == "rejected"
    assert service(request("sh", call_id="c4", command="ls")) == "rejected"
    assert service(request("bash", agent=Agent("main"), call_id="c5", command="ls")) == "rejected"
    assert [c for _, c in inner.asked.items] == ["c1", "c2", "c3", "c4", "c5"]


def test_numbers_are_compared_exactly() -> None:
    inner = Scripted(Answer("allowed-once", remember=True), Answer("rejected"))
    service = RememberingService(inner)
    service(request(n=1))
    assert service(request(call_id="c2", n=1.0)) == "rejected"


def test_once_answers_are_not_remembered() -> None:
    inner = Scripted(Answer("allowed-once"), Answer("rejected"))
    service = RememberingService(inner)

    assert service(request()) == "allowed-once"
    assert service(request(call_id="c2")) == "rejected"
    assert len(service) == 0


def test_a_never_answer_is_remembered_as_a_rejection() -> None:
    inner = Scripted(Answer("rejected", remember=True))
    service = RememberingService(inner)
    service(request())
    assert service(request(call_id="c2")) == "rejected"
    assert len(inner.asked.items) == 1


def test_cancelled_and_unavailable_are_never_remembered_even_if_asked_to() -> None:
    inner = Scripted(Answer("cancelled", remember=True), Answer("unavailable", remember=True), Answer("allowed-once"))
    service = RememberingService(inner)
    assert service(request()) == "cancelled"
    assert service(request()) == "unavailable"
    assert service(request()) == "allowed-once"


def test_a_plain_callable_inner_service_is_never_remembered() -> None:
    asked = Recorder()

    def plain(req: ApprovalRequest) -> str:
        asked.add(req.call_id)
        return "allowed-once"

    service = RememberingService(plain)
    service(request())
    service(request(call_id="c2"))
    assert asked.items == ["c1", "c2"]


def test_per_agent_false_shares_answers_between_agents() -> None:
    inner = Scripted(Answer("allowed-once", remember=True))
    service = RememberingService(inner, per_agent=False)
    service(request(agent=Agent("a")))
    assert service(request(agent=Agent("b"), call_id="c2")) == "allowed-once"
    assert len(inner.asked.items) == 1


def test_forget_drops_remembered_answers() -> None:
    inner = Scripted(Answer("allowed-once", remember=True), Answer("allowed-once", remember=True), Answer("rejected"))
    service = RememberingService(inner)
    service(request("bash"))
    service(request("sh"))
    service.forget("bash")
    assert len(service) == 1
    assert service(request("bash", call_id="c3")) == "rejected"


def test_an_agents_remembered_answers_go_with_the_agent() -> None:
    # (A farm shares one service among thousands of agents: the memory held
    # each agent, and its session, for the service's life, though no later
    # request could be that agent once the application dropped it.)
    inner = Scripted(*[Answer("allowed-once", remember=True)] * 20)
    service = RememberingService(inner)
    refs: list[weakref.ref[Any]] = []
    for i in range(20):
        agent = Agent(f"farm-{i}", session=Session())
        refs.append(weakref.ref(agent))
        refs.append(weakref.ref(agent.session))
        assert service(request(agent=agent, call_id=f"c{i}")) == "allowed-once"
        del agent
    gc.collect()
    assert sum(ref() is not None for ref in refs) == 0
    assert len(service) == 0
    kept = Scripted(Answer("allowed-once", remember=True))
    service = RememberingService(kept)
    service(request())  # (MAIN lives on: its answer is still given)
    assert service(request(call_id="c2")) == "allowed-once"
    assert len(kept.asked.items) == 1


def test_rules_outside_memory_still_beat_a_remembered_always() -> None:
    inner = Scripted(Answer("allowed-once", remember=True))
    memory = RememberingService(inner)
    rules: list[Rule] = []
    service = RuleService(rules, default="ask", ask=memory)
    assert service(request(command="rm -rf /")) == "allowed-once"
    # A later rule (a new service with one more rule) denies what memory would allow.
    stricter = RuleService([deny(when=lambda args: "rm" in args.get("command", ""))], default="ask", ask=memory)
    assert stricter(request(call_id="c2", command="rm -rf /")) == "rejected"


# -- the plugin ----------------------------------------------------------------


def test_apply_installs_the_service_and_its_disposer_restores_the_previous_one(rt: Any) -> None:
    def previous(req: ApprovalRequest) -> str:
        return "rejected"

    rt.approvals.set(previous)
    service = RuleService([], default="allow")
    undo = rt.use(policies.approval, service=service)
    assert rt.approvals.service is service
    undo()
    assert rt.approvals.service is previous


@pytest.mark.parametrize(
    ("config", "match"),
    [({}, "service= is required"), ({"service": 3}, "must be callable"), ({"service": print, "x": 1}, "unknown")],
)
def test_apply_rejects_bad_config(rt: Any, config: dict[str, Any], match: str) -> None:
    with pytest.raises(TypeError, match=match):
        rt.use(policies.approval, **config)
    assert rt.approvals.service is None
