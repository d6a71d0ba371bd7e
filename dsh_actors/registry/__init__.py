"""The registry as actors: scope layers, their snapshots, and the facade.

* :class:`RegistryState` / :class:`ScopeSnapshot` / :class:`Registration` /
  :class:`Contribution`: the published, immutable registry.
* The read functions (:func:`visible`, :func:`lookup`, :func:`executable`,
  :func:`definitions`, :func:`schemas`, :func:`check_guards`,
  :func:`execution_mode`, :func:`select_executor`): pure, lock-free, any
  thread; this is what the pipeline calls.
* :class:`RegistryActor` (``rt.registry``) and :class:`ScopeActor`: the
  writers. Their public vocabulary is :mod:`dsh_actors.messages`.
* :class:`ToolsService` (``rt.tools``): the blocking facade.
"""

from __future__ import annotations

from .state import (
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
