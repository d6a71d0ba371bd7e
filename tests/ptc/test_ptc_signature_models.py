"""Signatures of ``@tool`` tools: their pydantic schemas (``$defs``/``$ref``,
``anyOf`` with null, ``enum``, ``default``, nested and recursive models)
become precise Python types, models listed once as ``TypedDict``s."""

from __future__ import annotations

import ast
import enum
from typing import Any, Literal

from pydantic import BaseModel

from dsh_actors import tool
from executors.ptc import PtcExecutor
from executors.ptc.signatures import bindings, render_signatures, type_hint


class Point(BaseModel):
    x: int
    y: int = 0


class Line(BaseModel):
    start: Point
    end: Point
    label: str | None = None


class Node(BaseModel):
    name: str
    children: list[Node] = []


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def header(listing: str, name: str) -> str:
    (line,) = [line for line in listing.splitlines() if line.startswith(f"async def {name}(")]
    return line


def test_a_model_parameter_and_a_list_of_models_name_one_typed_dict() -> None:
    @tool
    def plot(origin: Point, points: list[Point]) -> int:
        """Plot points."""
        return len(points)

    listing = render_signatures(bindings([plot]))
    assert listing == (
        "class Point(TypedDict):\n"
        "    x: int\n"
        "    y: NotRequired[int]  # default: 0\n"
        "\n"
        "async def plot(origin: Point, points: list[Point]) -> int:\n"
        '    """Plot points."""'
    )


def test_optional_values_literals_enums_and_defaults_keep_their_types() -> None:
    @tool
    def paint(
        color: Color,
        mode: Literal["fast", "full"] = "fast",
        label: str | None = None,
        size: int | None = 3,
        tags: dict[str, int] | None = None,
        where: Point | None = None,
    ) -> str:
        """Paint."""
        return ""

    (binding,) = bindings([paint])
    assert binding.signature.splitlines()[0] == (
        "async def paint(color: Literal['red', 'blue'], mode: Literal['fast', 'full'] = 'fast', "
        "label: str | None = None, size: int | None = 3, tags: dict[str, int] | None = None, "
        "where: Point | None = None) -> str:"
    )
    # only mode rejects null: None there means "use the default"
    assert binding.omit_none == ("mode",)


def test_a_nested_model_lists_every_class_it_reaches_once() -> None:
    @tool
    def draw(line: Line, more: list[Line] | None = None) -> Line:
        """Draw a line."""
        return line

    listing = render_signatures(bindings([draw]))
    assert listing == (
        "class Line(TypedDict):\n"
        "    start: Point\n"
        "    end: Point\n"
        "    label: NotRequired[str | None]  # default: None\n"
        "\n"
        "class Point(TypedDict):\n"
        "    x: int\n"
        "    y: NotRequired[int]  # default: 0\n"
        "\n"
        "async def draw(line: Line, more: list[Line] | None = None) -> Line:\n"
        '    """Draw a line."""'
    )


def test_a_recursive_model_refers_to_its_own_class() -> None:
    @tool
    def walk(tree: Node) -> int:
        """Count the nodes."""
        return 1

    listing = render_signatures(bindings([walk]))
    assert listing.startswith(
        "class Node(TypedDict):\n    name: str\n    children: NotRequired[list[Node]]  # default: []\n\n"
        "async def walk(tree: Node) -> int:"
    )


def test_a_cycle_of_plain_refs_is_any_and_not_endless() -> None:
    root = {"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "string"}]}}}
    assert type_hint({"$ref": "#/$defs/A"}, root) == "Any"
    assert type_hint({"$ref": "#/$defs/Missing"}, root) == "Any"
    assert type_hint({"type": ["string", "null"]}) == "str | None"
    assert type_hint({"anyOf": [{"type": "null"}, {"type": "integer"}]}) == "int | None"
    assert type_hint({"allOf": [{"$ref": "#/$defs/C"}]}, {"$defs": {"C": {"enum": [1, 2]}}}) == "Literal[1, 2]"
    assert type_hint({"type": "object", "additionalProperties": {"type": "number"}}) == "dict[str, float]"


def test_tools_sharing_a_model_list_it_once_and_same_titled_models_get_distinct_names() -> None:
    class Other(BaseModel):
        lat: float

    Other.__name__ = "Point"  # a different model with the same title

    @tool
    def first(p: Point) -> None:
        """First."""

    @tool
    def second(p: Point, q: Other) -> None:
        """Second."""

    listing = render_signatures(bindings([first, second]))
    assert listing.count("class Point(TypedDict):") == 1
    assert "class Point_2(TypedDict):\n    lat: float" in listing
    assert header(listing, "second") == "async def second(p: Point, q: Point_2) -> None:"


def test_model_and_field_names_that_are_not_identifiers_stay_valid_python() -> None:
    parameters = {
        "type": "object",
        "properties": {"spec": {"$ref": "#/$defs/my-spec"}},
        "required": ["spec"],
        "$defs": {
            "my-spec": {
                "title": "my-spec",
                "type": "object",
                "properties": {"file-path": {"type": "string"}, "class": {"type": "integer"}},
                "required": ["file-path"],
            }
        },
    }
    from .test_ptc_describe import raw

    listing = render_signatures(bindings([raw("odd", parameters)]))
    assert listing.startswith(
        "my_spec = TypedDict('my_spec', {\n    'file-path': str,\n    'class': NotRequired[int],\n})\n\n"
        "async def odd(spec: my_spec) -> Any:"
    )
    ast.parse(listing)


def test_the_described_run_code_lists_the_models_before_the_signatures() -> None:
    @tool
    def walk(tree: Node, start: Point | None = None) -> int:
        """Count the nodes."""
        return 1

    executor = PtcExecutor()
    try:
        (schema,) = executor.describe([walk]).schemas
    finally:
        executor.close()
    description: Any = schema["description"]
    block = description.split("```python\n", 1)[1].split("\n```", 1)[0]
    ast.parse(block)
    assert (
        block.index("class Node(TypedDict):") < block.index("class Point(TypedDict):") < block.index("async def walk")
    )
    assert "async def walk(tree: Node, start: Point | None = None) -> int:" in block
