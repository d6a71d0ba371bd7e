"""A ``@tool`` definition's ``execute`` pickles as what it was made of (the
function, the tool's name, the resolved hints; a module-level one as a
reference), never as its pydantic-core validators, so ``RayExecutor``
can ship it (cloudpickle) and the copy validates as the original."""

from __future__ import annotations

import asyncio
import copy
import pickle
import types
from typing import Any

import pytest
from pydantic import BaseModel
from ray import cloudpickle

from dsh_actors import ToolArgsError, ToolOutputError, ToolRunContext, tool
from dsh_actors.definition import OWN_VALIDATORS, is_async_callable
from dsh_actors.json import materialize

PICKLERS = [pytest.param(cloudpickle, id="cloudpickle"), pytest.param(pickle, id="pickle")]


class Point(BaseModel):
    x: int
    y: int


class Deps:
    factor = 10


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(name="scaled")
async def manhattan(p: Point, ctx: ToolRunContext[Deps]) -> int:
    """Scaled distance from the origin."""
    return (abs(p.x) + abs(p.y)) * ctx.deps.factor


def _sloppy(n: int) -> int:
    return "many" if n > 9 else n  # type: ignore[return-value]


sloppy = tool(name="sloppy")(_sloppy)  # module-level, but not at the function's name

CTX: Any = types.SimpleNamespace(deps=Deps())


def args(**values: Any) -> Any:
    return materialize(values, "value")


def round_trip(pickler: Any, execute: Any) -> Any:
    return pickler.loads(pickler.dumps(execute))


def error_of(execute: Any, arguments: Any) -> Exception:
    with pytest.raises(Exception) as caught:  # noqa: PT011 - compared below, class and message
        execute(arguments, CTX)
    return caught.value


@pytest.mark.parametrize("pickler", PICKLERS)
def test_a_module_level_tools_execute_pickles_as_a_reference_to_its_definition(pickler: Any) -> None:
    for definition in (add, manhattan):
        assert round_trip(pickler, definition.execute) is definition.execute
    loaded = round_trip(pickler, add.execute)
    assert loaded(args(a=1, b=2), CTX) == 3
    bad = error_of(loaded, args(a="x", b=2))
    assert type(bad) is ToolArgsError and bad.message == 'invalid arguments: "value.a" must be an integer'


@pytest.mark.parametrize("pickler", PICKLERS)
def test_a_tool_made_by_calling_tool_is_decorated_again_where_it_is_loaded(pickler: Any) -> None:
    loaded = round_trip(pickler, sloppy.execute)
    assert loaded is not sloppy.execute and loaded.__wrapped__ is _sloppy
    assert loaded(args(n=3), CTX) == 3
    # Its output is validated as the original's is, under the tool's name.
    wrong = error_of(loaded, args(n=10))
    assert type(wrong) is ToolOutputError and wrong.name == "sloppy"
    assert str(wrong) == str(error_of(sloppy.execute, args(n=10)))
    bad = error_of(loaded, args(n=1.5))
    assert type(bad) is ToolArgsError and str(bad) == str(error_of(sloppy.execute, args(n=1.5)))


def make_local_tool(offset: int) -> Any:
    class Shift(BaseModel):  # only this frame sees it: its annotation is the string "Shift"
        by: int

    @tool
    async def shift(p: Point, s: Shift, ctx: ToolRunContext[Deps]) -> Point:
        """Shift a point."""
        if s.by < 0:
            return "left"  # type: ignore[return-value]
        return Point(x=p.x + s.by + offset, y=p.y * ctx.deps.factor)

    return shift


def test_a_local_tools_execute_round_trips_through_cloudpickle_with_the_same_validation() -> None:
    shift = make_local_tool(offset=100)
    loaded = round_trip(cloudpickle, shift.execute)
    assert loaded is not shift.execute and type(loaded) is type(shift.execute)
    assert is_async_callable(loaded) and loaded.__qualname__ == "tool('shift').execute"
    assert getattr(loaded, OWN_VALIDATORS).parameters.schema == shift.parameters
    value = asyncio.run(loaded(args(p={"x": 1, "y": 2}, s={"by": 3}), CTX))
    assert value == {"x": 104, "y": 20}  # the captured offset and ctx.deps, the model dumped as JSON

    def failure(execute: Any, arguments: Any) -> Exception:
        with pytest.raises(Exception) as caught:  # noqa: PT011 - compared below
            asyncio.run(execute(arguments, CTX))
        return caught.value

    for arguments in (args(p={"x": 1}, s={"by": "far"}), args(p={"x": 1, "y": 2}, s={"by": 1}, extra=1)):
        bad = failure(loaded, arguments)
        assert type(bad) is ToolArgsError and str(bad) == str(failure(shift.execute, arguments))
    wrong = failure(loaded, args(p={"x": 1, "y": 2}, s={"by": -1}))
    assert type(wrong) is ToolOutputError and str(wrong) == str(
        failure(shift.execute, args(p={"x": 1, "y": 2}, s={"by": -1}))
    )
    # Loaded again, it pickles again; plain pickle cannot take a local function.
    assert asyncio.run(round_trip(cloudpickle, loaded)(args(p={"x": 0, "y": 0}, s={"by": 0}), CTX)) == {
        "x": 100,
        "y": 0,
    }
    with pytest.raises((pickle.PicklingError, AttributeError), match="local"):
        pickle.dumps(shift.execute)


def test_copies_of_an_execute_are_itself_as_for_a_function() -> None:
    shift = make_local_tool(offset=0)
    assert copy.copy(shift.execute) is shift.execute
    assert copy.deepcopy(shift.execute) is shift.execute
