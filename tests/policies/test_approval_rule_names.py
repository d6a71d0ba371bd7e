"""A RuleService rule that names a tool with a typo never applies: the
service logs a WARNING the first time it is asked about the tool the rule
meant (no rule names it, one names a tool spelled almost alike), and only
when the application has enabled the library's log."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loguru import logger
from policy_helpers import call, run, tool

import policies
from dsh_actors import AbortSignal, Agent, ApprovalRequest
from policies.approval import RuleService, allow, deny

MAIN = Agent("main")


def request(tool_name: str) -> ApprovalRequest:
    return ApprovalRequest(
        agent=MAIN, tool_name=tool_name, call_id="c1", reason=None, display_reason=None, signal=AbortSignal()
    )


def typos(records: Any) -> list[str]:
    return [r["message"] for r in records.items if "none of its rules names" in r["message"]]


def test_a_deny_rule_with_a_typo_is_warned_once_when_its_tool_asks(rt: Any, log_records: Callable[[str], Any]) -> None:
    records = log_records("WARNING")
    rt.tools.register(tool("delete_file", requires_approval=True))
    rt.use(policies.approval, service=RuleService([deny("delete_fille")], default="allow"))

    batch = run(rt, call("delete_file", id="c1"), call("delete_file", id="c2"), agent=MAIN)
    run(rt, call("delete_file", id="c3"), agent=MAIN)

    # Rules match names exactly: the default decided (the behaviour is kept) ...
    assert [item.result.is_error for item in batch.results] == [False, False]
    # ... and the typo is told, once.
    [line] = typos(records)
    assert '"delete_file"' in line and '"delete_fille"' in line and "typo" in line


def test_names_a_rule_gives_exactly_or_that_are_not_alike_are_not_warned(
    log_records: Callable[[str], Any],
) -> None:
    records = log_records("WARNING")
    service = RuleService([allow("read_file", when=lambda args: False), deny("write_file")], default="ask")
    names = ("read_file", "write_file", "run_tests")  # named (its when= aside), named, unlike any

    decided = [service.action_for(request(name)) for name in names]

    assert decided == ["ask", "deny", "ask"]
    assert typos(records) == []


def test_each_service_warns_about_each_name_once(log_records: Callable[[str], Any]) -> None:
    records = log_records("WARNING")
    first, second = RuleService([allow("bsh")]), RuleService([allow("bsh")])

    for service in (first, second, first):
        assert service.action_for(request("bash")) == "ask"

    assert len(typos(records)) == 2


def test_the_warning_is_silent_until_the_application_enables_the_log() -> None:
    messages: list[str] = []
    handle = logger.add(lambda message: messages.append(message.record["message"]), level="DEBUG")
    try:  # a sink of the application's, but the library's log left disabled
        RuleService([allow("read_fille")]).action_for(request("read_file"))
    finally:
        logger.remove(handle)
    assert messages == []
