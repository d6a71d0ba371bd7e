"""The registry actor's vocabulary: what ``rt.registry`` understands.

Every record is frozen. Its first field may be given positionally
(``ExecuteBatch(batch)``), the others by keyword. Each request carries an optional ``reply``: a
``concurrent.futures.Future`` that the registry completes with the reply (or
the error) described in the record's docstring. With pykka's
``rt.registry.ask(message)`` the same outcome also comes back as the ask's
answer, so both of these work and agree::

    result = rt.registry.ask(ExecuteBatch(batch=batch), timeout=30)

    future = concurrent.futures.Future()
    rt.registry.tell(ExecuteBatch(batch=batch, reply=future))
    result = future.result(timeout=30)

The registry never blocks on a request: writes are forwarded to the scope's
own actor, batches to the selected executor, resolutions to a fresh
tool-set actor, and each answers when it is done. If the runtime stops first,
``reply`` fails with ``RuntimeError("the ToolRuntime is stopped")``.

:class:`~dsh_actors.registry.ToolsService` is a thin facade over exactly
these messages. Unlike the facade, a raw ``ask`` returns the registry's
handles (:class:`Registration`, :class:`Contribution`) rather than disposers:
undo an effect with :class:`Unregister` (or :class:`RegisterAll`'s
``replacing``) / :class:`Retract`. (Both handle
types live in :mod:`dsh_actors.registry`.) Do not send a
write and wait for it from inside a ``tools/change`` listener (it runs on a
scope actor's thread): the facade refuses that with a clear error; a raw ask
would wait out its timeout.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:  # pragma: no cover
    from .definition import ToolDefinition
    from .model import Agent, ToolActivationContext, ToolBatchInput, ToolBatchResult, ToolRestriction
    from .toolset import ResolvedToolSet
    from .visibility import Condition, Contribution, Registration

__all__ = [
    "AddGuard",
    "ExecuteBatch",
    "Register",
    "RegisterAll",
    "RegistryMessage",
    "ResolveToolSet",
    "Restrict",
    "Retract",
    "SetExecutor",
    "Unregister",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Register:
    """Register a tool in a layer. Reply: the :class:`Registration`.

    Fails with ``RegistrationError`` naming the tool: every problem
    ``validate_definition`` finds, the reserved name ``run_code``, a
    duplicate name in the same layer, a ``when`` that is not callable, or a
    ``tools/change`` listener that raised (the registration is rolled back,
    the listener's exception is the error's ``__cause__``).
    """

    definition: ToolDefinition = field(kw_only=False)
    """The definition to register (borrowed, compared by identity)."""

    scope: Agent | None = None
    """The layer: an agent's scope, or ``None`` for the global layer."""

    when: Condition | None = None
    """Optional activation condition (sync or ``async def``), evaluated once
    per step by ``ResolveToolSet``."""

    reply: Future[Registration] | None = None
    """Completed with the reply, or the error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterAll:
    """Register several tools in a layer and withdraw registrations of it,
    as ONE change: a batch's lookup, what the model is offered and a
    resolution see the layer as it was before or as it is after, never a
    part of it (a tool replaced by one of the same name is never missing),
    and ``tools/change`` is announced once. :class:`Register` and
    :class:`Unregister` are this change for one tool. Reply: the
    :class:`Registration` of each definition, in order.

    Fails with ``RegistrationError``, changing nothing: when definitions are
    refused (for each, what :class:`Register` would refuse, or its name
    given twice; ``errors`` holds one ``RegistrationError`` per refused
    definition), when ``replacing`` holds something that is not a
    registration of this layer, or when a ``tools/change`` listener raised
    (rolled back, its exception the ``__cause__``).
    """

    definitions: tuple[ToolDefinition, ...] = field(kw_only=False)
    """The definitions to register (borrowed, compared by identity)."""

    scope: Agent | None = None
    """The layer: an agent's scope, or ``None`` for the global layer."""

    when: Condition | None = None
    """Optional activation condition of every one of them (see :class:`Register`)."""

    replacing: tuple[Registration, ...] = ()
    """Registrations of this layer to withdraw in the same change (what
    :class:`Register` or this message replied); one already gone is
    skipped. A definition may take the name of one of them."""

    reply: Future[tuple[Registration, ...]] | None = None
    """Completed with the reply, or the error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Unregister:
    """Remove exactly ``registration``. Reply: ``True`` if it was removed,
    ``False`` if it was already gone. Fails with ``RegistrationError`` (the
    removal rolled back) if a ``tools/change`` listener raised."""

    registration: Registration = field(kw_only=False)
    """What :class:`Register` replied."""

    reply: Future[bool] | None = None
    """Completed with the reply, or the error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Restrict:
    """Add a restriction to ``scope``'s view of what it inherits. Reply: the
    :class:`Contribution` (retract it to lift exactly this restriction).

    Fails with ``RegistrationError`` for the global layer, an empty filter,
    ``run_code``, or a name ``scope`` does not inherit (the message lists
    the known names); and, rolled back, if a ``tools/change`` listener raised.
    """

    restriction: ToolRestriction = field(kw_only=False)
    """The filter; its names are copied when the message is handled."""

    scope: Agent | None
    """The restricted scope (``None`` is rejected: the global layer inherits nothing)."""

    reply: Future[Contribution] | None = None
    """Completed with the reply, or the error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AddGuard:
    """Add a monotonic guard ``fn(execution) -> str | None`` to a layer.
    Reply: the :class:`Contribution`. Emits no ``tools/change`` (visibility
    does not change)."""

    guard: Callable[..., Any] = field(kw_only=False)
    """The guard. It runs on the thread that prepares a call."""

    scope: Agent | None = None
    """The layer (``None``: global)."""

    reply: Future[Contribution] | None = None
    """Completed with the reply, or the error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SetExecutor:
    """Contribute an executor to a layer (the last contribution of a layer
    wins; retracting it restores the one before). Reply: the
    :class:`Contribution`. The executor's ``bind(runtime)``, if it has one,
    runs once per runtime before it becomes selectable. Emits no
    ``tools/change``."""

    executor: Any = field(kw_only=False)
    """An object with ``describe(tools)`` and ``submit(batch) ->
    concurrent.futures.Future`` or a blocking ``execute(batch)``."""

    scope: Agent | None = None
    """The layer (``None``: the deployment default)."""

    reply: Future[Contribution] | None = None
    """Completed with the reply, or the error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Retract:
    """Undo exactly one :class:`Contribution`: lift a restriction (emits
    ``tools/change``, rolled back if a listener raises), remove a guard, or
    withdraw an executor. Reply: ``True`` if it was in place, else ``False``."""

    contribution: Contribution = field(kw_only=False)
    """What :class:`Restrict`, :class:`AddGuard` or :class:`SetExecutor` replied."""

    reply: Future[bool] | None = None
    """Completed with the reply, or the error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecuteBatch:
    """Run a batch on the executor nearest to ``batch.agent`` (selected when
    the message is handled). Reply: the executor's ``ToolBatchResult``; fails
    with ``TypeError``/``ValueError`` for a malformed batch before anything
    runs (a field of the wrong type, two calls with one id, a ``log``
    without an agent), with ``ExecutorUnavailableError`` when no scope on
    the chain has one, or with whatever the executor fails with."""

    batch: ToolBatchInput = field(kw_only=False)
    """The model's calls, with their agent, signal, tool set and log step."""

    reply: Future[ToolBatchResult] | None = None
    """Completed with the reply, or the error."""

    caller_context: contextvars.Context = field(default_factory=contextvars.copy_context)
    """The contextvars the batch's hooks run in (each call in a copy),
    unless ``batch.context`` is set: by default the context current where
    this message is made."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolveToolSet:
    """Evaluate every activation condition visible to ``context.agent`` once,
    on a fresh tool-set actor. Reply: the :class:`ResolvedToolSet` (dispose
    it after the step's batch). Fails with ``AbortError`` if
    ``context.signal`` aborts first, or ``ToolPolicyError`` (the
    condition's exception as ``__cause__``) if a condition raises; either
    way no set is published."""

    context: ToolActivationContext = field(kw_only=False)
    """The preparing agent, the model selection and the cancellation signal."""

    reply: Future[ResolvedToolSet] | None = None
    """Completed with the reply, or the error."""

    loop: Any = None
    """The event loop ``async def`` conditions run on (``resolve_async``
    passes the loop that awaits it); None: the runtime's bound loop, else its
    own loop thread."""

    caller_context: contextvars.Context = field(default_factory=contextvars.copy_context)
    """The contextvars the conditions run in (each in a copy): by default
    the context current where this message is made."""


RegistryMessage: TypeAlias = (
    Register | RegisterAll | Unregister | Restrict | AddGuard | SetExecutor | Retract | ExecuteBatch | ResolveToolSet
)
"""Every public message the registry actor handles."""
