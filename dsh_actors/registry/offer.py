"""What the model is offered: the agent's executor describing what the agent
may call (``rt.tools.model_tools``).

A pure read over the published snapshots, like the other reads in
:mod:`dsh_actors.visibility`, plus one call of the executor's ``describe`` on the calling
thread. It reads what decides the agent's calls
(:func:`~dsh_actors.visibility.callable_view`): the committed registry, so
the model is never offered a change that a ``tools/change`` listener may
still roll back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import (
    ExecutorUnavailableError,
    InvalidTypeError,
    LosslessJsonError,
)
from ..executor_protocol import ToolModelInput
from ..json import thaw
from ..visibility import RegistryState, callable_view, describe_scope, is_callable, select_executor

if TYPE_CHECKING:  # pragma: no cover
    from ..definition import ToolDefinition
    from ..model import Agent
    from ..toolset import ResolvedToolSet

__all__ = ["callable_definitions", "model_tools"]


def callable_definitions(
    state: RegistryState, agent: Agent | None, tool_set: ResolvedToolSet | None = None
) -> list[ToolDefinition]:
    """The definitions a call by ``agent`` may run, in registration order:
    with ``tool_set``, what it admits; without one, every registration
    ``agent`` sees in the committed registry that is not conditional (a
    conditional tool is callable only in a step that admitted it)."""
    return [reg.definition for reg in callable_view(state, agent, tool_set).values() if is_callable(reg, tool_set)]


def model_tools(state: RegistryState, agent: Agent | None, tool_set: ResolvedToolSet | None = None) -> ToolModelInput:
    """The executor that would run ``agent``'s next batch (the nearest on its
    chain) describing :func:`callable_definitions`: its ``ToolModelInput``,
    with fresh, detached schema dicts. Raises ``ExecutorUnavailableError``
    when no executor is set on the chain, and ``TypeError`` naming the
    executor when its ``describe`` returns something malformed. A
    ``tool_set`` resolved by another runtime or for another agent, or
    disposed, is refused (:meth:`ResolvedToolSet.check_usable`, as a batch's
    intake refuses one: it admits nothing, so the model would be offered no
    tool at all, and make no call that the batch could refuse)."""
    if tool_set is not None:
        tool_set.check_usable(
            agent,
            "the tool_set",
            "the tools are offered to",
            "pass the agent the set was resolved for (and run its batch as that agent)",
            state=state,
        )
    executor = select_executor(state, agent)
    if executor is None:
        raise ExecutorUnavailableError(describe_scope(agent))
    described = executor.describe(callable_definitions(state, agent, tool_set))
    if not isinstance(described, ToolModelInput):
        raise InvalidTypeError(
            f"{type(executor).__qualname__}.describe() must return a ToolModelInput, not {type(described).__qualname__}"
        )
    return ToolModelInput(
        schemas=tuple(_checked_schema(executor, i, schema) for i, schema in enumerate(described.schemas)),
        known_names=described.known_names,
        sections=described.sections,
    )


def _checked_schema(executor: Any, index: int, schema: Any) -> dict[str, Any]:
    where = f"{type(executor).__qualname__}.describe() schemas[{index}]"
    if not isinstance(schema, Mapping):
        raise InvalidTypeError(
            f"{where} must be a {{name, description, parameters}} dict, not {type(schema).__qualname__}"
        )
    name, description, parameters = schema.get("name"), schema.get("description"), schema.get("parameters")
    if type(name) is not str or not name:
        raise InvalidTypeError(f"{where}: name must be a non-empty str")
    if type(description) is not str:
        raise InvalidTypeError(f"{where} ({name}): description must be a str")
    if not isinstance(parameters, Mapping):
        raise InvalidTypeError(f"{where} ({name}): parameters must be a JSON Schema object")
    try:
        detached = thaw(parameters)
    except LosslessJsonError as exc:
        raise InvalidTypeError(f"{where} ({name}): parameters are not lossless JSON: {exc}") from None
    return {"name": name, "description": description, "parameters": detached}
