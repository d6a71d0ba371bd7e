"""``docs/reference.md`` is the contract users get with the repository: it
names every public name, error code and event, its session-log shapes are
the ones the code writes, and nothing points readers to a design folder
they do not have."""

from __future__ import annotations

import re
from pathlib import Path

import dsh_actors
from dsh_actors import ErrorCode, TextBlock, ToolErrorInfo, ToolExecutionFailure, ToolFailure, events, session

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = (ROOT / "docs" / "reference.md").read_text()


def section(number: int) -> str:
    match = re.search(rf"^## {number}\. .*?(?=^## |\Z)", REFERENCE, re.M | re.S)
    assert match is not None, f"reference.md has no section {number}"
    return match.group(0)


def test_every_exported_name_is_in_section_1() -> None:
    names = section(1)
    missing = [name for name in dsh_actors.__all__ if not re.search(rf"`{re.escape(name)}[`(]", names)]
    assert missing == []


def test_every_error_code_is_in_the_table() -> None:
    table = section(9)
    missing = [code.value for code in ErrorCode if f"| `{code.value}` |" not in table]
    assert missing == []


def test_every_event_the_bus_documents_is_in_the_table() -> None:
    assert events.__doc__ is not None
    names = set(re.findall(r"``(tools/[a-z-]+)``", events.__doc__))
    assert names == set(events.EVENT_NAMES)
    table = section(8)
    assert [name for name in sorted(names) if f"| `{name}` |" not in table] == []


def logged_keys() -> dict[str, list[str]]:
    """The keys (beyond ``type``) the reference's log table gives each event."""
    rows = re.findall(r"^\| `(tool/[a-z-]+)` \| (.+?) \|$", section(10), re.M)
    return {kind: re.findall(r"`([a-z_]+)`", keys) for kind, keys in rows}


def test_the_log_table_gives_exactly_the_keys_the_session_writes() -> None:
    failure = ToolExecutionFailure(error=ToolFailure("m", ToolErrorInfo("E", "X")), content=(TextBlock("Error: m"),))
    written = [
        session.batch_event(1, 2, [("c", "t", "{}")], 4, agent="a", parent=(1, 1, "a", "p"), unknown=[]),
        session.call_event(1, 2, "c", "t", {}, agent="a"),
        session.start_event("c", 1, 2, agent="a"),
        session.result_event("c", failure, turn=1, step=2, agent="a"),
        session.ptc_dispatch_start_event("c", None, "c:ptc:1", "t", {}),
        session.ptc_dispatch_event("c", None, "c:ptc:1", "t", True, failure.content, failure.error, None),
        session.approval_request_event("c", "s1", "t", "why", {"en": "May I?"}, turn=1, step=2, agent="a"),
        session.approval_event("c", "s1", "allowed-once"),
        session.suspend_event("s1", turn=1, step=2, agent="a"),
    ]
    table = logged_keys()
    assert set(table) == {event["type"] for event in written}
    for event in written:
        assert table[event["type"]] == [key for key in event if key != "type"], event["type"]


def test_nothing_points_to_the_shared_design_folder() -> None:
    pattern = re.compile(r"SPEC\.md|SPEC section|SPEC says|shared design folder|spec/tools\.md")
    offenders = []
    for folder in ("dsh_actors", "policies", "executors", "docs"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".py", ".md"):
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    readme = (ROOT / "README.md").read_text()
    offenders += [f"README.md: {line}" for line in readme.splitlines() if pattern.search(line)]
    assert offenders == []


def _flat(path: str) -> str:
    return " ".join((ROOT / path).read_text().split())


def test_the_documents_give_the_thread_bound_the_benchmark_checks() -> None:
    from benchmarks.scheduling import CONCURRENT_BATCHES, RUNTIME_THREADS, concurrent_threads_bound
    from dsh_actors.runtime import DEFAULT_CALL_ACTORS

    bound = concurrent_threads_bound(CONCURRENT_BATCHES, DEFAULT_CALL_ACTORS)
    sums = re.findall(r"add at most (\d+) \+ (\d+) \+ (\d+) = (\d+) threads", _flat("docs/ARCHITECTURE.md"))
    assert sums == [(str(CONCURRENT_BATCHES), str(DEFAULT_CALL_ACTORS), str(RUNTIME_THREADS), str(bound))]
    stated = {
        "README.md": re.findall(r"documented bound is (\d+)", _flat("README.md")),
        "benchmarks/README.md": re.findall(
            r"`scale\.concurrent_threads_bound` \((\d+)\)", _flat("benchmarks/README.md")
        ),
        "benchmarks/HOPS.md": re.findall(r"`scale\.concurrent_threads_bound` \((\d+)\)", _flat("benchmarks/HOPS.md")),
    }
    assert stated == {path: [str(bound)] for path in stated}


def test_section_6_names_the_error_a_bad_suspension_or_decision_raises_as_resume_raises_it() -> None:
    # (It said InvalidValueError for any of them; the wrong type raises InvalidTypeError.)
    from dsh_actors import Agent, ToolBatchInput, ToolCall, ToolRuntime, tool
    from dsh_actors.errors import InvalidTypeError, InvalidValueError

    @tool(requires_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    with ToolRuntime() as rt:
        rt.tools.register(pay)
        rt.approvals.set(lambda request: "deferred")
        batch = ToolBatchInput(calls=[ToolCall(id="c", name="pay", arguments={"amount": 1})], agent=Agent("a"))
        suspension = rt.tools.execute(batch).suspension
        raised = []
        for given, decisions in [
            ("a str", {}),
            (suspension, []),
            (suspension, None),
            ({**suspension, "version": "1"}, {}),
            ({**suspension, "format": "other"}, {}),
            (suspension, {"c": "yes"}),
            (suspension, {"other": "rejected"}),
        ]:
            try:
                rt.tools.resume(given, decisions)
            except (InvalidTypeError, InvalidValueError) as err:
                raised.append(type(err).__name__)
    assert raised == ["InvalidTypeError"] * 4 + ["InvalidValueError"] * 3
    text = " ".join(section(6).split())
    assert "a suspension or `decisions` of the wrong type raises `InvalidTypeError`" in text
    assert "and a malformed one raises `InvalidValueError`" in text
    assert "A malformed suspension or decision raises `InvalidValueError`" not in text


def test_the_limits_the_reference_states_are_the_codes() -> None:
    # Numbers the reference gives in prose drift silently when a constant changes.
    from dsh_actors import LONGEST_WAIT_MS, MAX_JSON_DEPTH, ToolRuntime
    from dsh_actors.errors import SHOWN_VIOLATIONS
    from dsh_actors.json._rules import MAX_PATH_STEPS
    from dsh_actors.pipeline.call import MAX_UNPREPARED
    from dsh_actors.runtime import DEFAULT_CALL_ACTORS
    from dsh_actors.scheduling.dispatcher import Dispatcher

    text = " ".join(REFERENCE.split())
    stated = {
        "STOP_GRACE": re.findall(r"`ToolRuntime\.STOP_GRACE` \(([\d.]+) s\)", text),
        "MAX_UNPREPARED": re.findall(r"A call sent back (\d+) times \(`MAX_UNPREPARED`", text),
        "max_call_actors": re.findall(r"max_call_actors=(\d+)", text),
        "MAX_JSON_DEPTH": re.findall(r"`MAX_JSON_DEPTH` \((\d+)\)", text),
        "LONGEST_WAIT_MS": re.findall(r"\| `LONGEST_WAIT_MS` \| `([\de]+)`", text),
        "stop timeout": re.findall(r"past ([\de]+) s it is taken as [\de]+ s", text),
        "violations": re.findall(r"lists at most (\d+) violations", text),
        "path steps": re.findall(r"a path of more than (\d+) steps", text),
        "step slots": re.findall(r"the runtime's (\d+) step slots", text),
    }
    assert stated == {
        "STOP_GRACE": [str(ToolRuntime.STOP_GRACE)],
        "MAX_UNPREPARED": [str(MAX_UNPREPARED)],
        "max_call_actors": [str(DEFAULT_CALL_ACTORS), str(DEFAULT_CALL_ACTORS)],
        "MAX_JSON_DEPTH": [str(MAX_JSON_DEPTH)],
        "LONGEST_WAIT_MS": [f"{LONGEST_WAIT_MS:.0e}".replace("e+0", "e")],
        "stop timeout": [f"{LONGEST_WAIT_MS / 1000:.0e}".replace("e+0", "e")],
        "violations": [str(SHOWN_VIOLATIONS)],
        "path steps": [str(MAX_PATH_STEPS)],
        "step slots": [str(Dispatcher.STEPPING_MAX)],
    }


def test_section_5_gives_the_approval_denials_the_pipeline_gives() -> None:
    from dsh_actors import Agent, ToolBatchInput, ToolCall, ToolRuntime, tool

    @tool(requires_approval=True)
    def pay() -> str:
        """Pay."""
        return "paid"

    def message(rt: ToolRuntime, agent: Agent | None) -> str:
        outcome = rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c", name="pay")], agent=agent)).results[0].result
        assert isinstance(outcome, ToolExecutionFailure)
        return outcome.error.message.replace("pay", "<n>")

    with ToolRuntime() as rt:
        rt.tools.register(pay)
        given = [message(rt, Agent("a"))]
        rt.approvals.set(lambda request: "allowed-once")
        given.append(message(rt, None))
        for answer in ("rejected", "cancelled", "unavailable"):
            rt.approvals.set(lambda request, answer=answer: answer)
            given.append(message(rt, Agent("a")))
    text = " ".join(section(5).split())
    assert [f"`{m}`" in text for m in given] == [True] * len(given), given
