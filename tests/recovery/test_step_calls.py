"""Reading a step back from the log (``Session.step_calls``): every call of
the step, in model order, each settled (a logged ``tool/result``), started
(a ``tool/start`` and no result) or unstarted; logged results rebuilt from
logged fields only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dsh_actors import Agent, LogStep, Session, ToolBatchInput, ToolCall, ToolOutput, define_tool, text
from dsh_actors.errors import LosslessJsonError
from dsh_actors.session import LoggedResult, read_step, step_calls

ECHO = define_tool(
    name="echo",
    description="Echo.",
    parameters={"message": {"type": "string", "required": True}},
    output=ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)]),
    execute=lambda args, ctx: args["message"],
)

CALLS = (
    ToolCall("c1", "echo", '{"message": "one"}'),
    ToolCall("c2", "missing", "{}"),  # UNKNOWN_TOOL: no body is ever invoked
    ToolCall("c3", "echo", {"message": "three"}),
)


def run_step(rt: Any, session: Session, turn: int = 1, step: int = 1, calls: Any = CALLS) -> None:
    rt.tools.execute(ToolBatchInput(calls=calls, agent=Agent("a", session=session), log=LogStep(turn, step)))


def test_a_finished_step_reads_back_every_call_settled_with_its_logged_result(rt: Any, tmp_path: Path) -> None:
    rt.tools.register(ECHO)
    with Session(tmp_path / "log.jsonl") as session:
        run_step(rt, session)
    with Session.open(tmp_path / "log.jsonl") as reopened:
        calls = reopened.step_calls(1, 1)
        results = reopened.results_by_call()
    assert [(c.call_id, c.name, c.state, c.logged, c.started) for c in calls] == [
        ("c1", "echo", "settled", True, True),
        ("c2", "missing", "settled", True, False),
        ("c3", "echo", "settled", True, True),
    ]
    # The arguments as the model sent them: text as it is, a mapping as JSON.
    assert [c.arguments for c in calls] == ['{"message": "one"}', "{}", {"message": "three"}]
    assert [c.result for c in calls] == [results["c1"], results["c2"], results["c3"]]
    assert calls[0].result == LoggedResult("c1", (text("one"),), False)
    assert calls[1].result is not None and calls[1].result.error is not None
    assert calls[1].result.error.info is not None and calls[1].result.error.info.code == "UNKNOWN_TOOL"


def test_every_prefix_of_a_steps_log_reads_as_what_had_happened_by_then(rt: Any) -> None:
    """A crash leaves a prefix of the events: each reads as exactly what
    its events say, every call of the step present, in model order."""
    rt.tools.register(ECHO)
    session = Session()
    run_step(rt, session)
    events = session.events()
    assert events[0]["type"] == "tool/batch"
    for cut in range(1, len(events) + 1):
        prefix = events[:cut]
        calls = step_calls(prefix, 1, 1)
        assert [c.call_id for c in calls] == ["c1", "c2", "c3"], cut
        for c in calls:
            seen = {e["type"] for e in prefix if e.get("call_id") == c.call_id}
            expected = "settled" if "tool/result" in seen else "started" if "tool/start" in seen else "unstarted"
            assert (c.state, c.logged) == (expected, "tool/call" in seen), (cut, c)
    assert step_calls([], 1, 1) == ()


def test_a_step_logged_without_a_tool_batch_reads_from_its_tool_call_events() -> None:
    events = [
        {"type": "tool/call", "turn": 1, "step": 1, "call_id": "c1", "name": "echo", "arguments": {"message": "x"}},
        {"type": "tool/start", "call_id": "c1"},
        {"type": "tool/call", "turn": 1, "step": 1, "call_id": "c2", "name": "echo", "arguments": "not json"},
    ]
    calls = step_calls(events, 1, 1)
    assert [(c.call_id, c.state, c.arguments) for c in calls] == [
        ("c1", "started", {"message": "x"}),
        ("c2", "unstarted", "not json"),
    ]


def test_a_step_run_again_reads_from_its_latest_run_and_other_steps_do_not_mix(rt: Any) -> None:
    rt.tools.register(ECHO)
    session = Session()
    run_step(rt, session, 1, 1, CALLS[:1])
    run_step(rt, session, 1, 2, CALLS[:1])  # the same call id in another step
    events = session.events()
    # Step (1, 1) again, cut after its tool/call: the first run's result is not this run's.
    again = [*events, {"type": "tool/batch", "turn": 1, "step": 1, "calls": [
        {"call_id": "c1", "name": "echo", "arguments": "{}"},
    ]}, {"type": "tool/call", "turn": 1, "step": 1, "call_id": "c1", "name": "echo", "arguments": {}}]  # fmt: skip
    (first,) = step_calls(again, 1, 1)
    assert (first.state, first.logged, first.arguments) == ("unstarted", True, "{}")
    (second,) = step_calls(again, 1, 2)
    assert second.state == "settled" and second.result is not None
    assert second.result.content == (text("one"),)
    assert step_calls(again, 2, 1) == ()


@pytest.mark.parametrize(
    ("event", "path"),
    [
        ({"type": "tool/batch", "turn": 1, "step": 1, "calls": "c1"}, "event.calls"),
        ({"type": "tool/batch", "turn": 1, "step": 1, "calls": [3]}, "event.calls[0]"),
        (
            {"type": "tool/batch", "turn": 1, "step": 1, "calls": [{"call_id": 1, "name": "x"}]},
            "event.calls[0].call_id",
        ),
        (
            {"type": "tool/batch", "turn": 1, "step": 1, "calls": [{"call_id": "c", "name": None}]},
            "event.calls[0].name",
        ),
    ],
)
def test_a_malformed_step_event_is_an_error_naming_its_field(event: dict[str, Any], path: str) -> None:
    with pytest.raises(LosslessJsonError) as info:
        step_calls([event], 1, 1)
    assert info.value.path == path


def test_a_step_tells_its_limit_and_each_calls_approval() -> None:
    events = [
        {"type": "tool/batch", "turn": 2, "step": 1, "max_parallel_tool_calls": 1, "calls": [
            {"call_id": "c1", "name": "refund", "arguments": "{}"},
            {"call_id": "c2", "name": "refund", "arguments": "{}"},
        ]},
        {"type": "tool/call", "turn": 2, "step": 1, "call_id": "c1", "name": "refund", "arguments": {}},
        {"type": "tool/approval-request", "call_id": "c1", "suspension": "s1", "name": "refund",
         "reason": None, "display_reason": None},
        {"type": "tool/call", "turn": 2, "step": 1, "call_id": "c2", "name": "refund", "arguments": {}},
        {"type": "tool/approval-request", "call_id": "c2", "suspension": "s1", "name": "refund",
         "reason": None, "display_reason": None},
        {"type": "tool/approval", "call_id": "c2", "suspension": "s1", "decision": "allowed-once"},
    ]  # fmt: skip
    step = read_step(events, 2, 1)
    assert step.max_parallel_tool_calls == 1
    assert [(c.call_id, c.state, c.awaiting, c.decision) for c in step.calls] == [
        ("c1", "unstarted", "s1", None),
        ("c2", "unstarted", None, "allowed-once"),
    ]


def test_a_bodys_start_is_in_the_log_file_before_its_first_line_runs(rt: Any, tmp_path: Path) -> None:
    """What each body saw in the file when it began: its own ``tool/start``
    (sync bodies on a call actor or inline, an async one on the loop)."""
    path = tmp_path / "log.jsonl"
    seen: dict[str, bool] = {}

    def started_in_the_log(call_id: str) -> bool:
        with Session.open(path) as log:  # a read-only open: changes nothing
            return any(e["type"] == "tool/start" and e["call_id"] == call_id for e in log.events())

    def body(args: Any, ctx: Any) -> str:
        seen[ctx.call_id] = started_in_the_log(ctx.call_id)
        return "ok"

    async def async_body(args: Any, ctx: Any) -> str:
        seen[ctx.call_id] = started_in_the_log(ctx.call_id)
        return "ok"

    for name, execute in (("sync", body), ("async_", async_body)):
        rt.tools.register(
            define_tool(
                name=name,
                description=name,
                parameters={},
                output=ToolOutput(schema={"type": "string"}),
                execute=execute,
                is_concurrency_safe=True,
            )  # fmt: skip
        )
    calls = tuple(ToolCall(f"c{i}", name, "{}") for i, name in enumerate(["sync", "sync", "async_", "sync"]))
    with Session(path) as session:
        run_step(rt, session, calls=calls)
    assert seen == dict.fromkeys(["c0", "c1", "c2", "c3"], True)


def _two_open_calls_of_one_id() -> list[dict[str, Any]]:
    """Two agents sharing a session, each in its own step, both with call
    ``c1``: agent a's call starts and settles while agent b's is open."""
    return [
        {"type": "tool/batch", "turn": 1, "step": 1, "calls": [{"call_id": "c1", "name": "echo", "arguments": "{}"}]},
        {"type": "tool/call", "turn": 1, "step": 1, "call_id": "c1", "name": "echo", "arguments": {}},
        {"type": "tool/batch", "turn": 2, "step": 1, "calls": [{"call_id": "c1", "name": "echo", "arguments": "{}"}]},
        {"type": "tool/call", "turn": 2, "step": 1, "call_id": "c1", "name": "echo", "arguments": {}},
        {"type": "tool/start", "call_id": "c1", "turn": 1, "step": 1},
        {"type": "tool/result", "call_id": "c1", "turn": 1, "step": 1, "is_error": False,
         "content": [{"type": "text", "text": "a's"}], "error": None, "meta": None},
    ]  # fmt: skip


def test_a_start_and_a_result_that_name_their_step_pair_with_its_call_while_another_open_call_shares_the_id(
    tmp_path: Path,
) -> None:
    from dsh_actors.cli.render import log_entries

    events = _two_open_calls_of_one_id()
    (mine,) = step_calls(events, 1, 1)
    assert (mine.state, mine.started) == ("settled", True)
    assert mine.result is not None and mine.result.content == (text("a's"),)
    (theirs,) = step_calls(events, 2, 1)
    assert (theirs.state, theirs.started) == ("unstarted", False)
    # replay shows the result on its own step's call
    entries = log_entries(events)
    assert [(e.turn, e.step, e.result is not None) for e in entries] == [(1, 1, True), (2, 1, False)]
    # the session itself: the open call is b's, and repair closes exactly it
    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        for event in events:
            session.append(event)
    with Session.open(path) as reopened:
        assert reopened.pending_calls() == ["c1"]
        (repaired,) = reopened.repair()
        assert (repaired["turn"], repaired["step"]) == (2, 1)
        assert reopened.pending_calls() == []
        (again,) = reopened.step_calls(2, 1)
        assert again.state == "settled"
        (still,) = reopened.step_calls(1, 1)
        assert still.result is not None and still.result.content == (text("a's"),)
    # A log written before these events carried their step reads as it did:
    # they pair with the latest open call of their id.
    for event in events[4:]:
        del event["turn"], event["step"]  # a log written before they carried their step
    (first,) = step_calls(events, 1, 1)
    assert first.state == "unstarted"
    (latest,) = step_calls(events, 2, 1)
    assert latest.state == "settled"
