"""``@tool``'s JSON forms: a returned value is dumped as its output schema
shows it (by alias; excluded, computed and serialized fields as pydantic
dumps them) and its JSON form passes the output check; a ``Literal`` of
enum members takes the values its schema shows; messages name no Python
class; refusals name the fix."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from typing import Annotated, Any, Literal

import pytest
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    computed_field,
    field_serializer,
    model_serializer,
)
from pydantic.alias_generators import to_camel
from typing_extensions import TypedDict

from dsh_actors import Accept, RegistrationError, ToolBatchInput, ToolCall, ToolDefinition, thaw, tool
from dsh_actors.definition import own_validators


def run(rt: Any, definition: ToolDefinition, arguments: Any) -> Any:
    """Register ``definition``, run one call of it and unregister it; the
    call's result."""
    unregister = rt.tools.register(definition)
    try:
        result = rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c1", name=definition.name, arguments=arguments)]))
    finally:
        unregister()
    return result.results[0].result


class Person(BaseModel):
    first_name: str = Field(alias="firstName")
    age: int = Field(serialization_alias="Age")
    password: str = Field(exclude=True)
    nick: str = Field("", validation_alias=AliasChoices("nick", "nickname"))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def initial(self) -> str:
        return self.first_name[:1]


class Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, extra="forbid")
    last_seen: dt.datetime

    @field_serializer("last_seen")
    def _day(self, value: dt.datetime) -> str:
        return value.strftime("%d %b %Y")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def seen_twice(self) -> bool:
        return False


class Badge(BaseModel):
    n: int

    @model_serializer
    def _text(self) -> str:
        return f"#{self.n}"


class Row(TypedDict):
    row_id: Annotated[int, Field(alias="rowId")]
    label: Annotated[int, PlainSerializer(lambda v: f"L{v}", return_type=str)]


class Square(BaseModel):
    kind: Literal["square"] = Field("square", serialization_alias="Kind")
    side: int


class Circle(BaseModel):
    kind: Literal["circle"] = Field("circle", serialization_alias="Kind")


@dataclasses.dataclass
class Seeded:
    total: int
    seed: dataclasses.InitVar[int]
    doubled: int = dataclasses.field(init=False, default=0)

    def __post_init__(self, seed: int) -> None:
        self.total += seed
        self.doubled = 2 * self.total


def test_a_returned_value_is_dumped_as_its_output_schema_shows_it_and_its_json_form_passes(rt: Any) -> None:
    @tool
    def person() -> list[Person]:
        return [Person(firstName="Ann", age=3, password="secret", nickname="A")]

    @tool
    def camel() -> Camel:
        return Camel(lastSeen=dt.datetime(2024, 5, 1, tzinfo=dt.UTC))

    @tool
    def badge() -> Badge:
        return Badge(n=7)

    @tool
    def row() -> Row:
        return {"row_id": 1, "label": 2}  # (a TypedDict's keys are its fields' names)

    @tool
    def seeded() -> Seeded:
        return Seeded(total=1, seed=2)

    @tool
    def shape() -> Annotated[Square | Circle, Field(discriminator="kind")]:
        return Square(side=2)

    expected = {
        person: [{"firstName": "Ann", "Age": 3, "nick": "A", "initial": "A"}],
        camel: {"lastSeen": "01 May 2024", "seenTwice": False},
        badge: "#7",
        row: {"rowId": 1, "label": "L2"},
        seeded: {"total": 3, "doubled": 6},
        shape: {"Kind": "square", "side": 2},  # (its tag dumped under another name than it is read by)
    }
    # The output schema names what the value holds.
    assert list(thaw(person.output.schema)["$defs"]["Person"]["properties"]) == ["firstName", "Age", "nick", "initial"]
    assert list(thaw(camel.output.schema)["properties"]) == ["lastSeen", "seenTwice"]
    for definition, value in expected.items():
        result = run(rt, definition, {})
        assert not result.is_error, (definition.name, result.error)
        assert thaw(result.value) == value
        # Its JSON form is what the output check takes (a cached value given back, say).
        own = own_validators(definition)
        assert own is not None and own.output.validate(result.value) == []

    def cached(execution: Any, result: Any, next_: Any) -> Any:
        next_()
        return Accept(value=thaw(expected[{d.name: d for d in expected}[execution.name]]))

    rt.events.on("tools/post-execute", cached)
    for definition, value in expected.items():
        assert thaw(run(rt, definition, {}).value) == value


class ByName(BaseModel):
    # Read by name only; dumped by alias, as its output schema shows it.
    model_config = ConfigDict(validate_by_alias=False, validate_by_name=True)
    first: str = Field(alias="firstName")


class HoldsByName(BaseModel):
    inner: ByName


def test_a_model_read_by_name_only_is_still_checked_in_the_form_its_dump_holds(rt: Any) -> None:
    # (Its validate_by_alias=False came along into the output check, which
    # then looked for "first" in a dump that holds "firstName".)
    @tool
    def by_name() -> HoldsByName:
        return HoldsByName(inner=ByName(first="a"))

    result = run(rt, by_name, {})
    assert not result.is_error, result.error
    assert thaw(result.value) == {"inner": {"firstName": "a"}}


class Kind(enum.Enum):
    CAT = "cat"
    DOG = "dog"


class Shade(enum.StrEnum):
    DARK = "dark"


class Cat(BaseModel):
    kind: Literal[Kind.CAT] = Kind.CAT
    lives: int = 9


class Dog(BaseModel):
    kind: Literal[Kind.DOG]


def test_a_literal_of_enum_members_takes_the_values_its_schema_shows_and_gives_the_members(rt: Any) -> None:
    @tool
    def adopt(
        pet: Annotated[Cat | Dog, Field(discriminator="kind")],
        kind: Literal[Kind.CAT, Kind.DOG] = Kind.CAT,
        shade: Literal[Shade.DARK] = Shade.DARK,
    ) -> Cat | Dog:
        assert type(pet.kind) is Kind and type(kind) is Kind and type(shade) is Shade
        return pet

    schema = thaw(adopt.parameters)
    assert schema["properties"]["kind"]["enum"] == ["cat", "dog"]
    assert schema["$defs"]["Cat"]["properties"]["kind"]["const"] == "cat"
    result = run(rt, adopt, {"pet": {"kind": "dog"}, "kind": "dog", "shade": "dark"})
    assert not result.is_error, result.error
    assert thaw(result.value) == {"kind": "dog"}
    assert thaw(run(rt, adopt, {"pet": {"kind": "cat"}}).value) == {"kind": "cat", "lives": 9}
    # Told as values in JSON, never as the members' reprs (<Kind.CAT: 'cat'>).
    refused = run(rt, adopt, {"pet": {"kind": "cow"}, "kind": "cow", "shade": "light"})
    assert refused.error.message == (
        'invalid arguments: "value.pet.kind" must be one of ["cat","dog"]; "value.kind" must be one of ["cat","dog"]; '
        '"value.shade" must be "dark"'
    )


def test_a_path_or_bytes_that_is_no_string_is_told_so_without_a_python_class(rt: Any) -> None:
    import pathlib

    @tool
    def save(path: pathlib.Path, data: bytes) -> str:
        return f"{path}:{data!r}"

    assert run(rt, save, {"path": "/tmp/a", "data": "hi"}).value == "/tmp/a:b'hi'"
    refused = run(rt, save, {"path": 3, "data": 4})
    assert refused.error.message == 'invalid arguments: "value.path" must be a string; "value.data" must be a string'


def test_a_type_defined_below_the_function_or_a_generator_is_refused_naming_the_fix() -> None:
    def later(result: Later) -> int:  # type: ignore[name-defined]  # noqa: F821
        return 0

    with pytest.raises(RegistrationError) as caught:
        tool(later)
    assert caught.value.message == (
        "cannot register tool \"later\": cannot read the function's signature and type hints (name 'Later' is not "
        "defined); define Later before the function, where its module sees it (@tool reads the annotations as it "
        "decorates the function: a class defined below it is not there yet), or import it"
    )

    def lines(n: int) -> Any:
        yield from range(n)

    async def chunks(n: int) -> Any:
        yield n

    for function, kind in ((lines, "a generator"), (chunks, "an async generator")):
        with pytest.raises(RegistrationError) as caught:
            tool(function)
        assert caught.value.message == (
            f'cannot register tool "{function.__name__}": @tool needs a function that returns its value, not {kind}: '
            "collect what it yields and return that (a list, or the text joined), one value for the call"
        )
