"""Ready approval services for ``rt.approvals.set(...)``.

The routing is core (``docs/reference.md``, section 5): a
``tools/pre-execute`` listener returns ``Ask``, the pipeline calls the installed service with an
:class:`~dsh_actors.ApprovalRequest`, and only ``"allowed-once"`` runs the
call (``"rejected"``, ``"cancelled"``, ``"unavailable"`` deny it with their
pinned reasons). This module provides services to install:

:class:`RuleService`
    Rules by tool name and by a predicate on the arguments: allow, deny or
    ask (delegate to another service). First match wins; a default applies
    when none matches.
:class:`RememberingService`
    Wraps a service and remembers the answers the user chose to make
    permanent ("always" / "never"), keyed by agent, tool and the exact
    arguments (canonical JSON). A remembered answer is never applied to
    another tool, other arguments, or (by default) another agent.
:class:`TerminalPrompt`
    Asks a person on a terminal: shows the tool, the reason and the
    arguments and reads ``y``/``n``/``a`` (always)/``never``; it remembers
    "always" and "never" itself (same key as ``RememberingService``). It
    observes the request's signal (``"cancelled"``) and end of input
    (``"unavailable"``).

Each service is a plain callable ``service(request) -> str`` and also has
``decide(request) -> Answer``, which says whether the answer should be
remembered; the services compose::

    prompt = TerminalPrompt()                        # remembers "always" / "never"
    service = RuleService(
        [allow("read_file"), deny("rm", when=lambda a: a.get("recursive") is True)],
        default="ask",
        ask=prompt,
    )
    rt.use(policies.approval, service=service)      # or rt.approvals.set(service)

(Rules outside the memory, as above, means a rule added later still beats
a remembered "always".)

Threads: a service runs on the thread that prepares the call (a batch's
executor thread, so a pending prompt holds up only that batch) and may
block; the prompt serves one request at a time and waits for its turn
observing each request's signal. ``RuleService`` and ``RememberingService``
may delegate to an ``async def`` service (its ``decide`` or ``__call__``):
they are then async for that request (a coroutine the pipeline awaits on
the batch's loop), and remember its answer the same way once it comes.
"""

from __future__ import annotations

import difflib
import inspect
import threading
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

from loguru import logger

from dsh_actors import ApprovalRequest, InvalidTypeError, InvalidValueError, ToolRuntime

from ._answer import (
    ALLOWED_ONCE,
    CANCELLED,
    REJECTED,
    UNAVAILABLE,
    Answer,
    Memory,
    Service,
    canonical_arguments,
    decide,
    then,
)
from ._common import check_no_unknown, check_runtime
from ._terminal import PROMPT, TerminalPrompt, printable

__all__ = [
    "ALLOWED_ONCE",
    "CANCELLED",
    "PROMPT",
    "REJECTED",
    "UNAVAILABLE",
    "Answer",
    "Memory",
    "RememberingService",
    "Rule",
    "RuleService",
    "TerminalPrompt",
    "allow",
    "apply",
    "ask",
    "canonical_arguments",
    "decide",
    "deny",
    "printable",
]

_POLICY = "policies.approval"

Action = Literal["allow", "deny", "ask"]
_ACTIONS: Final = ("allow", "deny", "ask")

#: How alike a rule's tool name and a requested one must be for a typo
#: (``difflib``'s ratio: ``read_fille``/``read_file`` 0.95, ``bsh``/``bash``
#: 0.86; ``read_file``/``write_file``, two tools, 0.74).
_TYPO_CUTOFF: Final = 0.8
#: The requested tool names a RuleService remembers having checked (the
#: model may make names up: past this many it starts over).
_CHECKED_LIMIT: Final = 1024


# --------------------------------------------------------------------------
# rules
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    """``action`` for calls of ``tools`` (``None``: any tool) whose
    arguments satisfy ``when(arguments)`` (``None``: always). ``when`` gets
    the frozen arguments and must answer exactly ``True`` to match; if it
    raises, the exception fails the call (it is not run)."""

    action: Action
    tools: frozenset[str] | None = None
    when: Callable[[Any], object] | None = None

    def __post_init__(self) -> None:
        if self.action not in _ACTIONS:
            raise InvalidValueError(f"{_POLICY}: a rule's action is one of {_ACTIONS}, got {self.action!r}")
        if self.tools is not None:
            object.__setattr__(self, "tools", _names(self.tools))
        if self.when is not None and not callable(self.when):
            raise InvalidTypeError(f"{_POLICY}: a rule's when= must be callable (it gets the arguments)")

    def matches(self, request: ApprovalRequest) -> bool:
        if self.tools is not None and request.tool_name not in self.tools:
            return False
        return self.when is None or self.when(request.arguments) is True


def _names(tools: object) -> frozenset[str]:
    if isinstance(tools, str):
        return frozenset((tools,))
    if not isinstance(tools, Iterable):
        raise InvalidTypeError(f"{_POLICY}: tools must be a name or a collection of names, got {tools!r}")
    names = tuple(tools)
    for name in names:
        if type(name) is not str or not name:
            raise InvalidTypeError(f"{_POLICY}: tool names must be non-empty strings, got {name!r}")
    return frozenset(names)


def _rule(action: Action, tools: tuple[str, ...], when: Callable[[Any], object] | None) -> Rule:
    return Rule(action, _names(tools) if tools else None, when)


def allow(*tools: str, when: Callable[[Any], object] | None = None) -> Rule:
    """Allow calls of ``tools`` (all tools when none is named)."""
    return _rule("allow", tools, when)


def deny(*tools: str, when: Callable[[Any], object] | None = None) -> Rule:
    """Deny (``"rejected"``) calls of ``tools`` (all tools when none is named)."""
    return _rule("deny", tools, when)


def ask(*tools: str, when: Callable[[Any], object] | None = None) -> Rule:
    """Ask the delegate service about calls of ``tools``."""
    return _rule("ask", tools, when)


class RuleService(Service):
    """First matching rule wins; ``default`` when none matches.

    ``allow`` answers ``"allowed-once"``, ``deny`` ``"rejected"`` (so the
    model reads ``the user rejected tool "<n>"``), ``ask`` delegates to the
    ``ask`` service (its answer, remember flag included), or answers
    ``"unavailable"`` when there is none.

    Rules match tool names exactly, and a service knows no runtime: a name
    no registered tool has (tools may be registered after the service is
    set, in an agent's scope, or mounted later) is not an error. A likely
    typo is logged instead, at WARNING, once per service and requested
    name: the first time the service is asked about a tool that no rule
    names while a rule names one spelled almost alike (``read_fille`` for
    ``read_file``), since that rule never applies (a ``deny`` rule's typo
    lets the default decide).
    """

    def __init__(
        self,
        rules: Iterable[Rule],
        *,
        default: Action = "ask",
        ask: Callable[[ApprovalRequest], Any] | None = None,
    ) -> None:
        if isinstance(rules, Rule):
            raise InvalidTypeError(f"{_POLICY}: rules must be a collection of Rule, not a single Rule")
        self.rules = tuple(rules)
        for rule in self.rules:
            if not isinstance(rule, Rule):
                raise InvalidTypeError(f"{_POLICY}: rules must be Rule objects, got {type(rule).__qualname__}")
        if default not in _ACTIONS:
            raise InvalidValueError(f"{_POLICY}: default is one of {_ACTIONS}, got {default!r}")
        if ask is not None and not callable(ask):
            raise InvalidTypeError(f"{_POLICY}: ask= must be an approval service (callable)")
        self.default: Action = default
        self.ask = ask
        self._checked: set[str] = set()
        self._checked_lock = threading.Lock()

    def action_for(self, request: ApprovalRequest) -> Action:
        self._check_named(request.tool_name)
        for rule in self.rules:
            if rule.matches(request):
                return rule.action
        return self.default

    def decide(self, request: ApprovalRequest) -> Answer | Coroutine[Any, Any, Answer]:
        action = self.action_for(request)
        if action == "allow":
            return Answer(ALLOWED_ONCE)
        if action == "deny":
            return Answer(REJECTED)
        if self.ask is None:
            return Answer(UNAVAILABLE)
        return decide(self.ask, request)

    def _check_named(self, name: str) -> None:
        """The first time this service is asked about tool ``name``: a
        WARNING if no rule names it but one names a tool spelled almost
        alike (a typo: that rule never applies)."""
        with self._checked_lock:
            if name in self._checked:
                return
            if len(self._checked) >= _CHECKED_LIMIT:
                self._checked.clear()
            self._checked.add(name)
        named = sorted({tool for rule in self.rules if rule.tools is not None for tool in rule.tools})
        if name in named:
            return
        close = difflib.get_close_matches(name, named, n=1, cutoff=_TYPO_CUTOFF)
        if close:
            logger.warning(
                '{}: a RuleService was asked about tool "{}", which none of its rules names, but a rule names '
                '"{}": rules match tool names exactly, so if that is a typo the rule never applies; name the '
                "tool as it is registered",
                _POLICY,
                name,
                close[0],
            )


# --------------------------------------------------------------------------
# remembered decisions
# --------------------------------------------------------------------------


class RememberingService(Service):
    """Remembers the answers ``inner`` marks ``remember=True``
    (``"allowed-once"`` or ``"rejected"`` only) and gives them again, without
    asking, for a later request with the same key: the tool name, the exact
    arguments (canonical JSON) and, with ``per_agent=True`` (the default),
    the same :class:`~dsh_actors.Agent` object (held weakly: a dropped
    agent's answers go with it). Everything else is asked.
    Thread-safe. (A :class:`TerminalPrompt` remembers on its own; wrap it
    to share one memory with other services, or to remember across agents
    with ``per_agent=False``. :meth:`forget` also forgets in ``inner`` when
    it has a ``forget`` of its own.) ``inner`` may be ``async def``: a
    remembered answer is still given at once, anything else is asked by
    awaiting ``inner`` on the batch's loop, and remembered once it answers."""

    def __init__(self, inner: Callable[[ApprovalRequest], Any], *, per_agent: bool = True) -> None:
        if not callable(inner):
            raise InvalidTypeError(f"{_POLICY}: RememberingService wraps an approval service (a callable)")
        if type(per_agent) is not bool:
            raise InvalidTypeError(f"{_POLICY}: per_agent must be True or False")
        self.inner = inner
        self.per_agent = per_agent
        self._memory = Memory(per_agent=per_agent)

    def decide(self, request: ApprovalRequest) -> Answer | Coroutine[Any, Any, Answer]:
        known = self._memory.recall(request)
        if known is not None:
            return Answer(known)
        answer = decide(self.inner, request)
        if inspect.iscoroutine(answer):  # an async inner service: kept once awaited
            return then(answer, lambda settled: self._kept(request, settled))
        return self._kept(request, cast(Answer, answer))

    def _kept(self, request: ApprovalRequest, answer: Answer) -> Answer:
        self._memory.keep(request, answer)
        return Answer(answer.answer)

    def __len__(self) -> int:
        return len(self._memory)

    def forget(self, tool_name: str | None = None) -> None:
        """Forget every remembered answer (of ``tool_name`` only, if given),
        here and in ``inner`` if it remembers too."""
        self._memory.forget(tool_name)
        inner_forget = getattr(self.inner, "forget", None)
        if callable(inner_forget):
            inner_forget(tool_name)


# --------------------------------------------------------------------------
# the plugin
# --------------------------------------------------------------------------


def apply(
    rt: ToolRuntime, /, *, service: Callable[[ApprovalRequest], str] | None = None, **unknown: Any
) -> Callable[[], None]:
    """Install ``service`` with ``rt.approvals.set``; the disposer restores
    the previous service."""
    check_runtime(_POLICY, rt)
    check_no_unknown(_POLICY, unknown, "service")
    if service is None:
        raise InvalidTypeError(f"{_POLICY}: service= is required (for example RuleService(...) or TerminalPrompt())")
    if not callable(service):
        raise InvalidTypeError(f"{_POLICY}: service must be callable: service(request) -> str")
    return rt.approvals.set(cast(Any, service))
