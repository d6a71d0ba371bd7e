"""The executor protocol: what a batch executor offers the registry.

The built-in implementation is :class:`~dsh_actors.scheduling.NativeExecutor`
(``scheduling/executor.py``); this module holds only the protocol and the
records that describe what an executor offers the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    from .definition import ToolDefinition
    from .model import ToolBatchInput, ToolBatchResult

__all__ = ["ToolExecutor", "ToolModelInput", "ToolPromptSection"]


@dataclass(frozen=True, slots=True)
class ToolPromptSection:
    """Guidance an executor contributes to the system prompt (PTC lists
    the callable tools as Python signatures)."""

    title: str
    content: str


@dataclass(frozen=True, slots=True)
class ToolModelInput:
    """What the model is offered: tool ``schemas`` (``{"name",
    "description", "parameters"}`` dicts), the ``known_names`` used to
    check the model's calls, and prompt ``sections`` that depend on the
    described tools (PTC lists them as Python signatures); an executor's
    fixed guidance is its ``sections`` attribute."""

    schemas: tuple[dict[str, Any], ...]
    known_names: tuple[str, ...]
    sections: tuple[ToolPromptSection, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "schemas", tuple(self.schemas))
        object.__setattr__(self, "known_names", tuple(self.known_names))
        object.__setattr__(self, "sections", tuple(self.sections))


@runtime_checkable
class ToolExecutor(Protocol):
    """A batch executor.

    ``describe(tools)`` gives the model-facing input for the visible tool
    definitions; ``execute(batch)`` runs a whole batch and returns one
    result per input call, in input order, including skipped calls on abort,
    and never returns while started work still runs. It may block: the
    runtime calls it on a worker thread. Optional members: ``sections``
    (prompt guidance), ``bind(runtime)`` (called once when the executor is
    installed with ``set_executor``), and ``submit(batch) ->
    concurrent.futures.Future`` (a non-blocking start, preferred when present).
    """

    def describe(self, tools: Sequence[ToolDefinition]) -> ToolModelInput: ...

    def execute(self, batch: ToolBatchInput) -> ToolBatchResult: ...
