"""The registry as actors: scope layers, tool-set resolution, and the facade.

* :class:`RegistryActor` (``rt.registry``) and :class:`ScopeActor`: the
  writers. Their public vocabulary is :mod:`dsh_actors.messages`.
* :class:`~.toolset_actor.ToolSetActor`: resolves one step's tool set.
* :class:`ToolsService` (``rt.tools``): the blocking facade.
* Re-exported from :mod:`dsh_actors.visibility` (layer 2, below the
  pipeline): :class:`RegistryState` / :class:`ScopeSnapshot` /
  :class:`Registration` / :class:`Contribution`, the published, immutable
  registry, and the read functions (:func:`visible`, :func:`lookup`,
  :func:`executable`, :func:`definitions`, :func:`schemas`,
  :func:`check_guards`, :func:`execution_mode`, :func:`select_executor`):
  pure, any thread, lock-free but for a committed read while a change is
  pending (``visibility.committed``); this is what the pipeline calls.
"""

from __future__ import annotations

from ..visibility import (
    RESERVED_NAMES,
    Condition,
    Contribution,
    ExecutionMode,
    Guard,
    Registration,
    RegistryState,
    ScopeSnapshot,
    check_guards,
    definition_mode,
    definitions,
    describe_scope,
    executable,
    execution_mode,
    has_guards,
    inherited,
    lookup,
    schemas,
    select_executor,
    visible,
)
from .actor import RegistryActor
from .scope import ScopeActor
from .service import ToolsService

__all__ = [
    "RESERVED_NAMES",
    "Condition",
    "Contribution",
    "ExecutionMode",
    "Guard",
    "Registration",
    "RegistryActor",
    "RegistryState",
    "ScopeActor",
    "ScopeSnapshot",
    "ToolsService",
    "check_guards",
    "definition_mode",
    "definitions",
    "describe_scope",
    "executable",
    "execution_mode",
    "has_guards",
    "inherited",
    "lookup",
    "schemas",
    "select_executor",
    "visible",
]
