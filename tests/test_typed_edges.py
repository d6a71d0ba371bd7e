"""Edges of ``@tool``, the event bus and their messages: a non-finite float
an ``Any`` holds, a sync wrapper of an async def, a mapping's bad key, a
pydantic ``Field`` as a default, a method taken from its class, ..."""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Annotated, Any, Literal

import pydantic.dataclasses
import pytest
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from dsh_actors import RegistrationError, ToolBatchInput, ToolCall, ToolDefinition, thaw, tool
from dsh_actors.errors import ToolOutputError
from dsh_actors.events import EventBus


def run(rt: Any, definition: ToolDefinition, arguments: Any) -> Any:
    """Register ``definition``, run one call of it and unregister it; the
    call's result."""
    unregister = rt.tools.register(definition)
    try:
        result = rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c1", name=definition.name, arguments=arguments)]))
    finally:
        unregister()
    return result.results[0].result


def assert_not_finite(rt: Any, definition: ToolDefinition, *cases: tuple[str, str]) -> None:
    """Each call of ``definition`` with ``cases``' arguments (JSON text)
    fails ``INVALID_ARGS`` naming the path (``cases``' second) of the float
    that is not finite."""
    for arguments, where in cases:
        result = run(rt, definition, arguments)
        assert result.is_error and str(result.error.info.code) == "INVALID_ARGS", (arguments, result)
        assert result.error.message == f'invalid arguments: "{where}": Input should be a finite number'


class Holder(BaseModel):
    a: Any = None


@dataclasses.dataclass
class Pair:
    left: int
    right: int = 0


class Point(BaseModel):
    x: int


class Other(BaseModel):
    x: int


def test_a_non_finite_float_an_any_holds_fails_invalid_tool_output_instead_of_becoming_null(rt: Any) -> None:
    @tool
    def no_annotation():  # type: ignore[no-untyped-def]
        return {"ratio": math.nan}

    @tool
    def dict_of_any() -> dict[str, Any]:
        return {"ratio": math.inf}

    @tool
    def model_with_any() -> Holder:
        return Holder(a=[1.0, -math.inf])

    @tool
    def finite() -> Holder:
        return Holder(a=[1.5])

    for definition, where in (
        (no_annotation, "value.ratio"),
        (dict_of_any, "value.ratio"),
        (model_with_any, "value.a[1]"),
    ):
        result = run(rt, definition, {})
        assert result.is_error, (definition.name, result)
        assert str(result.error.info.code) == "INVALID_TOOL_OUTPUT"
        assert f"{where}: float" in result.error.message and "is not lossless JSON" in result.error.message
    result = run(rt, finite, {})
    assert not result.is_error and thaw(result.value) == {"a": [1.5]}


class Reading(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)
    value: float


@dataclasses.dataclass
class Span:
    low: float


class Limits(TypedDict):
    high: float


def test_a_non_finite_float_sent_as_text_fails_invalid_args_before_the_body(rt: Any) -> None:
    # Lax mode reads the strings "nan", "inf" and "1e400" as floats: JSON
    # has none, and the body would run with one.
    ran: list[Any] = []

    @tool
    def scale(
        factor: float = 1.0,
        factors: list[float] | None = None,
        span: Span | None = None,
        limits: Limits | None = None,
        reading: Reading | None = None,
        by_name: dict[str, float] | None = None,
        unbounded: Annotated[float, Field(allow_inf_nan=True)] = 0.0,
    ) -> str:
        ran.append(factor)
        return "ok"

    assert_not_finite(
        rt,
        scale,
        ('{"factor": "nan"}', "value.factor"),
        ('{"factor": "-Infinity"}', "value.factor"),
        ('{"factor": "1e400"}', "value.factor"),
        ('{"factors": [1, "inf"]}', "value.factors[1]"),
        ('{"span": {"low": "nan"}}', "value.span.low"),
        ('{"limits": {"high": "inf"}}', "value.limits.high"),
        ('{"reading": {"value": "inf"}}', "value.reading.value"),
        ('{"by_name": {"k": "inf"}}', "value.by_name.k"),
    )
    assert ran == []
    # A finite float stays a float.
    assert not run(rt, scale, '{"factor": "2.5"}').is_error
    assert ran == [2.5]


class Free(BaseModel):  # pydantic's default: a float field allows nan and inf
    x: float


class Loose(BaseModel):
    model_config = ConfigDict(allow_inf_nan=True)
    x: float


@pydantic.dataclasses.dataclass
class Sample:
    x: float


class Node(BaseModel):
    value: float
    children: list[Node] = []


class Holds(BaseModel):
    spans: list[Span]
    limits: Limits | None = None


def test_a_non_finite_float_in_a_models_own_config_fails_invalid_args_naming_its_path(rt: Any) -> None:
    # A model keeps its own config (pydantic's allows nan and inf), but the
    # arguments are JSON: the body never runs with a float JSON cannot
    # carry, whatever the type allows (the value it returns could not be
    # written, and the fault is the arguments').
    ran: list[Any] = []

    @tool
    def place(
        free: Free | None = None,
        loose: Loose | None = None,
        sample: Sample | None = None,
        tree: Node | None = None,
        holds: Holds | None = None,
        unbounded: Annotated[float, Field(allow_inf_nan=True)] = 0.0,
    ) -> Any:
        ran.append((free, loose, sample, tree, holds))
        return free or loose or sample or tree or holds

    assert_not_finite(
        rt,
        place,
        ('{"free": {"x": "inf"}}', "value.free.x"),
        ('{"free": {"x": "NaN"}}', "value.free.x"),
        ('{"free": {"x": "-Infinity"}}', "value.free.x"),
        ('{"free": {"x": "1e400"}}', "value.free.x"),
        ('{"loose": {"x": "inf"}}', "value.loose.x"),
        ('{"sample": {"x": "nan"}}', "value.sample.x"),
        ('{"tree": {"value": 1, "children": [{"value": "inf"}]}}', "value.tree.children[0].value"),
        ('{"holds": {"spans": [{"low": 1}, {"low": "nan"}]}}', "value.holds.spans[1].low"),
        ('{"holds": {"spans": [], "limits": {"high": "inf"}}}', "value.holds.limits.high"),
        ('{"unbounded": "inf"}', "value.unbounded"),
    )
    assert ran == []
    # NaN itself is no JSON.
    result = run(rt, place, '{"free": {"x": NaN}}')
    assert result.is_error and str(result.error.info.code) == "INVALID_ARGS"
    assert "arguments are not valid JSON" in result.error.message
    # Finite floats reach the function as the types' values, and back.
    result = run(rt, place, '{"tree": {"value": "1.5", "children": [{"value": 2}]}}')
    assert not result.is_error, result.error
    assert thaw(result.value) == {"value": 1.5, "children": [{"value": 2.0, "children": []}]}
    assert ran[-1][3] == Node(value=1.5, children=[Node(value=2.0)])
    # The models themselves keep their config outside the tool.
    assert math.isinf(Free(x="inf").x) and math.isinf(Loose(x="inf").x)  # type: ignore[arg-type]


class Person(BaseModel):
    weight: float


class Team(BaseModel):
    # (Field names the core schema also uses for data of its own.)
    members: list[Person] = []
    metadata: dict[str, float] = {}
    default: float = 0.0


class Tagged(BaseModel):
    kind: Literal["default"]
    x: float


class OtherTagged(BaseModel):
    kind: Literal["other"]
    x: float


class Meta(TypedDict):
    metadata: float


def test_a_non_finite_float_under_a_field_named_like_the_core_schemas_own_keys_fails_invalid_args(rt: Any) -> None:
    # (A field called members, metadata or default, or a tagged union's tag
    # "default", was taken for the schema's own data and kept pydantic's
    # allow_inf_nan: the body ran with inf.)
    ran: list[Any] = []

    @tool
    def rate(
        team: Team | None = None,
        tagged: Annotated[Tagged | OtherTagged, Field(discriminator="kind")] | None = None,
        meta: Meta | None = None,
    ) -> Any:
        ran.append((team, tagged, meta))
        return 1

    assert_not_finite(
        rt,
        rate,
        ('{"team": {"members": [{"weight": "inf"}]}}', "value.team.members[0].weight"),
        ('{"team": {"metadata": {"k": "nan"}}}', "value.team.metadata.k"),
        ('{"team": {"default": "-inf"}}', "value.team.default"),
        ('{"tagged": {"kind": "default", "x": "inf"}}', "value.tagged.x"),
        ('{"meta": {"metadata": "nan"}}', "value.meta.metadata"),
    )
    assert ran == []


def test_a_typed_tool_returning_negative_zero_returns_zero_not_a_broken_tool(rt: Any) -> None:
    # round(-0.027..., 1) is -0.0, and so is 0.0 * -1: ordinary values, returned as 0.0.
    # (Lossless JSON itself still refuses -0.0: a model that sends it is told so.)
    @tool
    def celsius(fahrenheit: float) -> float:
        return round((fahrenheit - 32) * 5 / 9, 1)

    @tool
    def scale(x: float, factor: float = 1.0) -> dict[str, float]:
        return {"x": x, "scaled": x * factor}

    result = run(rt, celsius, {"fahrenheit": 31.95})
    assert not result.is_error, result.error
    assert result.value == 0.0 and math.copysign(1.0, result.value) == 1.0
    assert [block.text for block in result.content] == ["0.0"]
    result = run(rt, scale, '{"x": 0.0, "factor": -1}')  # what a model sends, as text
    assert not result.is_error, result.error
    assert thaw(result.value) == {"x": 0.0, "scaled": 0.0}
    assert [math.copysign(1.0, v) for v in result.value.values()] == [1.0, 1.0]
    assert [block.text for block in result.content] == ['{"x":0.0,"scaled":0.0}']
    result = run(rt, scale, '{"x": -0.0}')
    assert result.is_error and result.error is not None
    assert result.error.message.endswith("arguments.x: -0.0 is not lossless JSON"), result.error.message


def test_bytes_that_are_not_utf8_fail_with_a_short_message_and_the_fix_in_the_exceptions_note(rt: Any) -> None:
    png = b"\x89PNG\r\n\x1a\n..."

    @tool
    def thumbnail(path: str) -> bytes:
        return png

    @tool
    async def thumbnails(path: str) -> dict[str, bytes]:
        return {"a.png": png}

    @tool
    def greeting() -> bytes:
        return b"hi"

    assert thaw(thumbnail.output.schema) == {"type": "string", "format": "binary"}
    for definition in (thumbnail, thumbnails):
        result = run(rt, definition, {"path": "a.png"})
        assert str(result.error.info.code) == "INVALID_TOOL_OUTPUT"
        message = f'tool "{definition.name}" returned invalid output: "value" holds bytes that are not UTF-8 text, '
        assert result.error.message == message + "which JSON cannot carry"  # the model's: short
        assert [block.text for block in result.content] == ["Error: " + result.error.message]
        error = result.error.exception
        assert isinstance(error, ToolOutputError) and str(error) == result.error.message
        [note] = error.__notes__
        assert note.startswith(f'tool "{definition.name}" returned bytes')
        assert "base64.b64encode(data).decode()" in note and "-> ImageBlock" in note and "ImageBlock(" in note
    result = run(rt, greeting, {})
    assert not result.is_error and result.value == "hi"


def test_a_sync_wrapper_of_an_async_function_is_awaited_and_its_value_validated(rt: Any) -> None:
    def logged(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return wrapper

    @tool
    @logged
    async def add_one(x: int) -> int:
        return x + 1

    @tool
    @logged
    async def wrong(x: int) -> int:
        return "no"  # type: ignore[return-value]

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine was never awaited"
        result = run(rt, add_one, {"x": 1})
        assert not result.is_error and result.value == 2
        failed = run(rt, wrong, {"x": 1})
    assert failed.is_error and str(failed.error.info.code) == "INVALID_TOOL_OUTPUT"
    assert failed.error.message == 'tool "wrong" returned invalid output: "value" must be an integer'


def test_a_string_annotation_that_is_no_expression_is_refused_naming_the_tool() -> None:
    def broken(x: "list[int") -> int:  # noqa: F722
        return 0

    with pytest.raises(RegistrationError) as caught:
        tool(broken)
    assert caught.value.tool == "broken"
    assert "list[int" in caught.value.message and "Python expression" in caught.value.message


def test_an_invalid_mapping_key_is_named_as_a_key_not_as_its_value(rt: Any) -> None:
    @tool
    def count(v: dict[int, str], w: dict[str, int] | None = None) -> int:
        return len(v)

    result = run(rt, count, {"v": {"a": "x", "1": "y"}, "w": {"[key]": "q"}})
    assert result.is_error and str(result.error.info.code) == "INVALID_ARGS"
    assert result.error.message == (
        'invalid arguments: key "a" of "value.v" must be an integer; "value.w["[key]"]" must be an integer'
    )
    assert not run(rt, count, {"v": {"1": "x"}}).is_error


def test_an_undeclared_property_of_a_dataclass_reads_as_for_any_object(rt: Any) -> None:
    @tool
    def total(pair: Pair) -> int:
        return pair.left + pair.right

    result = run(rt, total, {"pair": {"left": 1, "extra": 2}})
    assert result.is_error
    assert result.error.message == (
        'invalid arguments: "value.pair.extra" is not a declared property (additionalProperties: false)'
    )


def test_a_value_of_another_class_names_the_class_it_got(rt: Any) -> None:
    @tool
    def point() -> Point:
        return Other(x=1)  # type: ignore[return-value]

    @tool
    def number() -> int | str:
        return Pair(1)  # type: ignore[return-value]

    result = run(rt, point, {})
    assert result.is_error
    assert result.error.message == (
        'tool "point" returned invalid output: "value": Input should be a valid dictionary or instance of Point '
        "(got Other)"
    )
    result = run(rt, number, {})
    assert (
        result.error.message
        == 'tool "number" returned invalid output: "value" must be an integer or a string (got Pair)'
    )


def test_a_pydantic_field_as_default_gives_its_default_constraints_and_description(rt: Any) -> None:
    @tool
    def scaled(x: int = Field(3, ge=0, description="how many"), y: int = Field(default_factory=lambda: 7)) -> list[int]:
        return [x, y]

    assert thaw(scaled.parameters)["properties"] == {
        "x": {"default": 3, "description": "how many", "minimum": 0, "type": "integer"},
        "y": {"type": "integer"},
    }
    assert thaw(run(rt, scaled, {}).value) == [3, 7]
    refused = run(rt, scaled, {"x": -1})
    assert refused.is_error and refused.error.message == (
        'invalid arguments: "value.x": Input should be greater than or equal to 0'
    )


def test_a_method_taken_from_its_class_is_refused_rather_than_offering_self() -> None:
    class Search:
        def __init__(self) -> None:
            self.prefix = ">"

        def find(self, q: str) -> str:
            return self.prefix + q

    with pytest.raises(RegistrationError) as caught:
        tool(Search.find)
    assert "'self'" in caught.value.message and "tool(instance.method)" in caught.value.message
    bound = tool(Search().find)
    assert list(thaw(bound.parameters)["properties"]) == ["q"]


def test_tool_over_a_classmethod_or_staticmethod_is_refused_naming_the_tool_and_the_order_that_works() -> None:
    with pytest.raises(RegistrationError) as caught:

        class Clock:
            @tool  # type: ignore[arg-type]
            @classmethod
            def now(cls, zone: str) -> str:
                return zone

    assert str(caught.value) == (
        'cannot register tool "now": @tool got a classmethod, which has no class to be bound to yet: make the tool '
        "of it once the class exists, tool(MyClass.now)"
    )
    with pytest.raises(RegistrationError) as caught:

        class Maths:
            @tool  # type: ignore[arg-type]
            @staticmethod
            def double(x: int) -> int:
                return 2 * x

    assert str(caught.value) == (
        'cannot register tool "double": @tool got a staticmethod: write @staticmethod above @tool (or decorate the '
        "plain function)"
    )

    class Both:
        @classmethod
        def now(cls, zone: str) -> str:
            return zone

        @staticmethod
        @tool
        def double(x: int) -> int:
            return 2 * x

    assert list(thaw(tool(Both.now).parameters)["properties"]) == ["zone"]
    assert Both.double.name == "double" and Both.double(2) == 4


def test_an_emitted_listener_that_returns_a_coroutine_is_logged_and_its_coroutine_closed(library_logs: None) -> None:
    from loguru import logger

    ran: list[Any] = []

    async def observe(execution: Any, value: Any) -> None:
        ran.append(value)

    @functools.wraps(observe)
    def wrapped(execution: Any, value: Any) -> Any:
        return observe(execution, value)

    bus = EventBus()
    bus.on("tools/result", wrapped)
    bus.on("tools/result", lambda execution, value: ran.append(value))
    records: list[Any] = []
    sink = logger.add(lambda message: records.append(message.record), level="ERROR")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # closed: no "coroutine was never awaited"
            bus.emit("tools/result", None, 1)
    finally:
        logger.remove(sink)
    assert ran == [1]  # the plain listener after it still ran
    assert len(records) == 1
    assert "observe returned a coroutine" in records[0]["message"] and "plain def" in records[0]["message"]


def test_a_tools_change_listener_that_returns_a_coroutine_is_logged_and_the_change_stands(library_logs: None) -> None:
    from loguru import logger

    from dsh_actors import ToolRuntime

    async def changed() -> None:
        raise AssertionError("never runs")

    @functools.wraps(changed)
    def wrapped() -> Any:
        return changed()

    records: list[Any] = []
    sink = logger.add(lambda message: records.append(message.record), level="ERROR")
    try:
        with ToolRuntime() as rt, warnings.catch_warnings():
            warnings.simplefilter("error")  # closed: no "coroutine was never awaited"
            rt.events.on("tools/change", wrapped)

            @tool
            def ping() -> str:
                """Ping."""
                return "pong"

            rt.tools.register(ping)
            assert rt.tools.get("ping") is not None
    finally:
        logger.remove(sink)
    assert len(records) == 1
    assert "tools/change listener" in records[0]["message"] and "changed returned a coroutine" in records[0]["message"]


def test_a_tools_change_listener_returning_a_coroutine_is_closed_when_the_change_is_rolled_back_too(
    library_logs: None,
) -> None:
    import inspect

    from loguru import logger

    from dsh_actors import RegistrationError, ToolRuntime

    made: list[Any] = []

    async def changed() -> None:
        raise AssertionError("never runs")

    @functools.wraps(changed)
    def wrapped() -> Any:
        made.append(changed())
        return made[-1]

    def refuse() -> None:
        raise RuntimeError("no")

    records: list[Any] = []
    sink = logger.add(lambda message: records.append(message.record), level="ERROR")
    try:
        with ToolRuntime() as rt:
            rt.events.on("tools/change", wrapped)
            rt.events.on("tools/change", refuse)

            @tool
            def ping() -> str:
                """Ping."""
                return "pong"

            with pytest.raises(RegistrationError):
                rt.tools.register(ping)
    finally:
        logger.remove(sink)
    # Told of the change, then of its undoing: both coroutines closed.
    assert [inspect.getcoroutinestate(c) for c in made] == [inspect.CORO_CLOSED] * 2
    assert sum("returned a coroutine" in r["message"] for r in records) == 2


# --------------------------------------------------------------------------
# A new user's audit: content returned, values JSON cannot carry, messages
# --------------------------------------------------------------------------

PNG = "iVBORw0KGgoAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="


def test_a_returned_content_block_or_a_list_of_them_reaches_the_model_as_those_blocks(rt: Any) -> None:
    from dsh_actors import ImageBlock, TextBlock
    from dsh_actors.providers import anthropic

    image = ImageBlock(PNG, "image/png")

    @tool
    def screenshot() -> ImageBlock:
        return image

    @tool
    def gallery() -> list[TextBlock | ImageBlock]:
        return [TextBlock("two shots"), image, image]

    @tool
    def caption() -> TextBlock:
        return TextBlock("a cat")

    @tool
    def named() -> dict[str, ImageBlock]:  # not content: rendered as any value is
        return {"a": image}

    @tool(render=lambda args, value: [TextBlock("rendered")])
    def own() -> ImageBlock:
        return image

    shot = run(rt, screenshot, {})
    assert shot.content == (image,)
    assert thaw(shot.value) == {"data": PNG, "mime_type": "image/png", "type": "image"}
    assert run(rt, gallery, {}).content == (TextBlock("two shots"), image, image)
    assert run(rt, caption, {}).content == (TextBlock("a cat"),)
    assert run(rt, own, {}).content == (TextBlock("rendered"),)
    [as_json] = run(rt, named, {}).content
    assert type(as_json) is TextBlock and as_json.text.startswith('{"a":{"data":')

    # What the model is sent: the image as an image, its base64 once.
    rt.tools.register(screenshot)
    batch = rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c1", name="screenshot")]))
    [message] = anthropic.results(batch)
    [block] = message["content"]
    assert block["content"] == [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]
    assert str(message).count(PNG) == 1


def test_an_optional_content_return_sends_blocks_as_blocks_and_none_as_for_any_tool(rt: Any) -> None:
    from typing import Optional

    from dsh_actors import ImageBlock, TextBlock

    image = ImageBlock(PNG, "image/png")

    @tool
    def maybe(found: bool) -> ImageBlock | None:
        return image if found else None

    @tool
    def maybe_many(found: bool) -> Optional[list[TextBlock | ImageBlock]]:  # noqa: UP045 - the Optional spelling
        return [TextBlock("shots"), image] if found else None

    @tool
    def nothing() -> None:
        return None

    assert run(rt, maybe, {"found": True}).content == (image,)
    assert run(rt, maybe_many, {"found": True}).content == (TextBlock("shots"), image)
    none = run(rt, nothing, {}).content
    assert none == (TextBlock("null"),)
    assert run(rt, maybe, {"found": False}).content == none
    assert run(rt, maybe_many, {"found": False}).content == none


def test_a_part_json_cannot_carry_is_named_by_its_path_and_type_with_the_fix_in_a_note(rt: Any) -> None:
    import threading

    @tool
    def status():  # type: ignore[no-untyped-def]  # noqa: ANN202
        return {"ok": True, "lock": threading.Lock()}

    @tool
    def nested() -> Holder:
        return Holder(a=[1, {"run": len}])

    @tool
    def oops() -> Any:
        return ValueError("not found")

    @tool
    def wrapped() -> dict[str, Any]:
        return {"error": KeyError("x")}

    @tool
    def keyed() -> Any:  # a key that is not a str: its path does not read as key "1"
        return {"1": 0, 1: threading.Lock()}

    for definition, violation, note in (
        (status, '"value.lock" is a _thread.lock', 'returned a value whose "value.lock" is a _thread.lock: '),
        (nested, '"value.a[1].run" is a builtin_function_or_method', 'whose "value.a[1].run" is a builtin_'),
        (oops, '"value" is an exception (ValueError)', "returned an exception (ValueError) instead of raising it"),
        (wrapped, '"value.error" is an exception (KeyError)', 'whose "value.error" is an exception (KeyError)'),
        (keyed, '"value[<int key>]" is a _thread.lock', 'whose "value[<int key>]" is a _thread.lock'),
    ):
        result = run(rt, definition, {})
        assert str(result.error.info.code) == "INVALID_TOOL_OUTPUT"
        assert result.error.message == (
            f'tool "{definition.name}" returned invalid output: {violation}, which JSON cannot carry'
        )
        assert "<class" not in result.error.message
        [told] = result.error.exception.__notes__
        assert told.startswith(f'tool "{definition.name}" ') and note in told, told
        if "exception" in violation:
            assert "raise it" in told
        else:
            assert "Return what the model needs to know of it" in told

    # A value that dumps on its own, failed by its annotation's serializer: in the serializer's words.
    from pydantic import PlainSerializer

    def refuse(value: int) -> int:
        raise ValueError("no")

    @tool
    def odd() -> Annotated[int, PlainSerializer(refuse)]:
        return 3

    assert run(rt, odd, {}).error.message == (
        'tool "odd" returned invalid output: "value" cannot be turned into JSON: Error calling function `refuse`: '
        "ValueError: no"
    )


def test_a_decorators_wrapper_that_hid_the_signature_is_refused_naming_functools_wraps() -> None:
    def retry(fn: Any) -> Any:
        def inner(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return inner

    def fetch(url: str) -> str:
        return url

    with pytest.raises(RegistrationError) as caught:
        tool(retry(fetch))
    message = str(caught.value)
    assert message.startswith('cannot register tool "inner": parameters *args and **kwargs cannot be offered')
    assert "@functools.wraps(fn)" in message


def test_a_default_json_cannot_carry_is_left_out_of_the_schema_whatever_the_warning_filters(rt: Any) -> None:
    unset = object()
    got: list[Any] = []

    def since(a: int, since: object = unset) -> int:
        got.append(since)
        return a

    for action in ("error", "always"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter(action)
            definition = tool(since)
        assert caught == []
        assert thaw(definition.parameters)["properties"]["since"] == {}
        assert thaw(definition.parameters)["required"] == ["a"]
    assert run(rt, definition, {"a": 1}).value == 1
    assert run(rt, definition, {"a": 2, "since": "2026-01-01"}).value == 2
    assert got == [unset, "2026-01-01"]


def test_a_bad_return_annotation_is_told_the_return_values_fix_not_the_run_contexts() -> None:
    import socket

    def connect(host: str) -> socket.socket:
        raise AssertionError("never runs")

    with pytest.raises(RegistrationError) as caught:
        tool(connect)
    message = str(caught.value)
    assert message.startswith('cannot register tool "connect": the return annotation: ')
    assert "ToolRunContext" not in message and "return what the model needs to know of the object (its text" in message


def test_a_lambda_or_a_function_name_the_apis_refuse_is_refused_showing_the_name_option() -> None:
    with pytest.raises(RegistrationError) as caught:
        tool(lambda x: x)
    assert 'tool(name="my_tool")(lambda ...)' in str(caught.value)
    assert tool(name="double")(lambda x: 2 * x).name == "double"

    def météo() -> str:
        return "sun"

    with pytest.raises(RegistrationError) as caught:
        tool(météo)
    assert str(caught.value).endswith('@tool(name="m_t_o")')


def test_a_tuple_sent_too_short_names_its_missing_items_not_a_missing_property(rt: Any) -> None:
    @tool
    def span(pair: tuple[int, int], spans: dict[str, tuple[int, int]] | None = None) -> tuple[int, int]:
        return (pair[0],)  # type: ignore[return-value]

    result = run(rt, span, {"pair": [1], "spans": {"a": []}})
    assert result.is_error and str(result.error.info.code) == "INVALID_ARGS"
    assert result.error.message == (
        'invalid arguments: missing required item "value.pair[1]"; missing required item "value.spans.a[0]"; '
        'missing required item "value.spans.a[1]"'
    )
    result = run(rt, span, {"pair": [1, 2]})
    assert result.error.message == 'tool "span" returned invalid output: missing required item "value[1]"'


def test_a_field_alias_in_the_hint_is_the_name_offered_and_two_parameters_offered_as_one_are_refused(
    rt: Any,
) -> None:
    @tool
    def book(from_: Annotated[str, Field(alias="from")], to: str, when: str = Field("today", alias="on")) -> str:
        """Book a trip.

        Args:
            from_: Where from.
        """
        return f"{from_}-{to}-{when}"

    schema = thaw(book.parameters)
    assert list(schema["properties"]) == ["from", "to", "on"]
    assert schema["properties"]["from"] == {"description": "Where from.", "type": "string"}
    assert schema["required"] == ["from", "to"]
    assert run(rt, book, {"from": "A", "to": "B"}).value == "A-B-today"
    refused = run(rt, book, {"from_": "A", "to": "B"})
    assert refused.error.message == (
        'invalid arguments: missing required property "value.from"; '
        '"value.from_" is not a declared property (additionalProperties: false)'
    )

    def clash(a: int, b: Annotated[int, Field(alias="a")]) -> int:
        return a + b

    with pytest.raises(RegistrationError) as caught:
        tool(clash)
    assert str(caught.value) == (
        "cannot register tool \"clash\": parameters 'a' and 'b' are both offered to the model as \"a\" (Field(alias=...)); give each its own name"
    )


def test_a_tools_schema_refs_are_collected_once_not_once_per_failed_validation(
    rt: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (violations_of walked the whole core schema for its refs on every
    # failure that needed them: once per refused call, once per bad value.)
    import dsh_actors.typed._pydantic as typed_pydantic

    collect = typed_pydantic._collect_refs
    walks: list[Any] = []
    depth = [0]

    def counted(node: Any, definitions: dict[str, Any]) -> None:
        if depth[0] == 0:
            walks.append(node)
        depth[0] += 1
        try:
            collect(node, definitions)
        finally:
            depth[0] -= 1

    monkeypatch.setattr(typed_pydantic, "_collect_refs", counted)

    class Point(BaseModel):
        x: int
        near: Point | None = None

    @tool
    def pick(at: Point | None = None, n: int | None = None) -> int | None:
        """Pick."""
        return "q"  # type: ignore[return-value]

    for arguments, message in [
        ({"n": "a"}, '"value.n" must be an integer or null'),
        ({"at": {"x": 1, "near": {"x": "b"}}}, '"value.at.near.x" must be an integer'),
        ({"at": 1}, '"value.at" must be an object or null'),
    ]:
        assert run(rt, pick, arguments).error.message == f"invalid arguments: {message}"
    for _ in range(2):
        returned = run(rt, pick, {})
        assert returned.error.message == 'tool "pick" returned invalid output: "value" must be an integer or null'
    assert len(walks) == 2  # the arguments' schema and the return value's, each once
