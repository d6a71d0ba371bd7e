"""Answers of approval services: the vocabulary the core understands and
whether the user asked to make an answer permanent. Private to
``policies``; :mod:`policies.approval` re-exports the public names."""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from dsh_actors import Agent, ApprovalRequest, InvalidTypeError, dumps, materialize

__all__ = [
    "ALLOWED_ONCE",
    "CANCELLED",
    "REJECTED",
    "UNAVAILABLE",
    "Answer",
    "Memory",
    "Service",
    "canonical_arguments",
    "decide",
    "then",
]

_T = TypeVar("_T")
_U = TypeVar("_U")

ALLOWED_ONCE: Final = "allowed-once"
REJECTED: Final = "rejected"
CANCELLED: Final = "cancelled"
UNAVAILABLE: Final = "unavailable"


@dataclass(frozen=True, slots=True)
class Answer:
    """A service's answer and whether the user asked to make it permanent."""

    answer: str
    remember: bool = False


def then(pending: Coroutine[Any, Any, _T], after: Callable[[_T], _U]) -> Coroutine[Any, Any, _U]:
    """``after(await pending)`` as a coroutine: how the answer of an
    ``async def`` service goes on (the pipeline awaits it on the batch's
    loop). ``pending`` is closed if that coroutine never starts."""

    async def run() -> _U:
        return after(await pending)

    coro = run()
    weakref.finalize(coro, pending.close)  # (a no-op once it was awaited)
    return coro


def _as_answer(answer: Any) -> Answer:
    return answer if type(answer) is Answer else Answer(answer)


def decide(service: Callable[[ApprovalRequest], Any], request: ApprovalRequest) -> Answer | Coroutine[Any, Any, Answer]:
    """Ask ``service``: its ``decide`` when it has one, else its plain answer
    (never to be remembered). An ``async def`` service's answer is a
    coroutine that gives the :class:`Answer`."""
    method = getattr(service, "decide", None)
    if callable(method):
        answer = method(request)
        if inspect.iscoroutine(answer):
            return then(answer, _as_answer)
        return _as_answer(answer)
    answer = service(request)
    if inspect.iscoroutine(answer):
        return then(answer, Answer)
    return Answer(answer)


def _text(answer: Answer) -> str:
    return answer.answer


class Service:
    """``service(request) -> str`` from ``decide`` (a coroutine when
    ``decide`` gives one: the service is then async)."""

    def decide(self, request: ApprovalRequest) -> Answer | Coroutine[Any, Any, Answer]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, request: ApprovalRequest) -> str | Coroutine[Any, Any, str]:
        answer = self.decide(request)
        if inspect.iscoroutine(answer):
            return then(answer, _text)
        return _as_answer(answer).answer

    def __bool__(self) -> bool:
        # A service is always truthy, even one whose __len__ (answers
        # remembered) is 0: ``service or default`` must keep it.
        return True


def canonical_arguments(arguments: Any) -> bytes | None:
    """The exact arguments as canonical JSON (sorted keys), or ``None`` when
    they are not lossless JSON (such calls are never remembered)."""
    try:
        return dumps(materialize(arguments), sort_keys=True)
    except Exception:  # noqa: BLE001
        return None


class Memory:
    """Answers made permanent (``"allowed-once"`` or ``"rejected"`` with
    ``remember=True``), keyed by the tool name, the exact arguments
    (canonical JSON) and, with ``per_agent``, the same
    :class:`~dsh_actors.Agent` object. Thread-safe.

    An agent's own answers are held weakly by the agent: no later request
    can be the same agent once it is freed, so they go with it (a farm that
    drops its agents does not keep each one, and its session, here)."""

    def __init__(self, *, per_agent: bool = True) -> None:
        if type(per_agent) is not bool:
            raise InvalidTypeError("policies.approval: per_agent must be True or False")
        self.per_agent = per_agent
        self._lock = threading.Lock()
        # (tool name, canonical arguments) -> answer, per agent (None: shared,
        # and a request without an agent).
        self._shared: dict[tuple[str, bytes], str] = {}
        self._by_agent: weakref.WeakKeyDictionary[Agent, dict[tuple[str, bytes], str]] = weakref.WeakKeyDictionary()

    def _answers(self, request: ApprovalRequest, *, create: bool) -> dict[tuple[str, bytes], str] | None:
        # (under _lock)
        agent = request.agent if self.per_agent else None
        if agent is None:
            return self._shared
        answers = self._by_agent.get(agent)
        if answers is None and create:
            answers = self._by_agent[agent] = {}
        return answers

    def recall(self, request: ApprovalRequest) -> str | None:
        """The answer remembered for ``request``, if any."""
        canonical = canonical_arguments(request.arguments)
        if canonical is None:
            return None
        with self._lock:
            answers = self._answers(request, create=False)
            return None if answers is None else answers.get((request.tool_name, canonical))

    def keep(self, request: ApprovalRequest, answer: Answer) -> None:
        """Remember ``answer`` when the user made it permanent."""
        if not answer.remember or answer.answer not in (ALLOWED_ONCE, REJECTED):
            return
        canonical = canonical_arguments(request.arguments)
        if canonical is not None:
            with self._lock:
                answers = self._answers(request, create=True)
                assert answers is not None
                answers[(request.tool_name, canonical)] = answer.answer

    def __len__(self) -> int:
        with self._lock:
            return len(self._shared) + sum(len(answers) for answers in self._by_agent.values())

    def forget(self, tool_name: str | None = None) -> None:
        """Forget every remembered answer (of ``tool_name`` only, if given)."""
        with self._lock:
            for answers in (self._shared, *self._by_agent.values()):
                if tool_name is None:
                    answers.clear()
                else:
                    for key in [key for key in answers if key[0] == tool_name]:
                        del answers[key]
