"""Errors raised on purpose are DshErrors: those Python code expects as a
builtin (ValueError, TypeError, RuntimeError) are also that builtin."""

from __future__ import annotations

import pickle

import pytest

from dsh_actors import (
    DshError,
    ErrorCode,
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
    RuntimeStoppedError,
    ToolBatchInput,
    ToolCall,
    ToolRuntime,
    UsageError,
)


def test_duplicate_call_ids_raise_a_dsh_error_that_is_a_value_error(rt: ToolRuntime) -> None:
    calls = (ToolCall(id="c", name="a", arguments={}), ToolCall(id="c", name="b", arguments={}))
    with pytest.raises(ValueError, match="call ids must be unique") as caught:
        rt.tools.execute(ToolBatchInput(calls=calls))
    assert isinstance(caught.value, InvalidValueError) and isinstance(caught.value, DshError)
    assert caught.value.code == ErrorCode.INVALID_USE


def test_a_dict_given_as_a_call_raises_a_dsh_error_that_is_a_type_error(rt: ToolRuntime) -> None:
    batch = ToolBatchInput(calls=({"id": "c", "name": "a", "arguments": {}},))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"calls\[0\] is a dict, not a ToolCall") as caught:
        rt.tools.execute(batch)
    assert isinstance(caught.value, InvalidTypeError) and caught.value.code == ErrorCode.INVALID_USE


def test_a_stopped_runtime_raises_a_dsh_error_that_is_a_runtime_error() -> None:
    rt = ToolRuntime().start()
    rt.stop()
    for attempt in (lambda: rt.tools, rt.start, lambda: rt.events.on("tools/result", lambda *a: None)):
        with pytest.raises(RuntimeError, match="stopped") as caught:
            attempt()
        assert isinstance(caught.value, RuntimeStoppedError) and caught.value.code == ErrorCode.RUNTIME_STOPPED


def test_a_runtime_not_started_and_a_bad_limit_raise_usage_errors() -> None:
    with pytest.raises(RuntimeError, match="not started") as not_started:
        _ = ToolRuntime().tools
    assert isinstance(not_started.value, InvalidStateError)
    with pytest.raises(ValueError, match="positive integer") as bad_limit:
        ToolRuntime(max_parallel_tool_calls=0)
    assert isinstance(bad_limit.value, UsageError)
    # A limit past what the log (and any count) holds is refused up front,
    # not found when the batch's tool/batch cannot be written.
    with pytest.raises(ValueError, match=r"max_parallel_tool_calls must be at most 2\*\*63-1"):
        ToolRuntime(max_parallel_tool_calls=2**64)
    with ToolRuntime() as rt:
        batch = ToolBatchInput(calls=(ToolCall("c1", "t", "{}"),), max_parallel_tool_calls=2**64)
        with pytest.raises(ValueError, match=r"max_parallel_tool_calls must be at most 2\*\*63-1"):
            rt.tools.execute(batch)


@pytest.mark.parametrize("cls", [InvalidValueError, InvalidTypeError, InvalidStateError, RuntimeStoppedError])
def test_the_new_errors_pickle_with_their_class_and_message(cls: type[DshError]) -> None:
    copy = pickle.loads(pickle.dumps(cls("what went wrong")))
    assert type(copy) is cls and copy.message == "what went wrong" and copy.code == cls.code


def test_a_message_lists_twenty_violations_and_counts_the_rest_which_the_error_keeps() -> None:
    from dsh_actors.errors import ToolArgsError, ToolOutputError

    violations = [f'"value.items[{i}]" must be an integer' for i in range(25)]
    for err, head in (
        (ToolArgsError(violations), "invalid arguments: "),
        (ToolOutputError("t", violations), 'tool "t" returned invalid output: '),
    ):
        assert str(err) == head + "; ".join(violations[:20]) + "; and 5 more"
        assert err.violations == tuple(violations)
    assert str(ToolArgsError(violations[:20])) == "invalid arguments: " + "; ".join(violations[:20])


@pytest.mark.parametrize("typed", [True, False])
def test_thousands_of_bad_items_give_the_model_a_short_message(rt: ToolRuntime, typed: bool) -> None:
    """A model's argument of 5,000 wrong items: the INVALID_ARGS message it
    reads names the first twenty and counts the rest (a typed tool's used
    to grow with the square of their number to find each once)."""
    import orjson

    from dsh_actors import ToolOutput, define_tool, tool

    def total(items: list[int]) -> int:
        """Sums integers."""
        return sum(items)

    if typed:
        rt.tools.register(tool(total))
    else:
        parameters = {"items": {"type": "array", "items": {"type": "integer"}, "required": True}}
        output = ToolOutput(schema={"type": "integer"})
        rt.tools.register(
            define_tool(
                name="total",
                description="Sums.",
                parameters=parameters,
                output=output,
                execute=lambda args, ctx: total(**args),
            )
        )
    arguments = orjson.dumps({"items": ["x"] * 5000}).decode()
    result = rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c0", name="total", arguments=arguments)]))
    error = result.results[0].result.error
    assert error.info.code == ErrorCode.INVALID_ARGS
    assert error.message.endswith('"value.items[19]" must be an integer; and 4,980 more')
    assert len(error.exception.violations) == 5000


def test_content_and_decisions_of_the_wrong_type_are_refused_where_they_are_made_naming_the_fix() -> None:
    """(They used to be taken, and to surface later: as the call's render
    failure, or as a Python repr in the message the model reads.)"""
    from dsh_actors import Deny, ImageBlock

    with pytest.raises(InvalidTypeError, match=r"ImageBlock data is base64 text \(a str\), not bytes: base64-encode"):
        ImageBlock(b"\x89PNG", "image/png")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match=r"ImageBlock mime_type is a str such as 'image/png', not NoneType"):
        ImageBlock("aGk=", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match=r"Deny\(reason=\.\.\.\) is the text the model reads, a str, not dict"):
        Deny({"why": "policy"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (
            "data:image/png;base64,iVBORw0KGgo=",
            'is a data URL, not base64 text: strip its "data:<type>;base64," prefix',
        ),
        ("not base64 !!", "is not base64 text (the standard alphabet"),
        ("iVBORw0KGgo", "is not base64 text"),  # (unpadded)
        ("iVBO\nRw0KGgo=", "is not base64 text"),  # (a line break)
        ("aGk=aGk=", "is not base64 text"),  # (padding inside)
        ("aGk-", "is not base64 text"),  # (the URL-safe alphabet)
        ("é", "is not base64 text"),
        ("", "is empty: base64-encode the bytes"),
    ],
)
def test_image_data_that_is_not_base64_is_refused_where_the_block_is_made_naming_the_fix(
    data: str, problem: str
) -> None:
    """(It used to be taken, and sent: ``data:image/png;base64,data:...`` to
    OpenAI, and data Anthropic refuses, with the whole history.)"""
    from dsh_actors import ImageBlock

    with pytest.raises(InvalidValueError) as caught:
        ImageBlock(data, "image/png")
    assert caught.value.message.startswith(f"ImageBlock data {problem}")
    for good in ("aGk=", "aGk+", "aG==", "iVBORw0KGgo=", "////"):
        assert ImageBlock(good, "image/png").data == good


def test_an_asks_display_reason_is_text_by_language_and_a_str_is_its_english_text() -> None:
    """(A str used to be taken as it was, and to fail the call only once it
    was deferred, with a misleading ``tools/pre-execute:`` prefix.)"""
    from dsh_actors import Ask

    assert Ask(display_reason="Delete it?").display_reason == {"en": "Delete it?"}
    given = {"en": "Delete it?", "fr": "Le supprimer ?"}
    ask = Ask(reason="r", display_reason=given)
    given["en"] = "changed"  # copied as the Ask is made
    assert ask == Ask(reason="r", display_reason={"en": "Delete it?", "fr": "Le supprimer ?"})
    assert Ask().display_reason is None
    assert Ask(display_reason={"fr": "Le supprimer ?"}).display_reason == {
        "fr": "Le supprimer ?"
    }  # (stored ones resume)
    fix = r'Ask\(display_reason=\.\.\.\) must be the English text \(a str\) or a mapping of language to text, such as \{"en": "Delete the file\?"'
    for shown, got in [
        (5, "int"),
        (["en", "x"], "list"),
        ({"en": 1}, "a mapping whose keys and values are not all str"),
        (b"Delete it?", "bytes"),
    ]:
        with pytest.raises(InvalidTypeError, match=fix) as caught:
            Ask(display_reason=shown)  # type: ignore[arg-type]
        assert caught.value.message.endswith(f"(got {got})")


def test_an_asks_reason_that_is_not_text_is_refused_as_the_ask_is_made() -> None:
    """(It used to be taken: given to the approval service as it was, or
    failing the call only once the service deferred it, as a Deny's
    reason is refused already.)"""
    from dsh_actors import Ask

    class Secret:
        def __repr__(self) -> str:
            return "<Secret internal 0x7f>"

    assert Ask(reason="why").reason == "why" and Ask(reason=None).reason is None
    for reason, got in [(3, "int"), (Secret(), Secret.__qualname__), (["a", "b"], "list"), (b"why", "bytes")]:
        with pytest.raises(InvalidTypeError) as caught:
            Ask(reason=reason)  # type: ignore[arg-type]
        assert caught.value.message == f"Ask(reason=...) is the audited reason, a str or None, not {got}"


def test_defer_context_takes_text_as_the_text_of_a_user_message(rt: ToolRuntime) -> None:
    """(A str used to fail the call, showing the fix to the model.)"""
    from dsh_actors import ToolOutput, UserMessage, define_tool, text

    def body(args: object, ctx: object) -> str:
        ctx.defer_context("remember this")  # type: ignore[attr-defined]
        return "ok"

    rt.tools.register(
        define_tool(
            name="t", description="t", parameters={}, output=ToolOutput(schema={"type": "string"}), execute=body
        )
    )
    result = rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c0", name="t", arguments="{}")])).results[0].result
    assert not result.is_error
    assert result.additional_contexts == (UserMessage([text("remember this")]),)


def test_defer_context_given_another_type_names_both_forms_it_takes(rt: ToolRuntime) -> None:
    from dsh_actors import ToolOutput, define_tool

    def body(args: object, ctx: object) -> str:
        ctx.defer_context(b"remember this")  # type: ignore[attr-defined]
        return "ok"

    rt.tools.register(
        define_tool(
            name="t", description="t", parameters={}, output=ToolOutput(schema={"type": "string"}), execute=body
        )
    )
    result = rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c0", name="t", arguments="{}")])).results[0].result
    assert result.error.message == (
        "defer_context takes a UserMessage or a str (its text), not bytes: "
        'ctx.defer_context("...") or ctx.defer_context(UserMessage([text("...")], source=...))'
    )


def test_the_plugins_and_optional_parts_refuse_bad_options_with_dsh_errors(rt: ToolRuntime) -> None:
    import policies.approval
    import policies.retry
    import policies.spill
    import policies.trace
    from dsh_actors import Agent
    from dsh_actors.acp import attach
    from dsh_actors.providers.openai import calls
    from executors.ptc import PtcExecutor

    cases: list[tuple[type[Exception], str, object]] = [
        (ValueError, "attempts must be a positive integer", lambda: rt.use(policies.retry, attempts=0)),
        (
            TypeError,
            r"unknown option\(s\) \['bogus'\]; it takes recorder=, path=, scope=",
            lambda: rt.use(policies.trace, bogus=1),
        ),
        (TypeError, "service= is required", lambda: rt.use(policies.approval)),
        (TypeError, "directory= is required", lambda: rt.use(policies.spill)),
        (ValueError, "timeout_ms must be a positive finite number", lambda: PtcExecutor(timeout_ms=0)),
        (ValueError, "choices", lambda: calls({"choices": 5})),
        (TypeError, "agent must be an Agent", lambda: attach(rt, object(), "s1", agent="main")),  # type: ignore[arg-type]
        (RuntimeError, "event loop", lambda: attach(rt, object(), "s1", agent=Agent("main"))),  # type: ignore[arg-type]
    ]
    for builtin, match, attempt in cases:
        with pytest.raises(builtin, match=match) as caught:
            attempt()  # type: ignore[operator]
        assert isinstance(caught.value, DshError) and caught.value.code == ErrorCode.INVALID_USE, match
