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
    :class:`~dsh_actors.Agent` object. Thread-safe."""

    def __init__(self, *, per_agent: bool = True) -> None:
        if type(per_agent) is not bool:
            raise InvalidTypeError("policies.approval: per_agent must be True or False")
        self.per_agent = per_agent
        self._lock = threading.Lock()
        self._answers: dict[tuple[Agent | None, str, bytes], str] = {}

    def _key(self, request: ApprovalRequest) -> tuple[Agent | None, str, bytes] | None:
        canonical = canonical_arguments(request.arguments)
        if canonical is None:
            return None
        return (request.agent if self.per_agent else None, request.tool_name, canonical)

    def recall(self, request: ApprovalRequest) -> str | None:
        """The answer remembered for ``request``, if any."""
        key = self._key(request)
        if key is None:
            return None
        with self._lock:
            return self._answers.get(key)

    def keep(self, request: ApprovalRequest, answer: Answer) -> None:
        """Remember ``answer`` when the user made it permanent."""
        if not answer.remember or answer.answer not in (ALLOWED_ONCE, REJECTED):
            return
        key = self._key(request)
        if key is not None:
            with self._lock:
                self._answers[key] = answer.answer

    def __len__(self) -> int:
        with self._lock:
            return len(self._answers)

    def forget(self, tool_name: str | None = None) -> None:
        """Forget every remembered answer (of ``tool_name`` only, if given)."""
        with self._lock:
            if tool_name is None:
                self._answers.clear()
            else:
                self._answers = {k: v for k, v in self._answers.items() if k[1] != tool_name}
