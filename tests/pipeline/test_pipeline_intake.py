"""Batch intake (``pipeline/intake.py: check_batch``): a malformed batch is
refused with a clear error before any call runs, any listener sees it, or
anything reaches the session log."""

from __future__ import annotations

import contextvars
import dataclasses
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_actors import Agent, LogStep, Session, ToolBatchInput, ToolCall
from dsh_actors.messages import ExecuteBatch
from dsh_actors.pipeline.intake import bind_context

from .helpers import HI, echo_tool

WAIT = 5.0


class Counting:
    """An echo tool that counts its runs, and a listener that counts results."""

    def __init__(self, rt: Any) -> None:
        self.runs = 0
        self.results = 0
        self._lock = threading.Lock()

        def body(args: Any, ctx: Any) -> Any:
            with self._lock:
                self.runs += 1
            return args["message"]

        def observe(execution: Any, result: Any) -> None:
            with self._lock:
                self.results += 1

        rt.tools.register(echo_tool(execute=body))
        rt.events.on("tools/result", observe)


def test_two_calls_with_one_id_are_refused_naming_the_id_before_anything_runs_or_is_logged(rt: Any) -> None:
    seen = Counting(rt)
    session = Session()
    batch = ToolBatchInput(
        calls=(ToolCall("a", "echo", HI), ToolCall("dup", "echo", HI), ToolCall("dup", "echo", HI)),
        agent=Agent("main", session=session),
        log=LogStep(turn=1, step=1),
    )
    with pytest.raises(ValueError, match=r"calls\[2\] has the id 'dup' of calls\[1\]: call ids must be unique"):
        rt.tools.execute(batch)
    with pytest.raises(ValueError, match="'dup'"):
        rt.tools.submit(batch).result(WAIT)
    with pytest.raises(ValueError, match="'dup'"):
        rt.registry.ask(ExecuteBatch(batch), timeout=WAIT)
    assert (seen.runs, seen.results) == (0, 0)
    assert session.events() == [] and session.pending_calls() == []


def test_a_duplicate_id_is_refused_without_a_log_too_and_distinct_ids_still_run(rt: Any) -> None:
    seen = Counting(rt)
    with pytest.raises(ValueError, match="'x'"):
        rt.tools.execute(ToolBatchInput(calls=[ToolCall("x", "echo", HI), ToolCall("x", "echo", HI)]))
    assert seen.runs == 0
    batch = rt.tools.execute(ToolBatchInput(calls=[ToolCall("x", "echo", HI), ToolCall("y", "echo", HI)]))
    assert [r.call_id for r in batch.results] == ["x", "y"] and seen.runs == 2


def test_a_very_long_duplicate_id_is_shown_cut() -> None:
    from dsh_actors.pipeline.intake import check_batch

    long_id = "i" * 10_000
    with pytest.raises(ValueError) as info:
        check_batch(ToolBatchInput(calls=[ToolCall(long_id, "echo", "{}"), ToolCall(long_id, "echo", "{}")]))
    assert len(str(info.value)) < 300 and "call ids must be unique" in str(info.value)


def test_a_log_without_an_agent_is_refused_before_anything_runs(rt: Any) -> None:
    seen = Counting(rt)
    with pytest.raises(ValueError, match="ToolBatchInput.log needs an agent"):
        rt.tools.execute(ToolBatchInput(calls=[ToolCall("c1", "echo", HI)], log=LogStep(turn=1, step=1)))
    assert (seen.runs, seen.results) == (0, 0)


@pytest.mark.parametrize(("turn", "step"), [("1", 1), (1, 1.0), (True, 1), (1, None)])
def test_a_log_step_that_is_not_two_ints_is_refused_before_anything_runs_or_is_logged(
    rt: Any, turn: Any, step: Any
) -> None:
    # Before, it was logged as it was: a step that read_step, recovery and
    # resume (which take ints) could never find.
    seen = Counting(rt)
    session = Session()
    with pytest.raises(TypeError) as raised:
        rt.tools.execute(
            ToolBatchInput(
                calls=[ToolCall("c1", "echo", HI)],
                agent=Agent("main", session=session),
                log=LogStep(turn=turn, step=step),
            )
        )
    assert str(raised.value) == (
        f"ToolBatchInput.log's turn and step must be ints, got LogStep(turn={turn!r}, step={step!r})"
    )
    assert (seen.runs, seen.results) == (0, 0) and session.events() == []


@pytest.mark.parametrize("bad", [5, None, b"main"])
def test_an_agent_id_that_is_not_a_str_is_refused_when_the_agent_is_made(bad: Any) -> None:
    # Before, Agent(5) was made, and its repr and every message naming it failed.
    with pytest.raises(TypeError, match=rf"^Agent\(id\) must be a str, not {type(bad).__qualname__}$"):
        Agent(bad)
    with pytest.raises(TypeError, match=r"^Agent\(parent=...\) must be an Agent or None, not str$"):
        Agent("child", parent="main")  # type: ignore[arg-type]


def test_a_log_for_an_agent_without_a_session_runs_and_logs_nowhere(rt: Any) -> None:
    seen = Counting(rt)
    batch = rt.tools.execute(
        ToolBatchInput(calls=[ToolCall("c1", "echo", HI)], agent=Agent("main"), log=LogStep(turn=1, step=1))
    )
    assert not batch.results[0].result.is_error and seen.runs == 1


# -- argument text that gives a key twice: which value is meant is unknown ----------


def test_arguments_that_give_a_key_twice_fail_invalid_args_naming_it_and_the_log_keeps_both(rt: Any) -> None:
    seen = Counting(rt)
    session = Session()
    text = '{"message": "safe.txt", "message": "/etc/passwd"}'
    batch = rt.tools.execute(
        ToolBatchInput(calls=[ToolCall("c1", "echo", text)], agent=Agent("main", session=session), log=LogStep(1, 1))
    )
    result = batch.results[0].result
    assert result.is_error and str(result.error.info.code) == "INVALID_ARGS" and seen.runs == 0
    problem = "arguments.message: the key appears more than once in its object: send each key once"
    assert result.error.message == f"invalid arguments: arguments are not lossless JSON: {problem}"
    logged = {event["type"]: event for event in session.events()}
    assert logged["tool/batch"]["calls"][0]["arguments"] == text  # as the model sent it
    assert logged["tool/call"]["arguments"] == f"<arguments that are not lossless JSON: {problem}>"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"a": {"b": 1, "b": 2}}', "arguments.a.b"),
        ('{"a": [{"k": 1}, {"k": 1, "k" : 2}]}', "arguments.a[1].k"),  # (whitespace before a colon)
        ('{"a" : "http://x", "a": 1}', "arguments.a"),
        ('{"a":1,"\\u0061":2}', "arguments.a"),  # an escape that spells the same key
        ('{"a\\\\":1,"a\\\\":2}', 'arguments["a\\\\"]'),  # a key that ends in an escaped backslash
        ('{"a\\"":1, "a\\"" :2}', 'arguments["a\\""]'),  # ... in an escaped quote
        ('{"\\u0022": 1, "\\"": 2}', 'arguments["\\""]'),  # a quote written as \u0022
        ('{"a": 1, "a": "\\u0022\\u0022"}', "arguments.a"),  # as many quotes as orjson writes for its value
        ('{"k"\n\t:1,"k" \r\n :2}', "arguments.k"),  # whitespace of every kind before a colon
        ('{"m": "say \\"k\\": 1", "m": "x"}', "arguments.m"),  # what it gave first holds a quote and colon
        ('{"a": [[{"x": [{"k": 1}, {"k": "\\":", "k": 2}]}]]}', "arguments.a[0][0].x[1].k"),
        ('{"xs": [' + ", ".join(map(str, range(1000))) + '], "q": {"k": 1, "k": 2}}', "arguments.q.k"),
        (
            '{"a": ' * 300 + '{"k": 1, "k": 2}' + "}" * 300,  # deeper than orjson writes
            "arguments" + ".a" * 8 + " … (285 more) … " + ".a" * 7 + ".k",
        ),
    ],
)
def test_a_key_given_twice_is_found_at_any_depth(text: str, where: str) -> None:
    from dsh_actors.pipeline.call import BadArguments
    from dsh_actors.pipeline.intake import parse_arguments

    parsed = parse_arguments(text)
    assert type(parsed) is BadArguments and parsed.error.path == where, parsed


@pytest.mark.parametrize(
    "text",
    [
        '{"url": "http://a:b", "at": "12:30"}',  # colons in strings
        '{"s": "\\"x\\": y", "t": 1}',  # a key-like quote and colon in a string
        '{"a": {"x": 1}, "b": {"x": 1}, "c" : [{"x": "1:2"}]}',  # one key in several objects
        '{"s": "{\\"k\\": 1, \\"k\\" : 2}", "t": 1}',  # a repeated key in a string's JSON
        '{"code": "x ? \\"a\\" : \\"b\\"", "n": 1}',  # an escaped quote, whitespace, a colon
        '{"a\\\\": 1, "a": 2, "a\\"": 3}',  # keys that differ by an escape
        '{"q": "\\u0022", "t": "\\\\u0022:"}',  # a quote written as \u0022, and that text itself
        '{"a" : 1, "b"\n: {"a" :[1, {"b": "\\":"}], "c": ": x"}}',
        '{"a": ' * 300 + '{"k": 1}' + "}" * 300,  # deeper than orjson writes
    ],
)
def test_text_that_only_looks_like_it_repeats_a_key_parses_as_it_is(text: str) -> None:
    import json

    from dsh_actors.pipeline.intake import parse_arguments

    assert parse_arguments(text) == json.loads(text)


#: Keys, some of them one key written two ways (\u0061 is a, \u005C a
#: backslash, \u0022 a quote), and strings that hold quotes and colons.
_KEYS = ['"a"', '"\\u0061"', '"a\\\\"', '"a\\u005C"', '"a\\""', '"a\\u0022"', '"\\""', '"\\u0022"', '":"', '" :"', '""']
_STRINGS = ['"k\\": 1"', '"\\"k\\" :"', '"\\u0022:"', '"\\\\u0022"', '": x"', '"\\\\"', '"http://x:1"']
_SPACE = st.sampled_from(["", "", " ", "\n", "\t ", "\r\n"])


@st.composite
def _object_text(draw: Any, values: Any) -> str:
    """An object's text whose keys may repeat, whitespace anywhere it may be."""
    members = [
        draw(_SPACE) + key + draw(_SPACE) + ":" + draw(_SPACE) + draw(values)
        for key in draw(st.lists(st.sampled_from(_KEYS), max_size=4))
    ]
    return "{" + ",".join(members) + draw(_SPACE) + "}"


_VALUE_TEXT = st.recursive(
    st.sampled_from([*_STRINGS, "1", "true", "null"]),
    lambda values: st.one_of(
        _object_text(values), st.lists(values, max_size=3).map(lambda items: "[" + ", ".join(items) + "]")
    ),
    max_leaves=12,
)


@settings(max_examples=100)
@given(_object_text(_VALUE_TEXT))
def test_a_key_given_twice_is_found_exactly_whatever_the_text_holds(text: str) -> None:
    import json

    from dsh_actors.pipeline.call import BadArguments
    from dsh_actors.pipeline.intake import parse_arguments

    def once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal repeats
        repeats = repeats or len({key for key, _ in pairs}) < len(pairs)
        return dict(pairs)

    repeats = False
    value = json.loads(text, object_pairs_hook=once)
    parsed = parse_arguments(text)
    assert (type(parsed) is BadArguments) == repeats and (repeats or parsed == value), (text, parsed)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"n": 18446744073709551616}', "arguments.n"),  # 2**64: orjson reads a float
        ('{"a": [1, -9223372036854775809]}', "arguments.a[1]"),
        ('{"s": "é ✓", "n": 123456789012345678901234567890}', "arguments.n"),  # after text that is not ASCII
        ('{"n":99999999999999999999}', "arguments.n"),
    ],
)
def test_an_integer_beyond_64_bits_is_bad_arguments_naming_where(text: str, where: str) -> None:
    from dsh_actors.pipeline.call import BadArguments
    from dsh_actors.pipeline.intake import parse_arguments

    parsed = parse_arguments(text)
    assert type(parsed) is BadArguments and parsed.error.path == where, parsed
    assert "out of range" in parsed.error.message


@pytest.mark.parametrize(
    "text",
    [
        '{"n": 18446744073709551615, "m": -9223372036854775808}',  # the bounds themselves
        '{"id": "12345678901234567890123", "n": 1}',  # long digits in a string
        '{"id": "١٢٣٤٥٦٧٨٩٠١٢٣٤٥٦٧٨٩٠", "n": 1}',  # digits that are not ASCII
        '{"x": 1.5e300, "y": 1.2345678901234567890123}',  # long floats are floats
    ],
)
def test_long_digits_that_are_not_an_integer_beyond_64_bits_parse_as_they_are(text: str) -> None:
    import json

    from dsh_actors.pipeline.intake import parse_arguments

    assert parse_arguments(text) == json.loads(text)


# -- a call that is not a ToolCall: the refusal names the fix ----------------------


def _openai_message() -> Any:
    from openai.types.chat import ChatCompletionMessage

    call = {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
    return ChatCompletionMessage.model_validate({"role": "assistant", "content": None, "tool_calls": [call]})


def _responses_response() -> Any:
    from openai.types.responses import Response

    item = {"type": "function_call", "call_id": "c1", "name": "echo", "arguments": "{}"}
    return Response.model_validate(
        {
            "id": "r",
            "object": "response",
            "created_at": 0,
            "model": "m",
            "output": [item],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
    )


def _anthropic_message() -> Any:
    from anthropic.types import Message

    block = {"type": "tool_use", "id": "c1", "name": "echo", "input": {}}
    return Message.model_validate(
        {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [block],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )


def _refusal(calls: Any) -> str:
    from dsh_actors.pipeline.intake import check_batch

    with pytest.raises(TypeError) as caught:
        check_batch(ToolBatchInput(calls=calls))
    return str(caught.value)


def test_a_provider_sdk_call_is_refused_naming_the_adapter_that_converts_it(rt: Any) -> None:
    sdk_calls = _openai_message().tool_calls
    with pytest.raises(TypeError) as caught:
        rt.tools.execute(ToolBatchInput(calls=sdk_calls))
    said = str(caught.value)
    assert said.startswith("calls[0] is a ChatCompletionMessageFunctionToolCall, not a ToolCall: ")
    assert "dsh_actors.providers.openai.calls(" in said
    for calls, adapter in (
        (_responses_response().output, "openai_responses"),
        (_anthropic_message().content, "anthropic"),
        ([{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}], "openai"),
        ([{"type": "function_call", "call_id": "c1", "name": "echo", "arguments": "{}"}], "openai_responses"),
        ([{"type": "tool_use", "id": "c1", "name": "echo", "input": {}}], "anthropic"),
    ):
        said = _refusal(calls)
        assert said.startswith("calls[0] is a "), said
        assert f"dsh_actors.providers.{adapter}.calls(" in said, said


def test_a_plain_dict_is_refused_naming_the_tool_call_to_make() -> None:
    said = _refusal([{"id": "c1", "name": "echo", "arguments": {}}])
    assert said.startswith("calls[0] is a dict, not a ToolCall: ")
    assert "ToolCall(id=..., name=..., arguments=...)" in said
    assert "dsh_actors.providers" in said


def test_a_whole_sdk_response_as_calls_is_refused_as_one_not_as_a_tuple() -> None:
    # Iterating a pydantic object gives its (field, value) pairs: calls[0]
    # is a tuple, which would say nothing of the fix.
    for response, adapter in (
        (_openai_message(), "openai"),
        (_responses_response(), "openai_responses"),
        (_anthropic_message(), "anthropic"),
    ):
        said = _refusal(response)
        assert "is a tuple" not in said, said
        assert said.startswith("calls is a model response or message, not a list of ToolCall"), said
        assert f"dsh_actors.providers.{adapter}.calls(" in said, said


def test_binding_a_batch_keeps_its_class_and_every_field_of_it() -> None:
    # (A field-by-field binding built a plain ToolBatchInput: a subclass's
    # own fields were lost.)
    @dataclasses.dataclass(frozen=True, slots=True)
    class Tagged(ToolBatchInput):
        tag: str = "x"

    batch = Tagged([ToolCall("c1", "t", {})], max_parallel_tool_calls=3, tag="mine")
    bound = bind_context(batch, contextvars.copy_context())
    assert type(bound) is Tagged and bound.tag == "mine"
    assert bound.calls == batch.calls and bound.max_parallel_tool_calls == 3 and bound.context is not None
